// Wire <-> SampleCrop (see encoded_image_proto.h).
#include "proto/encoded_image_proto.h"

namespace shardcast {

SampleCrop CropFromWire(const shardcast::v1::EncodedImage& image, TransformMode mode) {
  SampleCrop crop;
  crop.mode = mode;
  crop.source_width = image.source_width();
  crop.source_height = image.source_height();
  crop.left = image.left() + image.cut_left();
  crop.top = image.top() + image.cut_top();
  crop.width = image.width();
  crop.height = image.height();
  crop.resize_width = image.resize_width();
  crop.resize_height = image.resize_height();
  crop.flip = image.flip();
  crop.output = image.output_size();
  return crop;
}

std::optional<SourceWindow> CutFromWire(const shardcast::v1::EncodedImage& image) {
  if (image.cut_width() <= 0) return std::nullopt;
  return SourceWindow{image.cut_left(), image.cut_top(), image.cut_width(), image.cut_height()};
}

void SetWireCrop(const SampleCrop& crop, const SourceWindow* cut,
                 shardcast::v1::EncodedImage* image) {
  image->set_source_width(crop.source_width);
  image->set_source_height(crop.source_height);
  image->set_left(crop.left - (cut != nullptr ? cut->left : 0));
  image->set_top(crop.top - (cut != nullptr ? cut->top : 0));
  image->set_width(crop.width);
  image->set_height(crop.height);
  image->set_resize_width(crop.resize_width);
  image->set_resize_height(crop.resize_height);
  image->set_flip(crop.flip);
  image->set_output_size(crop.output);
  image->set_cut_left(cut != nullptr ? cut->left : 0);
  image->set_cut_top(cut != nullptr ? cut->top : 0);
  image->set_cut_width(cut != nullptr ? cut->width : 0);
  image->set_cut_height(cut != nullptr ? cut->height : 0);
}

}  // namespace shardcast

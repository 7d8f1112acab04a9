// The one mapping between the wire's EncodedImage crop fields and the image library's
// SampleCrop / SourceWindow: the server writes it, every client and test reads it.
#ifndef SHARDCAST_PROTO_ENCODED_IMAGE_PROTO_H_
#define SHARDCAST_PROTO_ENCODED_IMAGE_PROTO_H_

#include <optional>

#include "common/image/image_transform.h"
#include "common/plan/job_config.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast {

// The crop `image` carries, in the stored image's coordinates (a cut's corner added
// back to left and top), for the job's transform `mode`.
SampleCrop CropFromWire(const shardcast::v1::EncodedImage& image, TransformMode mode);

// The cut `image.data` holds; nullopt when it is the stored image (cut_width 0).
std::optional<SourceWindow> CutFromWire(const shardcast::v1::EncodedImage& image);

// Sets `image`'s crop fields from `crop` (stored-image coordinates) and, with a `cut`,
// its cut fields, left and top then counted from the cut. Leaves `data` alone.
void SetWireCrop(const SampleCrop& crop, const SourceWindow* cut,
                 shardcast::v1::EncodedImage* image);

}  // namespace shardcast

#endif  // SHARDCAST_PROTO_ENCODED_IMAGE_PROTO_H_

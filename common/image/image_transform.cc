// torchvision-equivalent Resize+CenterCrop and RandomResizedCrop+HFlip, written
// straight into a planar uint8 buffer; only output pixels that survive the crop
// are computed.
#include "common/image/image_transform.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/image/image_decode_internal.h"
#include "common/image/jpeg_region_decode.h"
#include "common/image/resample.h"
#include "common/util/splitmix64.h"

namespace shardcast {
namespace {

using internal::ComputeTaps;
using internal::Resample;
using internal::ResampleTaps;

// A thread keeps its decode buffer between images; one bigger than this (a huge
// photo) is released after use instead.
constexpr size_t kMaxRetainedScratch = size_t{64} << 20;

// ------------------------------------------------------------ geometry

absl::Status CheckCenterSpec(const TransformSpec& spec) {
  if (spec.resize < 1 || spec.resize > kMaxResize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("transform resize %d is outside [1, %d]", spec.resize, kMaxResize));
  }
  // torchvision would zero-pad a crop larger than the resized image; a
  // configuration that pads every image is a mistake, so refuse it.
  if (spec.crop > spec.resize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "center transform: crop %d is larger than resize %d (short side)", spec.crop, spec.resize));
  }
  return absl::OkStatus();
}

// Every path below runs after this check, so their switches on the mode (exhaustive,
// no default: -Wswitch flags a new mode at each) never see a value that is no mode.
absl::Status CheckSpec(const TransformSpec& spec) {
  if (spec.crop < 1 || spec.crop > kMaxCrop) {
    return absl::InvalidArgumentError(
        absl::StrFormat("transform crop %d is outside [1, %d]", spec.crop, kMaxCrop));
  }
  switch (spec.mode) {
    case TransformMode::kCenter:
      return CheckCenterSpec(spec);
    case TransformMode::kRandom:
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown transform mode %d", static_cast<int>(spec.mode)));
}

absl::Status CheckImage(const RgbImage& image) {
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return absl::InvalidArgumentError(
        absl::StrFormat("image %dx%d with %d bytes is not a valid RGB image", image.width,
                        image.height, image.pixels.size()));
  }
  return absl::OkStatus();
}

// torchvision Resize(S) (transforms.functional._compute_resized_output_size)
// then CenterCrop(C) (top = int(round((h - C) / 2.0)), round half to even).
struct CenterGeometry {
  int new_w = 0;
  int new_h = 0;
  int top = 0;
  int left = 0;
};

// The longest side Resize(S) may produce. The geometry is computed before any pixel
// exists, from a header that may claim a 1 x 80,000,000 image: Resize(31) of that is
// 2.5e9 pixels long, past int. No real photograph comes near this bound.
constexpr int64_t kMaxResizedSide = int64_t{1} << 24;

absl::StatusOr<CenterGeometry> CenterResizeCrop(int w, int h, int resize, int crop) {
  const int64_t shorter = std::min(w, h), longer = std::max(w, h);
  const int64_t new_long = int64_t{resize} * longer / shorter;  // floor, as int() in Python
  if (new_long > kMaxResizedSide) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a %dx%d image resized to short side %d would be %d pixels long (over %d): aspect "
        "ratio too extreme",
        w, h, resize, new_long, kMaxResizedSide));
  }
  CenterGeometry g;
  g.new_w = w <= h ? resize : static_cast<int>(new_long);
  g.new_h = w <= h ? static_cast<int>(new_long) : resize;
  g.top = static_cast<int>(std::nearbyint((g.new_h - crop) / 2.0));
  g.left = static_cast<int>(std::nearbyint((g.new_w - crop) / 2.0));
  return g;
}

// kCenter's taps for the orig_w x orig_h original decoded at `factor` (1 = not
// DCT-scaled) to scaled_w x scaled_h: geometry `g` comes from the original size,
// sampling from the scaled pixels.
void CenterTaps(const CenterGeometry& g, int orig_w, int orig_h, int scaled_w, int scaled_h,
                double factor, int crop, ResampleTaps* t) {
  const double sx = orig_w * factor / g.new_w, sy = orig_h * factor / g.new_h;
  ComputeTaps(g.left * sx, sx, crop, 0, scaled_w, &t->x);
  ComputeTaps(g.top * sy, sy, crop, 0, scaled_h, &t->y);
  t->flip = false;
}

// The taps of a region given in original coordinates, sampled from the original
// decoded at `factor` to scaled_w x scaled_h. At factor 1 the windows clamp to the
// region itself, exactly as torchvision crops first and resizes the crop.
void RegionTaps(const CropParams& p, int scaled_w, int scaled_h, double factor, int crop,
                ResampleTaps* t) {
  const double x0 = p.left * factor, y0 = p.top * factor;
  const double rw = p.width * factor, rh = p.height * factor;
  const int xlo = std::clamp(static_cast<int>(std::floor(x0)), 0, scaled_w - 1);
  const int ylo = std::clamp(static_cast<int>(std::floor(y0)), 0, scaled_h - 1);
  const int xhi = std::clamp(static_cast<int>(std::ceil(x0 + rw)), xlo + 1, scaled_w);
  const int yhi = std::clamp(static_cast<int>(std::ceil(y0 + rh)), ylo + 1, scaled_h);
  ComputeTaps(x0, rw / crop, crop, xlo, xhi, &t->x);
  ComputeTaps(y0, rh / crop, crop, ylo, yhi, &t->y);
  t->flip = p.flip;
}

absl::Status CheckRegion(const CropParams& p, int w, int h) {
  if (p.width <= 0 || p.height <= 0 || p.left < 0 || p.top < 0 ||
      static_cast<int64_t>(p.left) + p.width > w || static_cast<int64_t>(p.top) + p.height > h) {
    return absl::InvalidArgumentError(
        absl::StrFormat("crop region %dx%d at (left %d, top %d) is not inside the %dx%d image",
                        p.width, p.height, p.left, p.top, w, h));
  }
  return absl::OkStatus();
}

}  // namespace

CropParams RandomResizedCropParams(int width, int height, uint64_t augment_seed) {
  SplitMix64 rng(augment_seed);
  CropParams p;
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(3.0 / 4.0), log_hi = std::log(4.0 / 3.0);
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target_area = area * (0.08 + rng.Uniform() * (1.0 - 0.08));
    const double aspect = std::exp(log_lo + rng.Uniform() * (log_hi - log_lo));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(target_area * aspect)));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(target_area / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      p.top = static_cast<int>(rng.Below(int64_t{height} - h + 1));
      p.left = static_cast<int>(rng.Below(int64_t{width} - w + 1));
      p.width = w;
      p.height = h;
      found = true;
    }
  }
  if (!found) {  // torchvision's fallback: centre crop with the ratio clamped
    const double in_ratio = static_cast<double>(width) / height;
    if (in_ratio < 3.0 / 4.0) {
      p.width = width;
      p.height = static_cast<int>(std::nearbyint(width / (3.0 / 4.0)));
    } else if (in_ratio > 4.0 / 3.0) {
      p.height = height;
      p.width = static_cast<int>(std::nearbyint(height * (4.0 / 3.0)));
    } else {
      p.width = width;
      p.height = height;
    }
    p.width = std::clamp(p.width, 1, std::max(width, 1));
    p.height = std::clamp(p.height, 1, std::max(height, 1));
    p.top = (height - p.height) / 2;
    p.left = (width - p.width) / 2;
  }
  p.flip = rng.Uniform() < 0.5;
  return p;
}

absl::Status ResizedCropToChw(const RgbImage& image, const CropParams& params, int crop,
                              uint8_t* out_chw) {
  if (absl::Status s = CheckImage(image); !s.ok()) return s;
  if (crop < 1 || crop > kMaxCrop) {
    return absl::InvalidArgumentError(
        absl::StrFormat("crop %d is outside [1, %d]", crop, kMaxCrop));
  }
  if (absl::Status s = CheckRegion(params, image.width, image.height); !s.ok()) return s;
  ResampleTaps taps;
  RegionTaps(params, image.width, image.height, 1.0, crop, &taps);
  Resample(image, 0, 0, taps, crop, out_chw);
  return absl::OkStatus();
}

absl::Status ApplyTransform(const RgbImage& image, const TransformSpec& spec, uint64_t augment_seed,
                            uint8_t* out_chw) {
  if (absl::Status s = CheckSpec(spec); !s.ok()) return s;
  if (absl::Status s = CheckImage(image); !s.ok()) return s;
  ResampleTaps taps;
  switch (spec.mode) {
    case TransformMode::kCenter: {
      absl::StatusOr<CenterGeometry> g =
          CenterResizeCrop(image.width, image.height, spec.resize, spec.crop);
      if (!g.ok()) return g.status();
      CenterTaps(*g, image.width, image.height, image.width, image.height, 1.0, spec.crop, &taps);
      break;
    }
    case TransformMode::kRandom:
      RegionTaps(RandomResizedCropParams(image.width, image.height, augment_seed), image.width,
                 image.height, 1.0, spec.crop, &taps);
      break;
  }
  Resample(image, 0, 0, taps, spec.crop, out_chw);
  return absl::OkStatus();
}

namespace {

// Holds an admission's bytes for one decode and gives them back on every path.
class AdmittedBytes {
 public:
  AdmittedBytes(DecodeAdmission* admission, int64_t bytes) : admission_(admission), bytes_(bytes) {}
  ~AdmittedBytes() {
    if (admission_ != nullptr) admission_->Release(bytes_);
  }
  AdmittedBytes(const AdmittedBytes&) = delete;
  AdmittedBytes& operator=(const AdmittedBytes&) = delete;

 private:
  DecodeAdmission* const admission_;  // null: nothing held
  const int64_t bytes_;
};

}  // namespace

absl::Status DecodeAndTransform(absl::string_view encoded, const TransformSpec& spec,
                                uint64_t augment_seed, uint8_t* out_chw,
                                DecodeAdmission* admission) {
  if (absl::Status s = CheckSpec(spec); !s.ok()) return s;
  absl::StatusOr<ImageInfo> info = ReadImageInfo(encoded);
  if (!info.ok()) return info.status();
  const int w = info->width, h = info->height;

  // The region (in original pixels) that must keep at least `need_w` x `need_h`
  // pixels after DCT scaling: for kCenter the whole image must stay at least
  // the resized size (short side >= S), for kRandom the crop region >= C.
  CenterGeometry center;
  CropParams region;
  int64_t region_w = w, region_h = h, need_w = 0, need_h = 0;
  switch (spec.mode) {
    case TransformMode::kCenter: {
      absl::StatusOr<CenterGeometry> g = CenterResizeCrop(w, h, spec.resize, spec.crop);
      if (!g.ok()) return g.status();
      center = *g;
      need_w = center.new_w;
      need_h = center.new_h;
      break;
    }
    case TransformMode::kRandom:
      region = RandomResizedCropParams(w, h, augment_seed);
      region_w = region.width;
      region_h = region.height;
      need_w = need_h = spec.crop;
      break;
  }
  internal::ScalingFactor f;
  if (spec.dct_scaling && info->format == ImageFormat::kJpeg) {
    f = internal::ChooseScalingFactor([&](internal::ScalingFactor s) {
      return region_w * s.num >= need_w * s.denom && region_h * s.num >= need_h * s.denom;
    });
  }

  const int scaled_w = internal::ScaledSize(w, f), scaled_h = internal::ScaledSize(h, f);
  const double factor = static_cast<double>(f.num) / f.denom;
  thread_local ResampleTaps taps;  // its vectors keep their capacity between images
  switch (spec.mode) {
    case TransformMode::kCenter:
      CenterTaps(center, w, h, scaled_w, scaled_h, factor, spec.crop, &taps);
      break;
    case TransformMode::kRandom:
      RegionTaps(region, scaled_w, scaled_h, factor, spec.crop, &taps);
      break;
  }
  // Only the pixels the taps read: a sequential JPEG decodes just that rectangle.
  const internal::PixelRect needed{taps.x.needed_lo, taps.y.needed_lo,
                                   taps.x.needed_hi - taps.x.needed_lo,
                                   taps.y.needed_hi - taps.y.needed_lo};
  const bool region_decode = internal::RegionDecodable(*info, encoded);

  // Decided from the header alone, before any pixel buffer exists.
  std::optional<AdmittedBytes> admitted;
  if (admission != nullptr) {
    const int64_t bytes = region_decode ? internal::RegionDecodeBytes(needed, scaled_w, scaled_h)
                                        : DecodeBufferBytes(*info, f.num, f.denom);
    if (absl::Status s = admission->Acquire(bytes); !s.ok()) return s;
    admitted.emplace(admission, bytes);
  }

  thread_local RgbImage scratch;
  internal::PixelRect got{0, 0, scaled_w, scaled_h};
  absl::Status status = region_decode
                            ? internal::DecodeJpegRegion(encoded, f, needed, &scratch, &got)
                            : internal::DecodeInto(encoded, f, &scratch);
  if (status.ok() &&
      (scratch.width != got.width || scratch.height != got.height || got.x > needed.x ||
       got.y > needed.y || got.x + got.width < needed.x + needed.width ||
       got.y + got.height < needed.y + needed.height)) {
    status = absl::InternalError(absl::StrFormat(
        "decoded %dx%d at (%d, %d), needed %dx%d at (%d, %d) of %dx%d (header %dx%d, scale "
        "%d/%d)",
        scratch.width, scratch.height, got.x, got.y, needed.width, needed.height, needed.x,
        needed.y, scaled_w, scaled_h, w, h, f.num, f.denom));
  }
  if (status.ok()) Resample(scratch, got.x, got.y, taps, spec.crop, out_chw);
  if (scratch.pixels.capacity() > kMaxRetainedScratch) {
    std::vector<uint8_t>().swap(scratch.pixels);
  }
  return status;
}

}  // namespace shardcast

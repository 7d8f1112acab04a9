// torchvision-equivalent Resize+CenterCrop and RandomResizedCrop+HFlip, written
// straight into a planar uint8 buffer; only output pixels that survive the crop
// are computed.
#include "common/image/image_transform.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
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

absl::StatusOr<SampleCrop> PlanSampleCrop(int width, int height, const TransformSpec& spec,
                                          uint64_t augment_seed) {
  if (absl::Status s = CheckSpec(spec); !s.ok()) return s;
  if (width <= 0 || height <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("no crop of a %dx%d image", width, height));
  }
  SampleCrop crop;
  crop.mode = spec.mode;
  crop.source_width = width;
  crop.source_height = height;
  crop.output = spec.crop;
  switch (spec.mode) {
    case TransformMode::kCenter: {
      absl::StatusOr<CenterGeometry> g = CenterResizeCrop(width, height, spec.resize, spec.crop);
      if (!g.ok()) return g.status();
      crop.left = g->left;
      crop.top = g->top;
      crop.width = crop.height = spec.crop;
      crop.resize_width = g->new_w;
      crop.resize_height = g->new_h;
      break;
    }
    case TransformMode::kRandom: {
      const CropParams p = RandomResizedCropParams(width, height, augment_seed);
      crop.left = p.left;
      crop.top = p.top;
      crop.width = p.width;
      crop.height = p.height;
      crop.flip = p.flip;
      break;
    }
  }
  return crop;
}

namespace {

// A crop that came over the wire: every field within what PlanSampleCrop can make for
// a source_width x source_height image, so the taps below stay inside the image.
absl::Status CheckCrop(const SampleCrop& c) {
  if (c.output < 1 || c.output > kMaxCrop) {
    return absl::InvalidArgumentError(
        absl::StrFormat("crop output %d is outside [1, %d]", c.output, kMaxCrop));
  }
  if (c.source_width <= 0 || c.source_height <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("crop of a %dx%d image", c.source_width, c.source_height));
  }
  switch (c.mode) {
    case TransformMode::kCenter:
      if (c.resize_width < 1 || c.resize_height < 1 || c.resize_width > kMaxResizedSide ||
          c.resize_height > kMaxResizedSide || c.width != c.output || c.height != c.output ||
          c.left < 0 || c.top < 0 || int64_t{c.left} + c.output > c.resize_width ||
          int64_t{c.top} + c.output > c.resize_height) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "center crop %dx%d at (left %d, top %d) of the image resized to %dx%d is not "
            "inside it (output %d)",
            c.width, c.height, c.left, c.top, c.resize_width, c.resize_height, c.output));
      }
      return absl::OkStatus();
    case TransformMode::kRandom: {
      const CropParams p{c.top, c.left, c.height, c.width, c.flip};
      return CheckRegion(p, c.source_width, c.source_height);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown transform mode %d", static_cast<int>(c.mode)));
}

// What decoding `crop` of an image with header `info` takes: the DCT scale, the taps
// (in the coordinates of the whole stored image decoded at that scale) and the
// rectangle of those pixels the taps read.
struct CropDecodePlan {
  internal::ScalingFactor f;
  int scaled_w = 0;
  int scaled_h = 0;
  internal::PixelRect needed;
};

// REQUIRES: CheckCrop(crop) is OK. Fills `*taps` (the calling thread's, reused).
CropDecodePlan PlanCropDecode(const ImageInfo& info, const SampleCrop& crop, bool dct_scaling,
                              ResampleTaps* taps) {
  const int w = crop.source_width, h = crop.source_height;
  // The region (in original pixels) that must keep at least `need_w` x `need_h`
  // pixels after DCT scaling: for kCenter the whole image must stay at least
  // the resized size (short side >= S), for kRandom the crop region >= C.
  int64_t region_w = w, region_h = h, need_w = 0, need_h = 0;
  switch (crop.mode) {
    case TransformMode::kCenter:
      need_w = crop.resize_width;
      need_h = crop.resize_height;
      break;
    case TransformMode::kRandom:
      region_w = crop.width;
      region_h = crop.height;
      need_w = need_h = crop.output;
      break;
  }
  CropDecodePlan plan;
  if (dct_scaling && info.format == ImageFormat::kJpeg) {
    plan.f = internal::ChooseScalingFactor([&](internal::ScalingFactor s) {
      return region_w * s.num >= need_w * s.denom && region_h * s.num >= need_h * s.denom;
    });
  }
  plan.scaled_w = internal::ScaledSize(w, plan.f);
  plan.scaled_h = internal::ScaledSize(h, plan.f);
  const double factor = static_cast<double>(plan.f.num) / plan.f.denom;
  switch (crop.mode) {
    case TransformMode::kCenter: {
      const CenterGeometry g{crop.resize_width, crop.resize_height, crop.top, crop.left};
      CenterTaps(g, w, h, plan.scaled_w, plan.scaled_h, factor, crop.output, taps);
      break;
    }
    case TransformMode::kRandom:
      RegionTaps(CropParams{crop.top, crop.left, crop.height, crop.width, crop.flip}, plan.scaled_w,
                 plan.scaled_h, factor, crop.output, taps);
      break;
  }
  // Only the pixels the taps read: a sequential JPEG decodes just that rectangle.
  plan.needed = internal::PixelRect{taps->x.needed_lo, taps->y.needed_lo,
                                    taps->x.needed_hi - taps->x.needed_lo,
                                    taps->y.needed_hi - taps->y.needed_lo};
  return plan;
}

// The decode buffers decoding `want` of `encoded` (header `info`) at `f` allocates:
// the region decode's when it applies, else the whole image's.
int64_t CropDecodeBytes(const ImageInfo& info, absl::string_view encoded, internal::ScalingFactor f,
                        const internal::PixelRect& want) {
  return internal::RegionDecodable(info, encoded)
             ? internal::RegionDecodeBytes(want, internal::ScaledSize(info.width, f),
                                           internal::ScaledSize(info.height, f))
             : DecodeBufferBytes(info, f.num, f.denom);
}

// Decodes the part of `encoded` (header `info`; the stored image or its cut at
// `window`) that `crop` reads and resamples it into `out_chw`.
absl::Status DecodeCrop(absl::string_view encoded, const ImageInfo& info, const SampleCrop& crop,
                        bool dct_scaling, const SourceWindow& window, uint8_t* out_chw,
                        DecodeAdmission* admission) {
  thread_local ResampleTaps taps;  // its vectors keep their capacity between images
  const CropDecodePlan plan = PlanCropDecode(info, crop, dct_scaling, &taps);
  const internal::ScalingFactor f = plan.f;
  // The window's origin in the scaled image: whole pixels, as a cut's corner is on the
  // MCU grid (a multiple of 8) and the scales are 1/1 .. 1/8.
  if ((int64_t{window.left} * f.num) % f.denom != 0 ||
      (int64_t{window.top} * f.num) % f.denom != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a cut at (%d, %d) is not on the %d/%d scale's pixel grid", window.left,
                        window.top, f.num, f.denom));
  }
  const int origin_x = static_cast<int>(int64_t{window.left} * f.num / f.denom);
  const int origin_y = static_cast<int>(int64_t{window.top} * f.num / f.denom);
  const int window_w = internal::ScaledSize(window.width, f);
  const int window_h = internal::ScaledSize(window.height, f);
  const internal::PixelRect& needed = plan.needed;
  if (needed.x < origin_x || needed.y < origin_y || needed.x + needed.width > origin_x + window_w ||
      needed.y + needed.height > origin_y + window_h) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the image sent (%dx%d at (%d, %d) of the stored %dx%d) does not hold the pixels "
        "the crop reads",
        window.width, window.height, window.left, window.top, crop.source_width,
        crop.source_height));
  }
  // `needed` in the coordinates of the image in `encoded`.
  const internal::PixelRect want{needed.x - origin_x, needed.y - origin_y, needed.width,
                                 needed.height};
  const bool region_decode = internal::RegionDecodable(info, encoded);

  // Decided from the header alone, before any pixel buffer exists.
  MemoryGrant admitted;  // given back on every path out, after `decoded` is freed
  if (admission != nullptr) {
    absl::StatusOr<MemoryGrant> grant =
        MemoryGrant::Acquire(admission, CropDecodeBytes(info, encoded, f, want));
    if (!grant.ok()) return grant.status();
    admitted = *std::move(grant);
  }

  // The decoded pixels live no longer than their admission: a thread keeps no decode
  // buffer between images, since one kept per thread would sit outside the bound (1,024
  // client threads of large PNGs held 1.2 GB beside a 64 MiB max_decode_memory).
  RgbImage decoded;
  internal::PixelRect got{0, 0, window_w, window_h};
  absl::Status status = region_decode ? internal::DecodeJpegRegion(encoded, f, want, &decoded, &got)
                                      : internal::DecodeInto(encoded, f, &decoded);
  if (status.ok() && (decoded.width != got.width || decoded.height != got.height ||
                      got.x > want.x || got.y > want.y || got.x + got.width < want.x + want.width ||
                      got.y + got.height < want.y + want.height)) {
    status = absl::InternalError(absl::StrFormat(
        "decoded %dx%d at (%d, %d), needed %dx%d at (%d, %d) of %dx%d (header %dx%d, scale "
        "%d/%d)",
        decoded.width, decoded.height, got.x, got.y, want.width, want.height, want.x, want.y,
        window_w, window_h, info.width, info.height, f.num, f.denom));
  }
  if (status.ok())
    Resample(decoded, origin_x + got.x, origin_y + got.y, taps, crop.output, out_chw);
  return status;
}

}  // namespace

absl::StatusOr<EncodedPlan> PlanEncodedSample(absl::string_view encoded, const TransformSpec& spec,
                                              uint64_t augment_seed) {
  if (absl::Status s = CheckSpec(spec); !s.ok()) return s;
  EncodedPlan plan;
  absl::StatusOr<ImageInfo> info = ReadImageInfo(encoded);
  if (!info.ok()) return info.status();
  plan.info = *info;
  absl::StatusOr<SampleCrop> crop = PlanSampleCrop(info->width, info->height, spec, augment_seed);
  if (!crop.ok()) return crop.status();
  plan.crop = *crop;
  ResampleTaps taps;
  const CropDecodePlan decode = PlanCropDecode(plan.info, plan.crop, spec.dct_scaling, &taps);
  plan.decode_bytes = CropDecodeBytes(plan.info, encoded, decode.f, decode.needed);
  return plan;
}

absl::StatusOr<SourceRect> SourcePixelsRead(const ImageInfo& info, const SampleCrop& crop,
                                            bool dct_scaling) {
  if (absl::Status s = CheckCrop(crop); !s.ok()) return s;
  ResampleTaps taps;
  const CropDecodePlan plan = PlanCropDecode(info, crop, dct_scaling, &taps);
  // Scaled pixel x covers source pixels [x * denom / num, (x + 1) * denom / num).
  const int num = plan.f.num, denom = plan.f.denom;
  const auto to_source_lo = [&](int v) { return static_cast<int>(int64_t{v} * denom / num); };
  const auto to_source_hi = [&](int v, int limit) {
    return static_cast<int>(std::min<int64_t>((int64_t{v} * denom + num - 1) / num, limit));
  };
  SourceRect rect;
  rect.left = to_source_lo(plan.needed.x);
  rect.top = to_source_lo(plan.needed.y);
  rect.width = to_source_hi(plan.needed.x + plan.needed.width, crop.source_width) - rect.left;
  rect.height = to_source_hi(plan.needed.y + plan.needed.height, crop.source_height) - rect.top;
  return rect;
}

absl::Status DecodeWithCrop(absl::string_view encoded, const SampleCrop& crop, bool dct_scaling,
                            uint8_t* out_chw, DecodeAdmission* admission,
                            const SourceWindow* window) {
  if (absl::Status s = CheckCrop(crop); !s.ok()) return s;
  absl::StatusOr<ImageInfo> info = ReadImageInfo(encoded);
  if (!info.ok()) return info.status();
  SourceWindow whole{0, 0, crop.source_width, crop.source_height};
  const SourceWindow& w = window != nullptr ? *window : whole;
  if (w.left < 0 || w.top < 0 || w.width <= 0 || w.height <= 0 ||
      int64_t{w.left} + w.width > crop.source_width ||
      int64_t{w.top} + w.height > crop.source_height) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cut %dx%d at (%d, %d) is not inside the stored %dx%d image", w.width,
                        w.height, w.left, w.top, crop.source_width, crop.source_height));
  }
  if (info->width != w.width || info->height != w.height) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the image's header says %dx%d, its crop was planned for %dx%d",
                        info->width, info->height, w.width, w.height));
  }
  if (window != nullptr && info->format != ImageFormat::kJpeg) {
    return absl::InvalidArgumentError("a cut image must be a JPEG");
  }
  // The scale is chosen and the taps placed on the stored image's size: with a cut,
  // `info` holds the cut's size, the rest of the header is the stored image's.
  ImageInfo source_info = *info;
  source_info.width = crop.source_width;
  source_info.height = crop.source_height;
  return DecodeCrop(encoded, window != nullptr ? *info : source_info, crop, dct_scaling, w, out_chw,
                    admission);
}

absl::Status ApplyCrop(const RgbImage& image, const SampleCrop& crop, uint8_t* out_chw) {
  if (absl::Status s = CheckImage(image); !s.ok()) return s;
  if (absl::Status s = CheckCrop(crop); !s.ok()) return s;
  if (image.width != crop.source_width || image.height != crop.source_height) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a %dx%d image, its crop was planned for %dx%d", image.width, image.height,
                        crop.source_width, crop.source_height));
  }
  ResampleTaps taps;
  ImageInfo info;  // not a JPEG: no DCT scale
  PlanCropDecode(info, crop, /*dct_scaling=*/false, &taps);
  Resample(image, 0, 0, taps, crop.output, out_chw);
  return absl::OkStatus();
}

absl::Status DecodeAndTransform(absl::string_view encoded, const TransformSpec& spec,
                                uint64_t augment_seed, uint8_t* out_chw,
                                DecodeAdmission* admission) {
  if (absl::Status s = CheckSpec(spec); !s.ok()) return s;
  absl::StatusOr<ImageInfo> info = ReadImageInfo(encoded);
  if (!info.ok()) return info.status();
  absl::StatusOr<SampleCrop> crop = PlanSampleCrop(info->width, info->height, spec, augment_seed);
  if (!crop.ok()) return crop.status();
  return DecodeCrop(encoded, *info, *crop, spec.dct_scaling,
                    SourceWindow{0, 0, info->width, info->height}, out_chw, admission);
}

}  // namespace shardcast

// Decode (TurboJPEG, libpng, libwebp) + torchvision-equivalent transforms into a caller's
// uint8 CHW buffer: the per-sample work of the serve path.
#ifndef SHARDCAST_COMMON_IMAGE_IMAGE_TRANSFORM_H_
#define SHARDCAST_COMMON_IMAGE_IMAGE_TRANSFORM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/image/image_types.h"
#include "common/memory/memory_budget.h"
#include "common/plan/job_config.h"

namespace shardcast {

struct DecodeOptions {
  // When > 0, JPEGs may be decoded with DCT-domain downscaling (1/2, 1/4, 1/8...)
  // as long as the decoded width >= min_width and height >= min_height.
  int min_width = 0;
  int min_height = 0;
};

// Sniffs the content (JPEG, PNG or WebP, whatever the extension says); any JPEG
// colourspace (YCbCr any subsampling, grayscale, CMYK/YCCK), PNG and still WebP
// (lossy, lossless, with alpha; an animated one is refused) -> RGB.
// Thread-safe. Errors say what the content looked like and why it failed.
// Pixels match PIL's Image.open(...).convert("RGB"): CMYK as Adobe-inverted,
// PNG and WebP alpha dropped (not composited), 16-bit PNG -> high byte but 16-bit grey
// clipped at 255 (PIL's mode "I"), every JPEG sampling libjpeg decodes. A libjpeg
// warning (e.g. "Premature end of JPEG file": truncated) is an error, so a
// damaged file is substituted rather than served half grey.
absl::StatusOr<RgbImage> DecodeImage(absl::string_view encoded, const DecodeOptions& options = {});

// Whether `status` (of DecodeImage, DecodeAndTransform, ReadImageInfo, PlanEncodedSample
// or DecodeWithCrop) refuses an image for its format alone: one PIL opens that shardcast
// does not decode (GIF, BMP, TIFF, ICO, JPEG 2000, an animated WebP; docs/server.md says
// why). A server substitutes it, as any decode error, and counts it apart. Content that
// is no image format at all (garbage, an empty member) is a plain decode error.
bool IsUnsupportedImageFormat(const absl::Status& status);

// TransformMode and TransformSpec (with their limits) live in common/plan/job_config.h.

// Writes 3 * crop * crop bytes, planar RGB (CHW), to `out_chw`.
// `augment_seed` drives kRandom (same seed -> same bytes); ignored for kCenter.
absl::Status ApplyTransform(const RgbImage& image, const TransformSpec& spec, uint64_t augment_seed,
                            uint8_t* out_chw);

// Admission of decode memory (a MemoryBudget: the server's --max-decode-memory, a
// client's max_decode_memory). DecodeAndTransform asks for the bytes an image's decode
// buffers need, computed from the header alone, before it allocates any of them, and
// gives them back when done, after the buffers are freed. An error of Acquire fails the
// decode with it, before anything is allocated.
using DecodeAdmission = MemoryAdmission;

// Decode + transform in one call, choosing the DCT scale from the transform
// (1/2, 1/4, 1/8 only, and only while the resized image / crop region keeps at
// least the target size). The decode buffer is freed before the call returns, so
// a thread holds one only while it decodes (and within `admission`'s bytes); between
// calls it keeps only its resampling taps and row buffers, sized by the crop and
// one row of the region read (tens of KB for a photo).
// kRandom crop parameters are drawn on the ORIGINAL image dimensions, so the DCT
// scale changes only the resampling source, never which region is taken.
// With `admission`, DecodeBufferBytes(...) are acquired from it before decoding (its
// error is returned as it is) and released afterwards, whatever the outcome.
absl::Status DecodeAndTransform(absl::string_view encoded, const TransformSpec& spec,
                                uint64_t augment_seed, uint8_t* out_chw,
                                DecodeAdmission* admission = nullptr);

// --- Encoded delivery: the transform planned on the server, applied on the client ---

// What a job's transform does to one image, decided from the image's size and the
// augment seed alone (no pixels). The server plans it (PlanSampleCrop) and sends it
// beside the image as stored (proto EncodedImage); a client applies it to the decoded
// image (DecodeWithCrop). DecodeAndTransform is the two in one call, so both sides
// make the same bytes by construction.
struct SampleCrop {
  TransformMode mode = TransformMode::kCenter;
  int source_width = 0;  // the stored image's, from its header
  int source_height = 0;
  // kRandom: the window (source pixels) resized to output x output, mirrored if flip.
  // kCenter: the output x output window at (left, top) of the source resized to
  // resize_width x resize_height (torchvision Resize + CenterCrop).
  int left = 0;
  int top = 0;
  int width = 0;
  int height = 0;
  int resize_width = 0;  // kCenter only
  int resize_height = 0;
  bool flip = false;
  int output = 0;  // the sample is 3 x output x output
};

// The transform `spec` with `augment_seed` makes of a width x height image.
// INVALID_ARGUMENT for a spec out of its limits or a geometry no image can have (an
// aspect ratio too extreme for Resize): the decode would fail alike.
absl::StatusOr<SampleCrop> PlanSampleCrop(int width, int height, const TransformSpec& spec,
                                          uint64_t augment_seed);

// Where the bytes a client decodes lie in the stored image: all of it, or a lossless
// cut (proto EncodedImage.cut_*): the part at (left, top), width x height, whose left
// and top are multiples of the JPEG's MCU size.
struct SourceWindow {
  int left = 0;
  int top = 0;
  int width = 0;
  int height = 0;
};

// What the server knows of an image in encoded delivery, without decoding it: its
// header, its crop, and the decode buffers the decode of the whole stored image needs
// (DecodeBufferBytes, or the region decode's), which a server compares with its
// --max-decode-memory to substitute exactly the images server delivery substitutes.
struct EncodedPlan {
  ImageInfo info;
  SampleCrop crop;
  int64_t decode_bytes = 0;
};
// Errors are the ones DecodeAndTransform of the same bytes returns before decoding
// (unreadable header, size over the pixel limit, impossible geometry).
absl::StatusOr<EncodedPlan> PlanEncodedSample(absl::string_view encoded, const TransformSpec& spec,
                                              uint64_t augment_seed);

// The rectangle of the stored image (source pixels) that DecodeWithCrop reads for
// `crop`: the resampling windows, widened to whole source pixels. A lossless cut
// must hold it, plus a margin for chroma upsampling (jpeg_lossless_cut.h).
struct SourceRect {
  int left = 0;
  int top = 0;
  int width = 0;
  int height = 0;
};
absl::StatusOr<SourceRect> SourcePixelsRead(const ImageInfo& info, const SampleCrop& crop,
                                            bool dct_scaling);

// Decodes `encoded` (the stored image, or the cut of it at `window`; null = the whole)
// and writes `crop`'s 3 * output * output bytes of planar RGB to `out_chw`. With the
// server's `dct_scaling`, the bytes equal DecodeAndTransform's of the stored image with
// the spec and seed that planned `crop`. Untrusted input: the crop is checked against
// the header (size, window inside the image, a cut that holds the pixels read), and
// `admission` (if any) is asked for the decode buffers before any is allocated, as
// DecodeAndTransform does.
absl::Status DecodeWithCrop(absl::string_view encoded, const SampleCrop& crop, bool dct_scaling,
                            uint8_t* out_chw, DecodeAdmission* admission = nullptr,
                            const SourceWindow* window = nullptr);

// `crop` applied to pixels already decoded at full size (no DCT scaling): the
// reference a GPU implementation of the same resize is compared with.
absl::Status ApplyCrop(const RgbImage& image, const SampleCrop& crop, uint8_t* out_chw);

// --- Lower-level pieces (exposed for tests and benchmarks) ---

// What the header says (ImageInfo, image_types.h), without decoding pixels.
absl::StatusOr<ImageInfo> ReadImageInfo(absl::string_view encoded);

// An upper bound of the bytes decoding `info`'s image at DCT scale num/denom (JPEG; a
// PNG or WebP is always decoded at full size) allocates: the decoded pixels, plus for a
// progressive JPEG libjpeg's whole-image coefficient buffer (2 bytes per coefficient,
// full resolution whatever the scale), for a WebP libwebp's whole-image buffers and a
// lossless stream's entropy tables (WebpDecodeBytes, webp_decode.h). Other row buffers
// and tables are not counted.
int64_t DecodeBufferBytes(const ImageInfo& info, int scale_num, int scale_denom);

// A region of an image (pixel coordinates of the original image) and whether
// the result is mirrored left-right.
struct CropParams {
  int top = 0;
  int left = 0;
  int height = 0;
  int width = 0;
  bool flip = false;
};

// torchvision RandomResizedCrop.get_params(scale=(0.08,1), ratio=(3/4,4/3)) on a
// width x height image (10 attempts, then the clamped-ratio centre crop), then
// RandomHorizontalFlip(p=0.5), all drawn from a splitmix64 stream seeded with
// `augment_seed`: same seed and size -> same parameters on any machine.
CropParams RandomResizedCropParams(int width, int height, uint64_t augment_seed);

// Resizes `params`' region of `image` to crop x crop (bilinear, antialias, as
// torchvision's resized_crop with antialias=True), mirrored if params.flip, into
// 3 * crop * crop bytes of planar RGB.
absl::Status ResizedCropToChw(const RgbImage& image, const CropParams& params, int crop,
                              uint8_t* out_chw);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_IMAGE_IMAGE_TRANSFORM_H_

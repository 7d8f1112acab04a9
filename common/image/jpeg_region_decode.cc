// libjpeg's header read, and region-of-interest JPEG decoding: libjpeg-turbo's jpeg_skip_scanlines
// skips the rows above the region (entropy decoding only), jpeg_crop_scanline limits IDCT,
// upsampling and colour conversion to the region's iMCU columns, and decoding stops after the
// region's last row.
#include "common/image/jpeg_region_decode.h"

// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#if defined(SHARDCAST_EXPECT_JPEG_LIB_VERSION) && \
    JPEG_LIB_VERSION != SHARDCAST_EXPECT_JPEG_LIB_VERSION
#error "jconfig.h: not the JPEG_LIB_VERSION this compile check asked for"
#endif

#include <algorithm>
#include <csetjmp>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace shardcast {
namespace internal {
namespace {

// Output rows of one DCT block row after scaling. libjpeg 7 scales each axis on its
// own (min_DCT_h/v_scaled_size); libjpeg-turbo built with the 6.2 API (Debian's
// libjpeg62-turbo) keeps the single min_DCT_scaled_size, the 8 API (Ubuntu's
// libjpeg-turbo8) the pair. CMake compiles this file against both (common/image/CMakeLists.txt).
int MinDctRowsScaled(const jpeg_decompress_struct& cinfo) {
#if JPEG_LIB_VERSION >= 70
  return cinfo.min_DCT_v_scaled_size;
#else
  return cinfo.min_DCT_scaled_size;
#endif
}

// As TJFLAG_LIMITSCANS: each scan re-walks the coefficients, so a small file of
// thousands of scans could hold a decode thread for minutes.
constexpr int kMaxScans = 500;

// libjpeg's error manager extended with where to jump and what went wrong. libjpeg
// calls error_exit on a fatal error and must not return from it (its default calls
// exit()); we longjmp back into DecodeJpegRegion instead.
struct ErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg casts cinfo->err to this
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void ErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// msg_level -1 is a warning ("Premature end of JPEG file", "Corrupt JPEG data"): an
// error here, as TJFLAG_STOPONWARNING makes it for the whole-image decode. Trace
// messages (level >= 0) are ignored.
void EmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::strncat(err->message, " (libjpeg warning, treated as an error)",
               sizeof(err->message) - std::strlen(err->message) - 1);
  std::longjmp(err->jump, 1);
}

void ProgressMonitor(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  if (reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number > kMaxScans) {
    auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message),
                  "Progressive JPEG image has more than %d scans", kMaxScans);
    std::longjmp(err->jump, 1);
  }
}

// A libjpeg decompressor for one image. Not reused across images: a decompressor keeps
// the quantization and Huffman tables of its previous image (libjpeg's abbreviated
// datastreams), so a file without tables of its own would decode with another image's
// (the image_transform_fuzzer found it): output depending on what the thread decoded
// before. Creating one costs a few small allocations, nothing beside a decode.
class RegionDecompressor {
 public:
  RegionDecompressor() {
    cinfo_.err = jpeg_std_error(&err_.pub);
    err_.pub.error_exit = ErrorExit;
    err_.pub.emit_message = EmitMessage;
    progress_.progress_monitor = ProgressMonitor;
    if (setjmp(err_.jump) != 0) return;  // jpeg_create_decompress fails only on out-of-memory
    jpeg_create_decompress(&cinfo_);
    cinfo_.progress = &progress_;
    ok_ = true;
  }
  ~RegionDecompressor() {
    if (ok_) jpeg_destroy_decompress(&cinfo_);
  }
  RegionDecompressor(const RegionDecompressor&) = delete;
  RegionDecompressor& operator=(const RegionDecompressor&) = delete;

  bool ok() const { return ok_; }
  jpeg_decompress_struct* cinfo() { return &cinfo_; }
  ErrorManager* err() { return &err_; }

 private:
  jpeg_decompress_struct cinfo_{};
  ErrorManager err_{};
  jpeg_progress_mgr progress_{};
  bool ok_ = false;
};

// jpeg_read_header between one setjmp and the error manager's longjmps (nothing with a
// destructor in this frame). Returns false with err->message set.
bool ReadHeader(jpeg_decompress_struct* cinfo, ErrorManager* err, absl::string_view encoded,
                JpegFrameHeader* out) {
  if (setjmp(err->jump) != 0) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  err->message[0] = '\0';
  jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(encoded.data()),
               static_cast<unsigned long>(encoded.size()));
  jpeg_read_header(cinfo, TRUE);
  out->width = static_cast<int>(std::min<JDIMENSION>(cinfo->image_width, 0x7fffffff));
  out->height = static_cast<int>(std::min<JDIMENSION>(cinfo->image_height, 0x7fffffff));
  out->components = cinfo->num_components;
  out->progressive = cinfo->progressive_mode != 0;
  // jpeg_read_header stops at the first SOS: a scan of fewer components than the frame's
  // means more scans, so libjpeg's has_multiple_scans (a whole-image coefficient buffer).
  out->multi_scan = !out->progressive && cinfo->comps_in_scan < cinfo->num_components;
  out->max_h_samp = cinfo->max_h_samp_factor;
  out->max_v_samp = cinfo->max_v_samp_factor;
  const J_COLOR_SPACE space = cinfo->jpeg_color_space;
  out->cmyk = space == JCS_CMYK || space == JCS_YCCK;
  // What PIL converts to RGB, and what libjpeg converts to RGB or CMYK for us; libjpeg
  // says JCS_UNKNOWN for 2 components or 3-4 it cannot identify.
  const bool known = (space == JCS_GRAYSCALE && cinfo->num_components == 1) ||
                     ((space == JCS_YCbCr || space == JCS_RGB) && cinfo->num_components == 3) ||
                     (out->cmyk && cinfo->num_components == 4);
  if (!known) {
    std::snprintf(err->message, sizeof(err->message),
                  "colour space %d with %d components is not greyscale, YCbCr, RGB, CMYK or "
                  "YCCK",
                  static_cast<int>(space), cinfo->num_components);
    jpeg_abort_decompress(cinfo);
    return false;
  }
  jpeg_abort_decompress(cinfo);
  return true;
}

// The libjpeg calls, between one setjmp and the longjmps of the error manager: no
// object with a destructor lives in this frame. Returns false with err->message set.
bool DecodeRows(jpeg_decompress_struct* cinfo, ErrorManager* err, absl::string_view encoded,
                ScalingFactor f, const PixelRect& want, RgbImage* out, PixelRect* got) {
  if (setjmp(err->jump) != 0) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  err->message[0] = '\0';
  jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(encoded.data()),
               static_cast<unsigned long>(encoded.size()));
  jpeg_read_header(cinfo, TRUE);
  // The caller checked the same header (ReadJpegFrameHeader); checked again here because
  // everything below allocates from these figures.
  if (int64_t{cinfo->image_width} * cinfo->image_height > kMaxPixels || cinfo->progressive_mode ||
      (cinfo->num_components != 1 && cinfo->num_components != 3)) {
    std::snprintf(err->message, sizeof(err->message),
                  "a %ux%u JPEG with %d components%s is not region-decodable", cinfo->image_width,
                  cinfo->image_height, cinfo->num_components,
                  cinfo->progressive_mode ? ", progressive," : "");
    jpeg_abort_decompress(cinfo);
    return false;
  }
  // The settings of TurboJPEG's tjDecompress2 without flags, so the pixels are its.
  cinfo->scale_num = static_cast<unsigned int>(f.num);
  cinfo->scale_denom = static_cast<unsigned int>(f.denom);
  cinfo->out_color_space = JCS_RGB;
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  jpeg_calc_output_dimensions(cinfo);
  const int64_t scaled_w = cinfo->output_width, scaled_h = cinfo->output_height;
  if (want.x < 0 || want.y < 0 || want.width <= 0 || want.height <= 0 ||
      want.x + int64_t{want.width} > scaled_w || want.y + int64_t{want.height} > scaled_h) {
    std::snprintf(err->message, sizeof(err->message),
                  "region %dx%d at (%d, %d) is not inside the %lldx%lld decoded image", want.width,
                  want.height, want.x, want.y, static_cast<long long>(scaled_w),
                  static_cast<long long>(scaled_h));
    jpeg_abort_decompress(cinfo);
    return false;
  }
  jpeg_start_decompress(cinfo);

  // One column of margin on each side: fancy upsampling of subsampled chroma reads the
  // neighbouring chroma sample, which a cropped row replaces by its own edge sample, so
  // the first and last column of a cropped row differ from the whole decode's.
  const int64_t crop_lo = std::max<int64_t>(0, want.x - 1);
  const int64_t crop_hi = std::min<int64_t>(scaled_w, int64_t{want.x} + want.width + 1);
  JDIMENSION xoffset = static_cast<JDIMENSION>(crop_lo);
  JDIMENSION width = static_cast<JDIMENSION>(crop_hi - crop_lo);
  if (width < cinfo->output_width) jpeg_crop_scanline(cinfo, &xoffset, &width);
  // Skipping to an iMCU row boundary: a skip that starts inside a row group is where
  // libjpeg-turbo's skip logic has had bugs (libjpeg-turbo issue #915).
  const int imcu_rows = cinfo->max_v_samp_factor * MinDctRowsScaled(*cinfo);
  const int first_row = want.y / imcu_rows * imcu_rows;
  const int end_row = want.y + want.height;
  got->x = static_cast<int>(xoffset);
  got->y = first_row;
  got->width = static_cast<int>(width);
  got->height = end_row - first_row;
  const int64_t bytes = int64_t{got->width} * got->height * 3;
  const int64_t max_bytes =
      RegionDecodeBytes(want, static_cast<int>(scaled_w), static_cast<int>(scaled_h));
  if (bytes > max_bytes || got->x > want.x || got->x + int64_t{got->width} < want.x + want.width) {
    std::snprintf(err->message, sizeof(err->message),
                  "libjpeg widened the region %dx%d at (%d, %d) to %dx%d at (%d, %d): more than "
                  "the %lld bytes admitted",
                  want.width, want.height, want.x, want.y, got->width, got->height, got->x, got->y,
                  static_cast<long long>(max_bytes));
    jpeg_abort_decompress(cinfo);
    return false;
  }
  if (first_row > 0) {
    const JDIMENSION skipped = jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(first_row));
    if (skipped != static_cast<JDIMENSION>(first_row)) {
      std::snprintf(err->message, sizeof(err->message), "skipped %u of %d rows",
                    static_cast<unsigned>(skipped), first_row);
      jpeg_abort_decompress(cinfo);
      return false;
    }
  }
  out->width = got->width;
  out->height = got->height;
  out->pixels.resize(static_cast<size_t>(bytes));
  const size_t stride = static_cast<size_t>(got->width) * 3;
  // Several rows per call: libjpeg hands out up to rec_outbuf_height rows at once.
  constexpr int kRowsPerCall = 8;
  JSAMPROW rows[kRowsPerCall];
  while (cinfo->output_scanline < static_cast<JDIMENSION>(end_row)) {
    const int next = static_cast<int>(cinfo->output_scanline);
    const int n = std::min(kRowsPerCall, end_row - next);
    for (int i = 0; i < n; ++i) {
      rows[i] = out->pixels.data() + static_cast<size_t>(next - first_row + i) * stride;
    }
    if (jpeg_read_scanlines(cinfo, rows, static_cast<JDIMENSION>(n)) == 0) {
      std::snprintf(err->message, sizeof(err->message), "no data for row %d", next);
      jpeg_abort_decompress(cinfo);
      return false;
    }
  }
  // The rows below are not needed: stop here (the EOI check in RegionDecodable stands
  // in for the end-of-data check the rest of the decode would make).
  jpeg_abort_decompress(cinfo);
  return true;
}

}  // namespace

absl::StatusOr<JpegFrameHeader> ReadJpegFrameHeader(absl::string_view encoded) {
  RegionDecompressor decoder;
  if (!decoder.ok()) return absl::ResourceExhaustedError("jpeg_create_decompress failed");
  JpegFrameHeader header;
  if (!ReadHeader(decoder.cinfo(), decoder.err(), encoded, &header)) {
    return absl::InvalidArgumentError(absl::StrFormat("corrupt JPEG header (%d bytes): %s",
                                                      encoded.size(), decoder.err()->message));
  }
  if (absl::Status s = CheckDimensions(header.width, header.height, "JPEG"); !s.ok()) return s;
  return header;
}

bool RegionDecodable(const ImageInfo& info, absl::string_view encoded) {
  const size_t n = encoded.size();
  return info.format == ImageFormat::kJpeg && !info.cmyk && !info.progressive && !info.multi_scan &&
         (info.components == 1 || info.components == 3) && n >= 4 &&
         static_cast<uint8_t>(encoded[n - 2]) == 0xFF &&
         static_cast<uint8_t>(encoded[n - 1]) == 0xD9;
}

int64_t RegionDecodeBytes(const PixelRect& want, int scaled_width, int scaled_height) {
  // One column of margin on each side, and libjpeg moves the left edge down to an iMCU
  // column (< 32 pixels at 1/1: 4:1:1 sampling, 4 x 8). The first row moves up by less
  // than one iMCU row (< 32).
  const int64_t w = std::min<int64_t>(scaled_width, int64_t{want.width} + 2 + 32);
  const int64_t h = std::min<int64_t>(scaled_height, int64_t{want.height} + 32);
  return w * h * 3;
}

absl::Status DecodeJpegRegion(absl::string_view encoded, ScalingFactor f, const PixelRect& want,
                              RgbImage* out, PixelRect* got) {
  RegionDecompressor decoder;
  if (!decoder.ok()) return absl::ResourceExhaustedError("jpeg_create_decompress failed");
  if (!DecodeRows(decoder.cinfo(), decoder.err(), encoded, f, want, out, got)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "JPEG (%d bytes) failed to decode region %dx%d at (%d, %d), scale %d/%d: %s",
        encoded.size(), want.width, want.height, want.x, want.y, f.num, f.denom,
        decoder.err()->message));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace shardcast

#include "python/native/encoded_bindings.h"

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "client/decode/client_decode_memory.h"
#include "common/image/image_transform.h"
#include "common/image/image_types.h"
#include "common/plan/job_config.h"
#include "proto/encoded_image_proto.h"
#include "shardcast/v1/shardcast.pb.h"

namespace py = pybind11;

namespace shardcast::client {
namespace {

// The bytes of a bytes object, valid while the object lives (the caller's argument
// keeps it alive while the GIL is released: bytes are immutable).
absl::string_view BytesView(const py::bytes& bytes) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(bytes.ptr(), &data, &size) != 0) throw py::error_already_set();
  return {data, static_cast<size_t>(size)};
}

[[noreturn]] void RaiseValueError(const absl::Status& status) {
  throw py::value_error(std::string(status.message()));
}

// An EncodedImage's crop fields (any object with the proto's field names: _native's
// EncodedImage, a SimpleNamespace) as the wire message, for the one mapping to the
// image library's crop (proto/encoded_image_proto.h). `data` is left out.
shardcast::v1::EncodedImage WireCrop(const py::handle& encoded) {
  auto get = [&](const char* name) { return encoded.attr(name).cast<int>(); };
  shardcast::v1::EncodedImage wire;
  wire.set_source_width(get("source_width"));
  wire.set_source_height(get("source_height"));
  wire.set_left(get("left"));
  wire.set_top(get("top"));
  wire.set_width(get("width"));
  wire.set_height(get("height"));
  wire.set_resize_width(get("resize_width"));
  wire.set_resize_height(get("resize_height"));
  wire.set_flip(encoded.attr("flip").cast<bool>());
  wire.set_output_size(get("output_size"));
  wire.set_cut_left(get("cut_left"));
  wire.set_cut_top(get("cut_top"));
  wire.set_cut_width(get("cut_width"));
  wire.set_cut_height(get("cut_height"));
  return wire;
}

// The crop in the stored image's coordinates. Center is the transform that has a
// resize size (proto: resize_width is center's only).
SampleCrop CropOf(const shardcast::v1::EncodedImage& wire) {
  return CropFromWire(wire,
                      wire.resize_width() > 0 ? TransformMode::kCenter : TransformMode::kRandom);
}

// The crop's fields by their proto names (no cut: a plan is of the stored image).
py::dict CropDict(const SampleCrop& crop) {
  py::dict d;
  d["source_width"] = crop.source_width;
  d["source_height"] = crop.source_height;
  d["left"] = crop.left;
  d["top"] = crop.top;
  d["width"] = crop.width;
  d["height"] = crop.height;
  d["resize_width"] = crop.resize_width;
  d["resize_height"] = crop.resize_height;
  d["flip"] = crop.flip;
  d["output_size"] = crop.output;
  for (const char* cut : {"cut_left", "cut_top", "cut_width", "cut_height"}) d[cut] = 0;
  return d;
}

const char* FormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kWebp:
      return "webp";
  }
  return "unknown";
}

TransformMode ParseMode(const std::string& mode) {
  if (mode == "center") return TransformMode::kCenter;
  if (mode == "random") return TransformMode::kRandom;
  throw py::value_error(absl::StrFormat("mode must be 'center' or 'random', got '%s'", mode));
}

// CHW bytes of `crop`'s output, uninitialized, for a call to fill without the GIL.
py::bytes OutputBytes(const SampleCrop& crop) {
  if (crop.output <= 0 || crop.output > kMaxCrop) {
    throw py::value_error(absl::StrFormat("output_size %d is out of 1..%d", crop.output, kMaxCrop));
  }
  return py::reinterpret_steal<py::bytes>(
      PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(3) * crop.output * crop.output));
}

uint8_t* Writable(py::bytes& bytes) {
  return reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(bytes.ptr()));
}

}  // namespace

void BindEncodedImageFunctions(py::module_& m) {
  m.def(
      "decode_encoded",
      [](const py::object& encoded, bool dct_scaling, int64_t max_decode_memory) {
        const shardcast::v1::EncodedImage wire = WireCrop(encoded);
        const SampleCrop crop = CropOf(wire);
        const std::optional<SourceWindow> window = CutFromWire(wire);
        const py::bytes data = encoded.attr("data");
        const absl::string_view view = BytesView(data);
        py::bytes out = OutputBytes(crop);
        // One call's bound (nothing is shared between calls): an image whose buffers
        // alone exceed it is refused, as the server substitutes one over its limit.
        std::optional<MemoryBudget> limit;
        if (max_decode_memory > 0) {
          limit.emplace(ClientDecodeMemoryOptions(max_decode_memory, "max_decode_memory"));
        }
        absl::Status status;
        {
          py::gil_scoped_release release;
          status = DecodeWithCrop(view, crop, dct_scaling, Writable(out), limit ? &*limit : nullptr,
                                  window ? &*window : nullptr);
        }
        if (!status.ok()) RaiseValueError(status);
        return out;
      },
      py::arg("encoded"), py::arg("dct_scaling"), py::arg("max_decode_memory") = 0,
      "the sample's 3*C*C bytes (CHW) as server delivery sends them: `encoded` (any object "
      "with EncodedImage's field names) decoded and cropped by the server's code, with the "
      "registration's dct_scaling; a decode whose buffers exceed max_decode_memory (0: no "
      "limit) is refused before anything is allocated. ValueError with the decode's error");
  m.def(
      "image_info",
      [](const py::bytes& data) {
        absl::StatusOr<ImageInfo> info = ReadImageInfo(BytesView(data));
        if (!info.ok()) RaiseValueError(info.status());
        py::dict d;
        d["format"] = FormatName(info->format);
        d["width"] = info->width;
        d["height"] = info->height;
        d["components"] = info->components;
        d["cmyk"] = info->cmyk;
        d["progressive"] = info->progressive;
        d["decode_bytes"] = DecodeBufferBytes(*info, 1, 1);
        return d;
      },
      py::arg("data"),
      "what the header says (format 'jpeg'|'png'|'webp', width, height, components, cmyk, "
      "progressive) and the bytes a full-size decode's buffers take (decode_bytes), without "
      "decoding; ValueError for a header the server could not read either");
  m.def(
      "plan_encoded_sample",
      [](const py::bytes& data, const std::string& mode, int resize, int crop, uint64_t seed,
         bool dct_scaling) {
        TransformSpec spec;
        spec.mode = ParseMode(mode);
        spec.resize = resize;
        spec.crop = crop;
        spec.dct_scaling = dct_scaling;
        absl::StatusOr<EncodedPlan> plan = PlanEncodedSample(BytesView(data), spec, seed);
        if (!plan.ok()) RaiseValueError(plan.status());
        py::dict d = CropDict(plan->crop);
        d["decode_bytes"] = plan->decode_bytes;
        return d;
      },
      py::arg("data"), py::arg("mode"), py::arg("resize"), py::arg("crop"), py::arg("seed"),
      py::arg("dct_scaling") = false,
      "the crop the server plans for this image and augment seed (EncodedImage's fields by "
      "their proto names) and the bytes its decode would need; ValueError as the server's");
  m.def(
      "decode_image",
      [](const py::bytes& data) {
        const absl::string_view view = BytesView(data);
        absl::StatusOr<RgbImage> image;
        {
          py::gil_scoped_release release;
          image = DecodeImage(view);
        }
        if (!image.ok()) RaiseValueError(image.status());
        return py::make_tuple(
            image->height, image->width,
            py::bytes(reinterpret_cast<const char*>(image->pixels.data()), image->pixels.size()));
      },
      py::arg("data"),
      "(height, width, HWC RGB bytes): the server's decode at full size (no DCT scaling); "
      "ValueError with the decode's error");
  m.def(
      "apply_crop",
      [](const py::bytes& hwc, int width, int height, const py::object& encoded) {
        const absl::string_view pixels = BytesView(hwc);
        if (width <= 0 || height <= 0 ||
            pixels.size() != static_cast<size_t>(width) * static_cast<size_t>(height) * 3) {
          throw py::value_error(absl::StrFormat("apply_crop: %d bytes are not a %dx%d RGB image",
                                                pixels.size(), width, height));
        }
        RgbImage image;
        image.width = width;
        image.height = height;
        image.pixels.assign(pixels.begin(), pixels.end());
        const SampleCrop crop = CropOf(WireCrop(encoded));
        py::bytes out = OutputBytes(crop);
        absl::Status status;
        {
          py::gil_scoped_release release;
          status = ApplyCrop(image, crop, Writable(out));
        }
        if (!status.ok()) RaiseValueError(status);
        return out;
      },
      py::arg("hwc"), py::arg("width"), py::arg("height"), py::arg("encoded"),
      "the C++ transform (ApplyCrop) of `encoded`'s crop on pixels already decoded at full "
      "size: 3*C*C CHW bytes, the reference the GPU decode's resize is compared with");
}

}  // namespace shardcast::client

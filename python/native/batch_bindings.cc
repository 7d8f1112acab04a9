// shardcast._native's received batches (see batch_bindings.h).
#include "python/native/batch_bindings.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/plan/field_spec.h"

namespace py = pybind11;

namespace shardcast::client {
namespace {

namespace v1 = ::shardcast::v1;

// Memory that `owner` keeps alive, as a Python buffer (one dimension of `count` items
// of `format`). torch.frombuffer and memoryview keep this object, and so the memory,
// alive as long as they live.
struct OwnedBuffer {
  std::shared_ptr<const void> owner;
  void* data = nullptr;
  py::ssize_t count = 0;
  py::ssize_t item_size = 1;
  std::string format;
};

py::tuple Shape(const v1::Batch& header) {
  py::tuple shape(header.shape_size());
  for (int i = 0; i < header.shape_size(); ++i) shape[i] = py::int_(header.shape(i));
  return shape;
}

// A sample's fields as {name: bytes, or None where an optional one is missing and for
// padding}. The bytes objects are made from the parsed message's strings: one copy
// into memory Python owns (a bytes object cannot borrow memory).
py::dict SampleFields(const v1::SampleInfo& sample, const std::vector<std::string>& names) {
  py::dict fields;
  for (size_t f = 0; f < names.size(); ++f) {
    // RankStream checked: a valid sample has one FieldValue per name, padding none.
    const v1::FieldValue* value = sample.valid() ? &sample.fields(static_cast<int>(f)) : nullptr;
    if (value != nullptr && value->present()) {
      fields[py::str(names[f])] = py::bytes(value->data().data(), value->data().size());
    } else {
      fields[py::str(names[f])] = py::none();
    }
  }
  return fields;
}

// One sample's image in encoded delivery (decode "none"): SampleInfo.encoded, read where
// the batch's header was parsed (the batch is kept alive by it).
struct NativeEncoded {
  ReceivedBatch wire;
  int sample = 0;
  const v1::EncodedImage& get() const { return wire->header().samples(sample).encoded(); }
};

// (key, shard, index_in_shard, valid, substituted, fields, dataset) per sample:
// SampleInfo's fields; `dataset` names the valid samples that name none (padding: "").
py::list Samples(const v1::Batch& header, const std::vector<std::string>& field_names,
                 const std::string& dataset) {
  py::list samples(header.samples_size());
  for (int i = 0; i < header.samples_size(); ++i) {
    const v1::SampleInfo& s = header.samples(i);
    const std::string& from = !s.dataset().empty() || !s.valid() ? s.dataset() : dataset;
    samples[i] = py::make_tuple(py::str(s.key()), s.shard(), s.index_in_shard(), s.valid(),
                                s.substituted(), SampleFields(s, field_names), py::str(from));
  }
  return samples;
}

// Per sample, its image handed over undecoded (decode "none"): an EncodedImage, or None
// for padding, in server delivery and once decoded here (decode "cpu").
py::list EncodedImages(const ReceivedBatch& wire) {
  const v1::Batch& header = wire->header();
  py::list encoded(header.samples_size());
  for (int i = 0; i < header.samples_size(); ++i) {
    encoded[i] = header.samples(i).has_encoded() ? py::cast(NativeEncoded{wire, i}) : py::none();
  }
  return encoded;
}

void BindBatch(py::module_& m) {
  py::class_<OwnedBuffer>(m, "Buffer", py::buffer_protocol())
      .def_buffer([](OwnedBuffer& b) {
        return py::buffer_info(b.data, b.item_size, b.format, 1, {b.count}, {b.item_size},
                               /*readonly=*/false);
      })
      .def("__len__", [](const OwnedBuffer& b) { return b.count; });

  py::class_<NativeBatch>(m, "Batch")
      .def_property_readonly("epoch", [](const NativeBatch& b) { return b.wire->epoch(); })
      .def_property_readonly("index", [](const NativeBatch& b) { return b.wire->index(); })
      .def_property_readonly("shape", [](const NativeBatch& b) { return Shape(b.wire->header()); })
      // uint8 pixels, B*3*C*C, in the one block the receiving thread made; None when
      // next_into copied them to the caller's memory, for a job without images and for
      // images handed over undecoded (decode "none").
      // Writable, so that torch does not warn: the block is this batch's alone.
      .def_property_readonly("pixels",
                             [](const NativeBatch& b) -> std::optional<OwnedBuffer> {
                               if (b.pixels_copied || b.wire->image_bytes() == 0) {
                                 return std::nullopt;
                               }
                               // One block (join_images) of B*3*H*W >= 1 bytes: RankStream
                               // checked the registration and the batch against it.
                               const absl::Span<const uint8_t> block = b.wire->image_chunks().at(0);
                               return OwnedBuffer{b.wire, const_cast<uint8_t*>(block.data()),
                                                  static_cast<py::ssize_t>(block.size()), 1, "B"};
                             })
      // int64 labels, B (-1: padding), where the header was parsed.
      .def_property_readonly("labels",
                             [](const NativeBatch& b) {
                               const auto& labels = b.wire->header().labels();
                               return OwnedBuffer{b.wire, const_cast<int64_t*>(labels.data()),
                                                  labels.size(), sizeof(int64_t),
                                                  py::format_descriptor<int64_t>::format()};
                             })
      .def_property_readonly("samples",
                             [](const NativeBatch& b) {
                               return Samples(b.wire->header(), *b.field_names,
                                              b.dataset != nullptr ? *b.dataset : std::string());
                             })
      // Per sample: its EncodedImage with decode "none", else None (see EncodedImages).
      .def_property_readonly("encoded", [](const NativeBatch& b) { return EncodedImages(b.wire); })
      // How many samples the server substituted, so that Python looks at them only then.
      .def_property_readonly("substituted", [](const NativeBatch& b) {
        int count = 0;
        for (const v1::SampleInfo& s : b.wire->header().samples()) count += s.substituted();
        return count;
      });
}

void BindEncodedImage(py::module_& m) {
  // SampleInfo.encoded (decode "none"): the image as stored (or its lossless cut) and the
  // crop the server planned, named as the proto's fields (shardcast.proto, EncodedImage).
  py::class_<NativeEncoded>(m, "EncodedImage")
      .def_property_readonly("data",
                             [](const NativeEncoded& e) {
                               const std::string& data = e.get().data();
                               return py::bytes(data.data(), data.size());
                             })
      .def_property_readonly("source_width",
                             [](const NativeEncoded& e) { return e.get().source_width(); })
      .def_property_readonly("source_height",
                             [](const NativeEncoded& e) { return e.get().source_height(); })
      .def_property_readonly("left", [](const NativeEncoded& e) { return e.get().left(); })
      .def_property_readonly("top", [](const NativeEncoded& e) { return e.get().top(); })
      .def_property_readonly("width", [](const NativeEncoded& e) { return e.get().width(); })
      .def_property_readonly("height", [](const NativeEncoded& e) { return e.get().height(); })
      .def_property_readonly("resize_width",
                             [](const NativeEncoded& e) { return e.get().resize_width(); })
      .def_property_readonly("resize_height",
                             [](const NativeEncoded& e) { return e.get().resize_height(); })
      .def_property_readonly("flip", [](const NativeEncoded& e) { return e.get().flip(); })
      .def_property_readonly("output_size",
                             [](const NativeEncoded& e) { return e.get().output_size(); })
      .def_property_readonly("cut_left", [](const NativeEncoded& e) { return e.get().cut_left(); })
      .def_property_readonly("cut_top", [](const NativeEncoded& e) { return e.get().cut_top(); })
      .def_property_readonly("cut_width",
                             [](const NativeEncoded& e) { return e.get().cut_width(); })
      .def_property_readonly("cut_height",
                             [](const NativeEncoded& e) { return e.get().cut_height(); });
}

}  // namespace

// The registration's field names. RankStream checked that its fields parse.
FieldNames NamesOfFields(const v1::RegisterResponse& registration) {
  auto names = std::make_shared<std::vector<std::string>>();
  absl::StatusOr<std::vector<FieldSpec>> fields =
      ParseFieldSpecs({registration.fields().begin(), registration.fields().end()});
  if (fields.ok()) {
    for (const FieldSpec& field : *fields) names->push_back(field.Name());
  }
  return names;
}

void BindBatches(py::module_& m) {
  BindBatch(m);
  BindEncodedImage(m);
}

}  // namespace shardcast::client

// shardcast._native: the C++ protocol client (RankStream: register with retry, prefetch
// thread, batch checks, reconnect/resume, stall timeout, TLS, tokens, unix sockets,
// sample offsets) for Python. shardcast.Loader (python/shardcast/loader.py) is built on
// it, so there is one protocol client, in C++, and Python holds the GIL only to wrap
// what it produced:
// - every call that waits (registering, stopping a stream, the next batch) releases the
//   GIL, and receiving and parsing happen on RankStream's own thread;
// - a wait for the server (registering, the next batch) takes the GIL back every 50 ms
//   to run Python's signal handlers, so Ctrl-C raises KeyboardInterrupt at once, and
//   close() from another thread ends it with LoaderClosedError;
// - a stream is its process's: in a forked child (its threads and connection stayed in
//   the parent) every call raises ForkedProcessError and the stream is never touched;
// - a batch's pixels and labels reach Python as buffers over the memory they were
//   received in (torch.frombuffer wraps them without a copy), or are copied once,
//   without the GIL, into memory the caller names (a pinned tensor on its way to a GPU);
//   the members a job asks for (fields) become bytes objects made from the parsed
//   message's strings.
// No torch here: the module works with whatever torch the Python side imports.
//
// By concern: native_errors.* (error kinds, the interruptible wait), batch_bindings.*
// (received batches as buffers), stream_bindings.* (the stream), option_bindings.* (the
// stream's options and their ranges), encoded_bindings.* (encoded images); here the
// module, the run's rules and the small stateless helpers.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "client/decode/receive_memory.h"
#include "client/reconnect/run_rules.h"
#include "common/util/token_file.h"
#include "python/native/batch_bindings.h"
#include "python/native/encoded_bindings.h"
#include "python/native/native_errors.h"
#include "python/native/option_bindings.h"
#include "python/native/stream_bindings.h"

namespace py = pybind11;

namespace shardcast::client {
namespace {

// out[b, c, i] = table[c * 256 + in[b, c, i]] for uint8 `in` and float `out`, both
// [batches, channels, plane] contiguous: normalize() on the CPU in one pass over the
// pixels, as the C++ BatchStream does, instead of torch's three over the floats.
void NormalizeWithTable(uintptr_t in_address, uintptr_t out_address, int64_t batches,
                        int64_t channels, int64_t plane, const py::buffer& table) {
  py::buffer_info t = table.request();
  if (t.itemsize != sizeof(float) || t.size != channels * 256) {
    throw py::value_error(absl::StrFormat(
        "normalize: the table needs %d float32 entries (256 per channel), got %d of %d bytes",
        channels * 256, t.size, t.itemsize));
  }
  // NOLINTBEGIN(performance-no-int-to-ptr): Python hands over the buffers' addresses
  const auto* in = reinterpret_cast<const uint8_t*>(in_address);
  auto* out = reinterpret_cast<float*>(out_address);
  // NOLINTEND(performance-no-int-to-ptr)
  const auto* values = static_cast<const float*>(t.ptr);
  py::gil_scoped_release release;
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t c = 0; c < channels; ++c) {
      const float* lookup = values + c * 256;
      for (int64_t i = 0; i < plane; ++i) out[i] = lookup[in[i]];
      in += plane;
      out += plane;
    }
  }
}

// The run's rules (client/reconnect/run_rules.h), as shardcast-train applies them.
void BindRunRules(py::module_& m) {
  m.def("new_job_id", &NewRunJobId, "run-<host>-<pid>-<random>: a new job id for a run");
  py::class_<SavedPosition>(m, "SavedPosition")
      .def(py::init<>())
      .def_readwrite("epoch", &SavedPosition::epoch)
      .def_readwrite("next_batch", &SavedPosition::next_batch)
      .def_readwrite("sample_offset", &SavedPosition::sample_offset)
      .def_readwrite("world_size", &SavedPosition::world_size)
      .def_readwrite("batch_size", &SavedPosition::batch_size)
      .def_property_readonly("samples_consumed", &SavedPosition::SamplesConsumed);
  py::class_<ResumePosition>(m, "ResumePosition")
      .def_readonly("epoch", &ResumePosition::epoch)
      .def_readonly("batch", &ResumePosition::batch)
      .def_readonly("sample_offset", &ResumePosition::sample_offset)
      .def_readonly("elastic", &ResumePosition::elastic);
  m.def("resume_at", &ResumeAt, py::arg("saved"), py::arg("world_size"), py::arg("batch_size"),
        py::arg("num_samples"),
        "where a saved position resumes with this run's world size and batch size");
}

}  // namespace
}  // namespace shardcast::client

PYBIND11_MODULE(_native, m) {
  using namespace shardcast::client;
  m.doc() = "shardcast's C++ protocol client (client/stream/rank_stream.h) for Python";
  BindErrorKinds(m);
  BindBatches(m);
  BindStreamOptions(m);
  BindStream(m);
  BindRunRules(m);
  m.def("normalize_with_table", &NormalizeWithTable, py::arg("images"), py::arg("out"),
        py::arg("batches"), py::arg("channels"), py::arg("plane"), py::arg("table"),
        "uint8 [B, C, plane] at address `images` to float32 at `out` through a 256-entry "
        "table per channel, without the GIL");
  m.def(
      "read_pem_file",
      [](const std::string& argument, const std::string& path) {
        absl::StatusOr<std::string> text = shardcast::ReadPemFile(argument, path);
        if (!text.ok()) throw py::value_error(std::string(text.status().message()));
        return *text;
      },
      py::arg("argument"), py::arg("path"),
      "a PEM file's text as the C++ clients read it (a regular file of at most 1 MiB "
      "holding a PEM block); ValueError naming `argument` and the path otherwise");
  m.def("keep_receive_buffers_warm", &KeepReceiveBuffersWarm,
        "glibc malloc's mmap and trim thresholds raised once per process "
        "(client/decode/receive_memory.h); whether glibc took them");

  // Encoded delivery: a sample's CPU decode, and the pieces of the GPU decode's tests.
  BindEncodedImageFunctions(m);
}

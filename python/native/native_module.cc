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
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "client/protocol/client_security.h"
#include "client/protocol/rank_stream.h"
#include "client/protocol/receive_memory.h"
#include "client/protocol/run_rules.h"
#include "client/protocol/server_list.h"
#include "client/protocol/stream_checks.h"
#include "client/protocol/wire_batch.h"
#include "common/plan/epoch_plan.h"
#include "common/plan/field_spec.h"
#include "common/util/token_file.h"
#include "proto/job_config_proto.h"
#include "python/native/encoded_bindings.h"

namespace py = pybind11;

namespace shardcast::client {
namespace {

namespace v1 = ::shardcast::v1;

// Which call an error came from decides what kind of Python error it is: a status the
// server sent while registering is a refusal of the job, the same code from
// start_epoch's own checks is a bad argument.
enum class Call { kRegister, kStartEpoch, kNext };

// The kinds of error the native client reports, bound as _native.ErrorKind: each is one
// shardcast.errors class (errors.from_native), so neither side spells a kind as a string.
enum class ErrorKind {
  kValue,        // a bad argument: ValueError
  kUnavailable,  // ServerUnavailableError
  kTimeout,      // StreamTimeoutError
  kRefused,      // JobRefusedError
  kChanged,      // JobChangedError
  kCheck,        // BatchCheckError
  kClosed,       // LoaderClosedError
  kFork,         // ForkedProcessError
  kError,        // ShardcastError
};

// The kind of a failed call's status.
ErrorKind KindOf(const absl::Status& status, Call call) {
  if (IsClosed(status)) return ErrorKind::kClosed;
  if (call == Call::kStartEpoch) return ErrorKind::kValue;
  if (call == Call::kNext && IsJobChanged(status)) return ErrorKind::kChanged;
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
      return ErrorKind::kUnavailable;
    case absl::StatusCode::kDeadlineExceeded:
      // RankStream's stall rule; a register attempt's deadline ends as UNAVAILABLE.
      return ErrorKind::kTimeout;
    case absl::StatusCode::kDataLoss:
      return ErrorKind::kCheck;
    case absl::StatusCode::kInternal:
      return ErrorKind::kError;
    default:
      return ErrorKind::kRefused;
  }
}

// Raises the shardcast.errors class of `kind` with `message` and the status code `code`
// (0: no status behind it).
[[noreturn]] void RaiseKind(ErrorKind kind, const std::string& message, int code = 0) {
  py::object error =
      py::module_::import("shardcast.errors").attr("from_native")(kind, message, code);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

// Raises `status` as the shardcast.errors class of its kind, with its message and code.
[[noreturn]] void Raise(const absl::Status& status, Call call) {
  RaiseKind(KindOf(status, call), std::string(status.message()), static_cast<int>(status.code()));
}

// RankStream's InterruptCheck for a wait without the GIL: takes the GIL back and runs
// Python's signal handlers (PyErr_CheckSignals: only on the main thread, where Ctrl-C's
// KeyboardInterrupt is raised). Once a handler raised, the wait ends; the caller, holding
// the GIL again, throws the Python error that is set (Rethrow).
//
// It also relays the stream's notices (StreamSettings::on_waiting, told on the
// registering thread, which must not take the GIL while the waiting one may hold it) to
// the "shardcast" logger, from the waiting thread, at its next check.
class SignalCheck {
 public:
  // Notices a stream's registering thread left for the waiting thread to log. Shared: the
  // stream keeps its sink for registrations after the first (a server that restarted).
  struct Notices {
    absl::Mutex mu;
    std::vector<std::string> waiting ABSL_GUARDED_BY(mu);
  };
  static std::function<void(const std::string&)> SinkFor(std::shared_ptr<Notices> notices) {
    return [notices = std::move(notices)](const std::string& notice) {
      absl::MutexLock lock(&notices->mu);
      notices->waiting.push_back(notice);
    };
  }

  explicit SignalCheck(Notices* notices) : notices_(notices) {}

  InterruptCheck Function() {
    return [this] {
      if (!raised_) {
        py::gil_scoped_acquire gil;
        LogNotices();
        raised_ = PyErr_CheckSignals() != 0;
      }
      return raised_;
    };
  }
  // Holding the GIL, after the wait: the notices not logged yet, then the handler's
  // exception, if one was raised.
  void RethrowIfRaised() {
    LogNotices();
    if (raised_) throw py::error_already_set();
  }

 private:
  // Holding the GIL.
  void LogNotices() {
    std::vector<std::string> notices;
    {
      absl::MutexLock lock(&notices_->mu);
      notices.swap(notices_->waiting);
    }
    if (notices.empty()) return;
    py::object logger = py::module_::import("logging").attr("getLogger")("shardcast");
    for (const std::string& notice : notices) {
      logger.attr("warning")(absl::StrCat("shardcast: ", notice));
    }
  }

  Notices* const notices_;
  bool raised_ = false;
};

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

// The names under which a job's fields are handed out (FieldSpec::Name(): "txt",
// "jpg;png"), in the registration's order.
using FieldNames = std::shared_ptr<const std::vector<std::string>>;

// One received batch that passed RankStream's checks. Its pixels are one block (the
// receiving thread joined them: join_images), unless next_into copied them to the
// caller's memory (`pixels_copied`) or the job has no images (no pixels at all).
struct NativeBatch {
  ReceivedBatch wire;
  FieldNames field_names;
  bool pixels_copied = false;
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

// (key, shard, index_in_shard, valid, substituted, fields) per sample: SampleInfo's
// fields.
py::list Samples(const v1::Batch& header, const std::vector<std::string>& field_names) {
  py::list samples(header.samples_size());
  for (int i = 0; i < header.samples_size(); ++i) {
    const v1::SampleInfo& s = header.samples(i);
    samples[i] = py::make_tuple(py::str(s.key()), s.shard(), s.index_in_shard(), s.valid(),
                                s.substituted(), SampleFields(s, field_names));
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

// StreamOptions.decode's names, as the Loader passes them.
constexpr std::pair<const char*, ClientDecode> kDecodeNames[] = {
    {"server", ClientDecode::kServer}, {"cpu", ClientDecode::kCpu}, {"none", ClientDecode::kNone}};

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

// One rank's stream. Methods are called by one consumer at a time (the Loader); close()
// from another thread while next() waits is safe: the stream is destroyed when the last
// call using it returns.
class NativeStream {
 public:
  // `job`: a serialized RegisterRequest; `settings`: how to stream it (the Loader's
  // keywords, _native.StreamOptions); `security`: client_security()'s.
  NativeStream(const py::bytes& job, const StreamSettings& settings,
               const ClientSecurity& security) {
    RankStreamOptions options;
    static_cast<StreamSettings&>(options) = settings;
    if (!options.job.ParseFromString(std::string(job))) {
      throw py::value_error("job: not a serialized shardcast.v1.RegisterRequest");
    }
    job_id_ = options.job.job_id();
    rank_ = options.job.rank();
    options.credentials = security.credentials;
    options.bearer_token = security.bearer_token;
    join_images_ = options.join_images;
    undecoded_ = options.decode == ClientDecode::kNone;
    absl::StatusOr<std::unique_ptr<RankStream>> stream;
    options.on_waiting = SignalCheck::SinkFor(notices_);
    SignalCheck signals(notices_.get());
    {
      py::gil_scoped_release release;
      stream = RankStream::Connect(std::move(options), signals.Function());
    }
    signals.RethrowIfRaised();
    if (!stream.ok()) Raise(stream.status(), Call::kRegister);
    stream_ = std::shared_ptr<RankStream>(std::move(*stream));
    const v1::RegisterResponse& registration = stream_->registration();
    registration_ = registration.SerializeAsString();
    field_names_ = NamesOfFields(registration);
    has_images_ = RegisteredWithImages(registration);
    encoded_delivery_ = has_images_ && registration.delivery() == v1::IMAGE_DELIVERY_ENCODED;
    dct_scaling_ = registration.transform().dct_scaling();
    batch_pixel_bytes_ = has_images_ ? registration.batch_size() : 0;
    for (int64_t extent : registration.image_shape()) batch_pixel_bytes_ *= extent;
  }

  // A Loader dropped without close(): the prefetch thread is stopped and joined here,
  // without holding the GIL for it. In a forked child the stream is left alone (Forget).
  // bugprone-exception-escape: only Forget's `new` can throw, and out of memory in a
  // destructor ends the process as std::terminate would anyway.
  // NOLINTNEXTLINE(bugprone-exception-escape)
  ~NativeStream() {
    if (stream_ == nullptr) return;
    if (Forked()) {
      Forget();
      return;
    }
    py::gil_scoped_release release;
    stream_.reset();
  }

  // The server's RegisterResponse, serialized (the Python side parses it with its stubs).
  py::bytes registration() const {
    CheckProcess();
    return py::bytes(registration_);
  }
  // Whether batches carry images (RegisteredWithImages); false: a job of fields alone.
  bool has_images() const { return has_images_; }
  int64_t batches_per_epoch() const { return Stream()->batches_per_epoch(); }
  int64_t batches_in_epoch() const { return Stream()->batches_in_epoch(); }
  int64_t reconnects() const { return Stream()->reconnects(); }
  // "server" or "encoded" (a job without images: "server", nothing is decoded).
  std::string delivery() const { return encoded_delivery_ ? "encoded" : "server"; }
  // Whether a client decoding encoded images must use DCT scaling (the server's).
  bool dct_scaling() const { return dct_scaling_; }
  // Samples this client could not decode (decode "cpu") and substituted, so far.
  int64_t client_substituted() const { return Stream()->client_substituted(); }

  // Batches of an epoch dealt from global sample position `offset` (an elastic resume):
  // the server's own rule (common/plan/epoch_plan.h BatchesFromOffset).
  int64_t batches_from_offset(int64_t offset) const {
    std::shared_ptr<RankStream> stream = Stream();
    absl::StatusOr<JobConfig> config = ResponseConfig(stream->registration());
    if (!config.ok()) Raise(config.status(), Call::kStartEpoch);
    config->plan.world_size = stream->options().job.world_size();
    absl::StatusOr<int64_t> n =
        BatchesFromOffset(stream->registration().num_samples(), config->plan, offset);
    if (!n.ok()) Raise(n.status(), Call::kStartEpoch);
    return *n;
  }

  void start_epoch(int64_t epoch, int64_t start_batch, int64_t sample_offset) {
    std::shared_ptr<RankStream> stream = Stream();
    absl::Status status;
    {
      py::gil_scoped_release release;  // stops the previous epoch's threads
      status = stream->StartEpoch(epoch, start_batch, sample_offset);
    }
    if (!status.ok()) Raise(status, Call::kStartEpoch);
  }

  // The next batch, or None after the epoch's last; its pixels (if the job has images)
  // as one block. A batch
  // already received is taken holding the GIL: every release and re-take of the GIL
  // hands it to another Python thread and back (two thread switches, each waiting for
  // the other thread to be scheduled); it is released only to wait.
  std::optional<NativeBatch> next() {
    if (!join_images_ && has_images_ && !undecoded_) {
      throw py::value_error(
          "next(): this stream keeps the pixels in pieces (join_images="
          "False); take its batches with next_into");
    }
    std::shared_ptr<RankStream> stream = Stream();
    absl::StatusOr<std::optional<ReceivedBatch>> received;
    if (stream->NextIsReady()) {
      received = stream->Next();
    } else {
      SignalCheck signals(notices_.get());
      {
        py::gil_scoped_release release;
        received = stream->Next(signals.Function());
      }
      signals.RethrowIfRaised();
    }
    return Take(std::move(received));
  }

  // The next batch with its pixels copied to `address` (`size` bytes, which must be the
  // batch's pixel count: B*3*C*C), or None after the epoch's last.
  std::optional<NativeBatch> next_into(uintptr_t address, int64_t size) {
    CheckProcess();
    if (!has_images_) {
      throw py::value_error(
          "next_into: this job has no images (image=False); take its "
          "batches with next");
    }
    if (undecoded_) {
      throw py::value_error(
          "next_into: this stream hands the images over undecoded (decode=\"none\"): there are "
          "no pixels to copy; take its batches with next");
    }
    // Checked before a batch is taken, so a wrong destination loses none.
    if (size != batch_pixel_bytes_) {
      throw py::value_error(
          absl::StrFormat("next_into: the destination holds %d bytes, the batch's pixels are %d",
                          size, batch_pixel_bytes_));
    }
    std::shared_ptr<RankStream> stream = Stream();
    absl::StatusOr<std::optional<ReceivedBatch>> received;
    SignalCheck signals(notices_.get());
    {
      py::gil_scoped_release release;
      received = stream->Next(signals.Function());
      // RankStream checked the batch's shape against the registration: `size` bytes.
      if (received.ok() && received->has_value()) {
        // NOLINTNEXTLINE(performance-no-int-to-ptr): Python hands over the buffer's address
        (**received)->CopyImagesTo(reinterpret_cast<uint8_t*>(address));
      }
    }
    signals.RethrowIfRaised();
    std::optional<NativeBatch> batch = Take(std::move(received));
    if (batch) batch->pixels_copied = true;
    return batch;
  }

  // Stops the prefetch thread, cancels the open stream and closes the channel (once the
  // calls in flight on other threads return: a next() waiting on another thread ends
  // with LoaderClosedError at once). In a forked child it only lets go of the parent's
  // stream (Forget).
  void close() {
    if (stream_ == nullptr) return;
    if (Forked()) {
      Forget();
      return;
    }
    std::shared_ptr<RankStream> stream = std::move(stream_);
    py::gil_scoped_release release;
    stream->Close();
    stream.reset();
  }

 private:
  std::shared_ptr<RankStream> Stream() const {
    CheckProcess();
    if (stream_ == nullptr) {
      RaiseKind(ErrorKind::kClosed,
                absl::StrFormat("job '%s' rank %d: the loader was closed", job_id_, rank_));
    }
    return stream_;
  }

  // Whether this is a child forked from the process that made the stream: its prefetch
  // thread and watchdog do not exist here, its mutexes may be held for ever by threads
  // that were mid-call at the fork, and its sockets are the parent's.
  bool Forked() const { return getpid() != pid_; }

  // Every call in a forked child raises, before the stream is touched: before, the
  // child's next() took batches the parent had buffered, then waited for ever.
  void CheckProcess() const {
    if (!Forked()) return;
    RaiseKind(
        ErrorKind::kFork,
        absl::StrFormat("job '%s' rank %d: this shardcast Loader was created in pid %d and this is "
                        "pid %d, a process forked from it; a Loader's stream (its thread and "
                        "connection) stays in the process that created it. Create the Loader in "
                        "the child (e.g. in a DataLoader worker after the fork), or use it in "
                        "the parent only",
                        job_id_, rank_, pid_, getpid()));
  }

  // In a forked child: lets go of the stream without destroying it. Its destructor
  // would join threads that exist only in the parent and cancel calls on the parent's
  // connection; the memory is the child's copy, freed when the child exits.
  void Forget() {
    new std::shared_ptr<RankStream>(std::move(stream_));  // deliberately never freed
  }

  // What Next() gave, as a batch (nullopt at the epoch's end) or a raised error.
  std::optional<NativeBatch> Take(absl::StatusOr<std::optional<ReceivedBatch>> received) const {
    if (!received.ok()) Raise(received.status(), Call::kNext);
    if (!received->has_value()) return std::nullopt;
    return NativeBatch{std::move(**received), field_names_};
  }

  // What the registering thread tells (on_waiting), for the waiting thread to log.
  std::shared_ptr<SignalCheck::Notices> notices_ = std::make_shared<SignalCheck::Notices>();
  std::shared_ptr<RankStream> stream_;
  const pid_t pid_ = getpid();  // the process that made the stream
  std::string job_id_;          // for messages
  int32_t rank_ = 0;
  std::string registration_;
  FieldNames field_names_;
  bool has_images_ = true;
  bool encoded_delivery_ = false;  // the registration's delivery is encoded
  bool dct_scaling_ = false;       // the registration's transform.dct_scaling
  bool undecoded_ = false;         // decode "none": batches carry no pixels
  int64_t batch_pixel_bytes_ = 0;  // B*3*C*C of the registration (0 without images)
  bool join_images_ = true;
};

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

}  // namespace
}  // namespace shardcast::client

PYBIND11_MODULE(_native, m) {
  using namespace shardcast::client;
  m.doc() = "shardcast's C++ protocol client (client/protocol/rank_stream.h) for Python";

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
      .def_property_readonly(
          "samples", [](const NativeBatch& b) { return Samples(b.wire->header(), *b.field_names); })
      // Per sample: its EncodedImage with decode "none", else None (see EncodedImages).
      .def_property_readonly("encoded", [](const NativeBatch& b) { return EncodedImages(b.wire); })
      // How many samples the server substituted, so that Python looks at them only then.
      .def_property_readonly("substituted", [](const NativeBatch& b) {
        int count = 0;
        for (const v1::SampleInfo& s : b.wire->header().samples()) count += s.substituted();
        return count;
      });

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

  py::enum_<ErrorKind>(m, "ErrorKind", "the kinds of error (one shardcast.errors class each)")
      .value("VALUE", ErrorKind::kValue)
      .value("UNAVAILABLE", ErrorKind::kUnavailable)
      .value("TIMEOUT", ErrorKind::kTimeout)
      .value("REFUSED", ErrorKind::kRefused)
      .value("CHANGED", ErrorKind::kChanged)
      .value("CHECK", ErrorKind::kCheck)
      .value("CLOSED", ErrorKind::kClosed)
      .value("FORK", ErrorKind::kFork)
      .value("ERROR", ErrorKind::kError);

  // The channel's credentials and token, opaque: built by client_security().
  // NOLINTNEXTLINE(bugprone-unused-raii): the constructor registers the class with `m`
  py::class_<ClientSecurity>(m, "Security");
  m.def(
      "client_security",
      [](bool tls, const std::optional<std::string>& tls_ca,
         const std::optional<std::string>& tls_cert, const std::optional<std::string>& tls_key,
         std::optional<std::string> token) {
        ClientSecurityValues values;
        values.tls = tls;
        values.tls_ca = tls_ca.value_or("");
        values.tls_cert = tls_cert.value_or("");
        values.tls_key = tls_key.value_or("");
        values.token = std::move(token);
        absl::StatusOr<ClientSecurity> security = LoadClientSecurity(values, KeywordNames());
        if (!security.ok()) throw py::value_error(std::string(security.status().message()));
        return *std::move(security);
      },
      py::arg("tls") = false, py::arg("tls_ca") = py::none(), py::arg("tls_cert") = py::none(),
      py::arg("tls_key") = py::none(), py::arg("token") = py::none(),
      "the C++ clients' rule (client_security.h): TLS when tls, tls_ca or tls_cert is given, a "
      "client certificate with tls_cert and tls_key (both or neither), the token given or else "
      "$SHARDCAST_TOKEN's (one token or empty); ValueError naming the keyword and the file");

  // A rank's stream settings (stream_settings.h; its defaults), named as the Loader's
  // keywords.
  py::class_<StreamSettings>(m, "StreamOptions")
      .def(py::init<>())
      // An address that cannot be one is a ValueError here, before anything connects.
      .def_property(
          "server", [](const StreamSettings& settings) { return settings.server; },
          [](StreamSettings& settings, const std::string& server) {
            if (absl::Status valid = CheckServerList(server); !valid.ok()) {
              throw py::value_error(std::string(valid.message()));
            }
            settings.server = server;
          })
      .def_readwrite("prefetch", &StreamSettings::prefetch)
      .def_readwrite("reconnect_initial", &StreamSettings::reconnect_initial_seconds)
      .def_readwrite("reconnect_max", &StreamSettings::reconnect_max_seconds)
      .def_readwrite("reconnect_deadline", &StreamSettings::reconnect_deadline_seconds)
      .def_readwrite("handshake_refusal", &StreamSettings::handshake_refusal_seconds)
      .def_readwrite("stream_timeout", &StreamSettings::stream_timeout_seconds)
      .def_readwrite("join_images", &StreamSettings::join_images)
      // "server" (pixels from the server), "cpu" (encoded delivery decoded by this
      // client's threads, without the GIL: the same pixels) or "none" (encoded delivery
      // handed over undecoded: each sample's `encoded`, no pixels).
      .def_property(
          "decode",
          [](const StreamSettings& settings) {
            for (const auto& [name, decode] : kDecodeNames) {
              if (decode == settings.decode) return std::string(name);
            }
            return std::string();
          },
          [](StreamSettings& settings, const std::string& name) {
            for (const auto& [known, decode] : kDecodeNames) {
              if (name == known) {
                settings.decode = decode;
                return;
              }
            }
            throw py::value_error(absl::StrFormat("decode: '%s' is not one of server, cpu, none",
                                                  absl::CHexEscape(name)));
          })
      .def_readwrite("decode_threads", &StreamSettings::decode_threads)
      .def_readwrite("max_decode_memory", &StreamSettings::max_decode_memory_bytes);

  // The run's rules (client/protocol/run_rules.h), as shardcast-train applies them.
  m.def("new_job_id", &NewRunJobId, "run-<host>-<pid>-<random>: a new job id for a run");
  // The server's parser (field_spec.h), so that a spec no member name can match is a
  // ValueError when the Loader is made, not a refusal after it connected.
  m.def(
      "check_field_specs",
      [](const std::vector<std::string>& specs) {
        if (absl::StatusOr<std::vector<shardcast::FieldSpec>> parsed =
                shardcast::ParseFieldSpecs(specs);
            !parsed.ok()) {
          throw py::value_error(std::string(parsed.status().message()));
        }
      },
      "ValueError naming the spec and what is wrong with it (field_spec.h's rules)");
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

  py::class_<NativeStream>(m, "Stream")
      .def(py::init<const py::bytes&, const StreamSettings&, const ClientSecurity&>(),
           py::arg("job"), py::arg("options"), py::arg("security"))
      .def_property_readonly("registration", &NativeStream::registration)
      .def_property_readonly("has_images", &NativeStream::has_images)
      .def_property_readonly("batches_per_epoch", &NativeStream::batches_per_epoch)
      .def_property_readonly("batches_in_epoch", &NativeStream::batches_in_epoch)
      .def_property_readonly("reconnects", &NativeStream::reconnects)
      .def_property_readonly("delivery", &NativeStream::delivery)
      .def_property_readonly("dct_scaling", &NativeStream::dct_scaling)
      .def_property_readonly("client_substituted", &NativeStream::client_substituted)
      .def("batches_from_offset", &NativeStream::batches_from_offset, py::arg("sample_offset"))
      .def("start_epoch", &NativeStream::start_epoch, py::arg("epoch"), py::arg("start_batch") = 0,
           py::arg("sample_offset") = 0)
      .def("next", &NativeStream::next)
      .def("next_into", &NativeStream::next_into, py::arg("address"), py::arg("size"))
      .def("close", &NativeStream::close);

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
        "(client/protocol/receive_memory.h); whether glibc took them");

  // Encoded delivery: a sample's CPU decode, and the pieces of the GPU decode's tests.
  BindEncodedImageFunctions(m);
}

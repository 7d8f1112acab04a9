// shardcast._native.Stream: one rank's RankStream (client/stream/rank_stream.h) for
// Python, its waits without the GIL and its batches as NativeBatch (batch_bindings.h).
#include "python/native/stream_bindings.h"

#include <pybind11/stl.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "client/checks/stream_checks.h"
#include "client/rpc/client_security.h"
#include "client/stream/rank_stream.h"
#include "common/plan/epoch_plan.h"
#include "proto/job_config_proto.h"
#include "python/native/batch_bindings.h"
#include "python/native/native_errors.h"
#include "python/native/without_gil.h"

namespace py = pybind11;

namespace shardcast::client {
namespace {

namespace v1 = ::shardcast::v1;

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
    stream =
        WithoutGil([&] { return RankStream::Connect(std::move(options), signals.Function()); });
    signals.RethrowIfRaised();
    if (!stream.ok()) Raise(stream.status(), Call::kRegister);
    stream_ = std::shared_ptr<RankStream>(std::move(*stream));
    const v1::RegisterResponse& registration = stream_->registration();
    registration_ = registration.SerializeAsString();
    field_names_ = NamesOfFields(registration);
    dataset_ = std::make_shared<const std::string>(registration.dataset());
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

  // `mix_resume`: a serialized MixtureResume (a mixed job resumed from another run), or
  // empty.
  void start_epoch(int64_t epoch, int64_t start_batch, int64_t sample_offset,
                   const py::bytes& mix_resume) {
    std::shared_ptr<RankStream> stream = Stream();
    v1::MixtureResume resume;
    if (!resume.ParseFromString(std::string(mix_resume))) {
      throw py::value_error("mix_resume: not a serialized shardcast.v1.MixtureResume");
    }
    // Without the GIL: it stops the previous epoch's threads.
    const absl::Status status =
        WithoutGil([&] { return stream->StartEpoch(epoch, start_batch, sample_offset, resume); });
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
      received = WithoutGil([&] { return stream->Next(signals.Function()); });
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
    WithoutGil([&] {
      received = stream->Next(signals.Function());
      // RankStream checked the batch's shape against the registration: `size` bytes.
      if (received.ok() && received->has_value()) {
        // NOLINTNEXTLINE(performance-no-int-to-ptr): Python hands over the buffer's address
        (**received)->CopyImagesTo(reinterpret_cast<uint8_t*>(address));
      }
    });
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
    // Often called from another thread than the one iterating (to end its wait), one
    // that may still be here when the main thread exits: WithoutGil, not
    // gil_scoped_release, so that Python ending it then does not abort the process.
    WithoutGil([&] {
      stream->Close();
      stream.reset();
    });
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
    return NativeBatch{std::move(**received), field_names_, false, dataset_};
  }

  // What the registering thread tells (on_waiting), for the waiting thread to log.
  std::shared_ptr<SignalCheck::Notices> notices_ = std::make_shared<SignalCheck::Notices>();
  std::shared_ptr<RankStream> stream_;
  const pid_t pid_ = getpid();  // the process that made the stream
  std::string job_id_;          // for messages
  int32_t rank_ = 0;
  std::string registration_;
  FieldNames field_names_;
  std::shared_ptr<const std::string> dataset_;  // RegisterResponse.dataset
  bool has_images_ = true;
  bool encoded_delivery_ = false;  // the registration's delivery is encoded
  bool dct_scaling_ = false;       // the registration's transform.dct_scaling
  bool undecoded_ = false;         // decode "none": batches carry no pixels
  int64_t batch_pixel_bytes_ = 0;  // B*3*C*C of the registration (0 without images)
  bool join_images_ = true;
};

}  // namespace

void BindStream(py::module_& m) {
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
           py::arg("sample_offset") = 0, py::arg("mix_resume") = py::bytes())
      .def("next", &NativeStream::next)
      .def("next_into", &NativeStream::next_into, py::arg("address"), py::arg("size"))
      .def("close", &NativeStream::close);
}

}  // namespace shardcast::client

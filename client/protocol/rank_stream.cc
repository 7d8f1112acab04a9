// RankStream: registration with retry, the prefetch thread, batch checks,
// reconnect/resume and the progress watchdog (see rank_stream.h).
#include "client/protocol/rank_stream.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/protocol/channel.h"
#include "client/protocol/server_list.h"
#include "client/protocol/stream_clocks.h"
#include "common/plan/epoch_plan.h"
#include "common/plan/job_config.h"
#include "proto/job_config_proto.h"
#include "shardcast/v1/shardcast.grpc.pb.h"

namespace shardcast::client {
namespace {

namespace v1 = ::shardcast::v1;

// Marks SameJob's FAILED_PRECONDITION, which a server's refusal of the same code is not.
constexpr char kJobChangedPayload[] = "type.shardcast.dev/client.JobChanged";
// Marks the CANCELLED of a closed stream, which an interrupted wait's is not.
constexpr char kClosedPayload[] = "type.shardcast.dev/client.Closed";

absl::Status ClosedError(const v1::RegisterRequest& job) {
  absl::Status status = absl::CancelledError(
      absl::StrFormat("job '%s' rank %d: the stream was closed", job.job_id(), job.rank()));
  status.SetPayload(kClosedPayload, absl::Cord("1"));
  return status;
}

absl::Status InterruptedError(const v1::RegisterRequest& job) {
  return absl::CancelledError(
      absl::StrFormat("job '%s' rank %d: interrupted while waiting", job.job_id(), job.rank()));
}

// Checks what a registration says about the memory of every batch before anything is
// sized by it: a batch size of 0 or an image of no pixels made batches of no bytes that
// a consumer indexed (SIGSEGV in Python), extents of 2^32 overflowed the byte count to 0,
// and a huge shape would size a pinned buffer of terabytes. The bounds are the server's
// own (job_config.h) and what one protobuf message holds. `where` names server and job.
absl::Status CheckRegistration(const v1::RegisterResponse& r, absl::string_view where) {
  std::string wrong;
  const auto& shape = r.image_shape();
  const auto extent_ok = [](int64_t e) { return e >= 1 && e <= kMaxResize; };
  if (r.batches_per_epoch() <= 0) {
    wrong = absl::StrFormat("batches_per_epoch %d (want >= 1)", r.batches_per_epoch());
  } else if (r.batch_size() < 1 || r.batch_size() > kMaxBatchSize) {
    wrong = absl::StrFormat("batch size %d (want 1..%d)", r.batch_size(), kMaxBatchSize);
  } else if (shape.size() != 3 || shape[0] != 3 || !extent_ok(shape[1]) || !extent_ok(shape[2])) {
    wrong = absl::StrFormat("image shape [%s] (want [3,H,W] with H and W in 1..%d)",
                            absl::StrJoin(shape, ","), kMaxResize);
  } else if (const int64_t bytes = int64_t{r.batch_size()} * 3 * shape[1] * shape[2];
             bytes > kMaxBatchPixelBytes) {
    wrong = absl::StrFormat(
        "batches of %d pixel bytes (batch size %d, image shape [%s]), more than one message "
        "holds (%d)",
        bytes, r.batch_size(), absl::StrJoin(shape, ","), kMaxBatchPixelBytes);
  } else {
    return absl::OkStatus();
  }
  return absl::DataLossError(
      absl::StrCat(where, " answered a registration no batch can be received with: ", wrong));
}

// Statuses a reconnect cannot fix: the request itself is wrong, the job conflicts
// with what other ranks registered, this is not a shardcast server, or the server
// refused this client's token or certificate (IsSecurityRefusal: also the TLS
// handshake failures gRPC reports as UNAVAILABLE). Everything else (UNAVAILABLE above
// all: server killed, restarting, network) is retried.
bool IsPermanent(const grpc::Status& status) {
  if (IsSecurityRefusal(status)) return true;
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      return true;
    default:
      return false;
  }
}

// Watches a run of register attempts for a peer that keeps closing the connection
// during the handshake (IsClosedDuringConnect); once that lasted `limit`, Observe
// returns the error to give up with. Any other outcome ends the run.
class HandshakeRefusalWatch {
 public:
  explicit HandshakeRefusalWatch(absl::Duration limit) : limit_(limit) {}
  absl::Status Observe(const grpc::Status& status, absl::string_view what) {
    if (!IsClosedDuringConnect(status)) {
      since_.reset();
      return absl::OkStatus();
    }
    const absl::Time now = absl::Now();
    if (!since_) since_ = now;
    if (now - *since_ < limit_) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat(what, ": the server accepted every connection for ",
                                               absl::FormatDuration(limit_),
                                               " but closed it during the handshake (",
                                               status.error_message(), ")", SecurityHint(status)));
  }

 private:
  const absl::Duration limit_;
  std::optional<absl::Time> since_;
};

std::shared_ptr<grpc::Channel> MakeStreamChannel(const RankStreamOptions& options,
                                                 const std::string& target) {
  ChannelOptions channel;
  channel.target = target;
  channel.credentials = options.credentials;
  channel.bearer_token = options.bearer_token;
  channel.reconnect_backoff_initial = absl::Seconds(options.reconnect_initial_seconds);
  channel.reconnect_backoff_max = absl::Seconds(options.reconnect_max_seconds);
  channel.stream_window_bytes = options.stream_window_bytes;
  return MakeChannel(channel);
}

// What the prefetch thread hands to Next(): a received batch, or the error that
// ended the epoch's stream (delivered after every batch received before it).
struct QueueItem {
  ReceivedBatch batch;
  absl::Status error;
};

}  // namespace

// One replica of the server: its channel (nothing connects before the first call).
struct Replica {
  Replica(const RankStreamOptions& options, std::string replica_target)
      : target(std::move(replica_target)),
        channel(MakeStreamChannel(options, target)),
        stub(v1::Shardcast::NewStub(channel)),
        batch_stub(channel) {}
  const std::string target;
  const std::shared_ptr<grpc::Channel> channel;
  const std::unique_ptr<v1::Shardcast::Stub> stub;  // Register
  const WireBatchStub batch_stub;
};

class RankStream::Impl {
 public:
  // `targets`: the replicas in the order this rank tries them (server_list.h).
  Impl(RankStreamOptions options, const std::vector<std::string>& targets)
      : options_(std::move(options)) {
    for (const std::string& target : targets) {
      replicas_.push_back(std::make_unique<Replica>(options_, target));
    }
  }

  ~Impl() { StopPrefetch(); }

  // Register with retries on the caller's thread (Connect).
  absl::Status InitialRegister() {
    if (options_.prefetch < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("prefetch must be >= 1, got ", options_.prefetch));
    }
    if (!(options_.stream_timeout_seconds >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat("stream timeout must be >= 0 seconds, got ",
                                                     options_.stream_timeout_seconds));
    }
    const absl::Time give_up = absl::Now() + absl::Seconds(options_.reconnect_deadline_seconds);
    absl::Duration backoff = absl::Seconds(options_.reconnect_initial_seconds);
    int64_t attempts = 0;
    HandshakeRefusalWatch refusal(absl::Seconds(options_.handshake_refusal_seconds));
    std::string last_error;
    while (true) {
      v1::RegisterResponse response;
      grpc::Status status = RegisterOnce(give_up, &response);
      ++attempts;
      if (status.ok()) {
        registration_ = std::move(response);
        registered_at_ = replica().target;
        return CheckRegistration(
            registration_,
            absl::StrFormat("server %s, registering rank %d of job '%s',", replica().target,
                            options_.job.rank(), options_.job.job_id()));
      }
      if (StopRequested()) return InterruptedError(options_.job);  // Connect's interrupt
      if (IsPermanent(status) || status.error_code() == grpc::StatusCode::CANCELLED) {
        return FromGrpcStatus(
            status, absl::StrFormat("register rank %d of job '%s' at %s", options_.job.rank(),
                                    options_.job.job_id(), replica().target));
      }
      if (absl::Status refused = refusal.Observe(
              status, absl::StrFormat("register rank %d of job '%s' at %s", options_.job.rank(),
                                      options_.job.job_id(), replica().target));
          !refused.ok()) {
        return refused;
      }
      // The attempt that starts at the deadline ends at once with DEADLINE_EXCEEDED; the
      // error of the attempt before says more.
      if (status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED || last_error.empty()) {
        last_error = status.error_message();
      }
      const absl::Time now = absl::Now();
      if (now >= give_up) {
        return absl::UnavailableError(absl::StrFormat(
            "register rank %d of job '%s' at %s: server unreachable for %.1f s (%d attempts); "
            "last error: %s",
            options_.job.rank(), options_.job.job_id(), options_.server,
            options_.reconnect_deadline_seconds, attempts, last_error));
      }
      // Unreachable or draining: the next replica at once; a round that reached none
      // waits its backoff. Attempts fail fast, so the loop itself waits out the whole
      // deadline.
      if (MoveToNextReplica()) continue;
      if (!SleepUnlessStopped(std::min(backoff, give_up - now))) {
        return InterruptedError(options_.job);
      }
      backoff = std::min(backoff * 2, absl::Seconds(options_.reconnect_max_seconds));
    }
  }

  const RankStreamOptions& options() const { return options_; }
  const v1::RegisterResponse& registration() const { return registration_; }
  int64_t batches_per_epoch() const { return registration_.batches_per_epoch(); }
  int64_t reconnects() const {
    absl::MutexLock lock(&mu_);
    return reconnects_;
  }

  int64_t batches_in_epoch() const {
    absl::MutexLock lock(&mu_);
    return epoch_batches_;
  }

  absl::Status StartEpoch(int64_t epoch, int64_t start_batch, int64_t sample_offset) {
    int64_t n = batches_per_epoch();
    if (sample_offset != 0) {
      absl::StatusOr<JobConfig> config = ResponseConfig(registration_);
      if (!config.ok()) return config.status();
      config->plan.world_size = options_.job.world_size();
      absl::StatusOr<int64_t> left =
          BatchesFromOffset(registration_.num_samples(), config->plan, sample_offset);
      if (!left.ok()) {
        return absl::Status(left.status().code(),
                            absl::StrFormat("job '%s' epoch %d: %s", options_.job.job_id(), epoch,
                                            left.status().message()));
      }
      n = *left;
    }
    if (epoch < 0 || start_batch < 0 || start_batch > n) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "StartEpoch(epoch=%d, start_batch=%d): need epoch >= 0 and 0 <= start_batch <= %d "
          "(batches of this epoch of job '%s')",
          epoch, start_batch, n, options_.job.job_id()));
    }
    // Close() on another thread stops the threads this starts: one of the two at a time.
    absl::MutexLock control(&control_mu_);
    if (IsClosedNow()) return ClosedError(options_.job);
    StopPrefetch();
    {
      absl::MutexLock lock(&mu_);
      queue_.clear();
      stop_ = false;
      started_ = true;
      epoch_ = epoch;
      epoch_batches_ = n;
      handed_out_ = start_batch;
      producer_done_ = start_batch == n;
    }
    if (start_batch < n) {
      thread_ = std::thread([this, epoch, start_batch, n, sample_offset] {
        PrefetchLoop(epoch, start_batch, n, sample_offset);
      });
      if (stream_timeout() > absl::ZeroDuration()) watchdog_ = std::thread([this] { Watchdog(); });
    }
    return absl::OkStatus();
  }

  bool NextIsReady() const {
    absl::MutexLock lock(&mu_);
    return ReadyLocked();
  }

  void Close() {
    absl::MutexLock control(&control_mu_);
    {
      absl::MutexLock lock(&mu_);
      closed_ = true;  // wakes a Next() waiting on another thread
    }
    StopPrefetch();
  }

  // Tells the thread registering or prefetching to stop, and cancels its RPC in flight.
  void RequestStop() {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    if (active_context_ != nullptr) active_context_->TryCancel();
  }

  bool IsClosedNow() const {
    absl::MutexLock lock(&mu_);
    return closed_;
  }

  absl::StatusOr<std::optional<ReceivedBatch>> Next(const InterruptCheck& interrupted) {
    if (interrupted != nullptr) {
      // The wait in slices, `interrupted` asked between them without the lock: it may
      // wait for a lock of its own (Python's GIL) held by a thread that is asking this
      // stream something (reconnects()). Ready stays ready for the one consumer.
      while (!WaitReady(kInterruptPollInterval)) {
        if (interrupted()) return InterruptedError(options_.job);
      }
    }
    QueueItem item;
    int64_t epoch = 0;
    int64_t expected_index = 0;
    {
      absl::MutexLock lock(&mu_);
      if (closed_) return ClosedError(options_.job);
      if (!started_) {
        return absl::FailedPreconditionError("Next() before StartEpoch()");
      }
      if (handed_out_ >= epoch_batches_) return std::optional<ReceivedBatch>();
      if (!sticky_error_.ok()) return sticky_error_;
      mu_.Await(absl::Condition(this, &Impl::ReadyLocked));
      if (closed_) return ClosedError(options_.job);  // by Close() on another thread
      if (queue_.empty()) {
        // The producer stopped without delivering the batch: only possible if it
        // was told to stop, which only StartEpoch/destructor do.
        return absl::InternalError(absl::StrFormat(
            "epoch %d of job '%s': prefetch ended at batch %d of %d without an error", epoch_,
            options_.job.job_id(), handed_out_, epoch_batches_));
      }
      item = std::move(queue_.front());
      queue_.pop_front();
      if (!item.error.ok()) {
        sticky_error_ = item.error;
        return item.error;
      }
      epoch = epoch_;
      expected_index = handed_out_;
      ++handed_out_;
    }
    const WireBatch& msg = *item.batch;
    if (msg.epoch() != epoch || msg.index() != expected_index) {
      // The prefetch thread already checks this; a mismatch here is a bug in it.
      return absl::InternalError(absl::StrFormat(
          "job '%s' rank %d: expected batch (epoch %d, index %d), got (epoch %d, index %d)",
          options_.job.job_id(), options_.job.rank(), epoch, expected_index, msg.epoch(),
          msg.index()));
    }
    return std::optional<ReceivedBatch>(std::move(item.batch));
  }

 private:
  // Whether Next() would return without waiting: a batch, the end or an error is ready.
  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || !started_ || handed_out_ >= epoch_batches_ || !sticky_error_.ok() ||
           !queue_.empty() || producer_done_;
  }

  // Waits up to `timeout` for ReadyLocked(); whether it holds.
  bool WaitReady(absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(this, &Impl::ReadyLocked), timeout);
  }

  // One Register call, failing fast when the channel cannot connect: the callers retry
  // with their own backoff until `give_up`, and a failed connect returns gRPC's reason
  // at once, so a failed TLS handshake is told apart from an unreachable server
  // (wait_for_ready would hide it behind DEADLINE_EXCEEDED at the deadline).
  // Cancellable by StopPrefetch while it is in flight.
  grpc::Status RegisterOnce(absl::Time give_up, v1::RegisterResponse* response) {
    grpc::ClientContext context;
    context.set_wait_for_ready(false);
    context.set_deadline(absl::ToChronoTime(give_up));
    if (!SetActiveContext(&context)) return grpc::Status(grpc::StatusCode::CANCELLED, "stopped");
    grpc::Status status = replica().stub->Register(&context, options_.job, response);
    SetActiveContext(nullptr);
    return status;
  }

  // Publishes the context of the RPC in flight so StopPrefetch can cancel it.
  // Returns false (and publishes nothing) once a stop was requested.
  bool SetActiveContext(grpc::ClientContext* context) {
    absl::MutexLock lock(&mu_);
    if (context != nullptr && stop_) return false;
    active_context_ = context;
    return true;
  }

  bool StopRequested() {
    absl::MutexLock lock(&mu_);
    return stop_;
  }

  void Deliver(QueueItem item) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(item));
  }

  void DeliverError(absl::Status error) { Deliver(QueueItem{nullptr, std::move(error)}); }

  // Waits for queue space; false if a stop was requested meanwhile.
  bool WaitForSpace() {
    absl::MutexLock lock(&mu_);
    auto space = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || static_cast<int>(queue_.size()) < options_.prefetch;
    };
    mu_.Await(absl::Condition(&space));
    return !stop_;
  }

  // Sleeps for `d` unless a stop is requested first; false if stopped.
  bool SleepUnlessStopped(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
    mu_.AwaitWithTimeout(absl::Condition(&stopped), d);
    return !stop_;
  }

  absl::Duration stream_timeout() const { return absl::Seconds(options_.stream_timeout_seconds); }

  // Arms the watchdog: the message the prefetch thread is about to wait for must
  // arrive by `deadline` (InfiniteFuture: disarmed, e.g. while the queue is full).
  void WatchRead(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    read_deadline_ = deadline;
  }

  // Whether the watchdog cancelled the stream in flight since the last call.
  bool TakeStalled() {
    absl::MutexLock lock(&mu_);
    const bool stalled = stalled_;
    stalled_ = false;
    return stalled;
  }

  // The watchdog thread (stream timeout > 0): cancels the RPC in flight once the
  // message the prefetch thread waits for is overdue. The sync Read() cannot be given
  // a deadline of its own, and a call deadline would also cut a healthy long epoch.
  void Watchdog() {
    absl::MutexLock lock(&mu_);
    while (!stop_ && !producer_done_) {
      const absl::Time deadline = read_deadline_;
      if (absl::Now() >= deadline) {
        stalled_ = true;
        read_deadline_ = absl::InfiniteFuture();
        if (active_context_ != nullptr) active_context_->TryCancel();
        continue;
      }
      // Woken early only when the deadline moves closer (armed after being disarmed);
      // a deadline pushed later by a received batch is seen when the old one passes.
      auto woken = [this, deadline]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || producer_done_ || read_deadline_ < deadline;
      };
      mu_.AwaitWithDeadline(absl::Condition(&woken), deadline);
    }
  }

  // After a reconnect: the server must still serve the job this rank started with
  // (same data and settings, same world size, batch size and n), or resuming would
  // silently hand out other samples or other pixels.
  absl::Status SameJob(const v1::RegisterResponse& now, int64_t epoch, int64_t next) const {
    const v1::RegisterResponse& was = registration_;
    std::string changed;
    if (now.job_fingerprint() != was.job_fingerprint()) {
      changed = absl::StrFormat(
          "job fingerprint %s (was %s: other data, job config or byte-changing server settings)",
          now.job_fingerprint(), was.job_fingerprint());
    } else if (now.world_size() != was.world_size() || now.batch_size() != was.batch_size()) {
      changed =
          absl::StrFormat("world size %d and batch size %d (were %d and %d)", now.world_size(),
                          now.batch_size(), was.world_size(), was.batch_size());
    } else if (now.batches_per_epoch() != was.batches_per_epoch()) {
      changed = absl::StrFormat("%d batches per epoch (was %d)", now.batches_per_epoch(),
                                was.batches_per_epoch());
    } else {
      return absl::OkStatus();
    }
    const std::string where =
        replica().target == registered_at_
            ? absl::StrCat("server ", registered_at_)
            : absl::StrCat("replica ", replica().target, " (the rank registered at ",
                           registered_at_,
                           ": the replicas serve other data, defaults or settings such as "
                           "--max-member-bytes; each server logs its settings)");
    absl::Status status = absl::FailedPreconditionError(
        absl::StrFormat("job '%s' rank %d: after reconnecting, %s has %s; cannot resume epoch %d "
                        "at batch %d",
                        options_.job.job_id(), options_.job.rank(), where, changed, epoch, next));
    status.SetPayload(kJobChangedPayload, absl::Cord("1"));
    return status;
  }

  // Checks a received message against what must come next; the error names both.
  absl::Status CheckBatch(const WireBatch& wire, int64_t epoch, int64_t expected_index) const {
    const v1::Batch& msg = wire.header();
    const std::string where =
        absl::StrFormat("job '%s' rank %d epoch %d batch %d", options_.job.job_id(),
                        options_.job.rank(), epoch, expected_index);
    if (msg.epoch() != epoch || msg.index() != expected_index) {
      return absl::DataLossError(absl::StrFormat(
          "%s: server sent (epoch %d, index %d) instead; the stream is out of sequence", where,
          msg.epoch(), msg.index()));
    }
    // Every batch is full (remainder drop or pad: the fixed-count guarantee), so its
    // shape is the registration's exactly and a consumer can size its buffers once.
    const auto& image_shape = registration_.image_shape();
    if (msg.shape_size() != 4 || msg.shape(0) != registration_.batch_size() ||
        msg.shape(1) != image_shape[0] || msg.shape(2) != image_shape[1] ||
        msg.shape(3) != image_shape[2]) {
      return absl::DataLossError(absl::StrFormat(
          "%s: batch shape [%s] does not match the registered batch size %d and image shape "
          "[%s]",
          where, absl::StrJoin(msg.shape(), ","), registration_.batch_size(),
          absl::StrJoin(image_shape, ",")));
    }
    const int64_t b = msg.shape(0);
    const int64_t bytes = b * msg.shape(1) * msg.shape(2) * msg.shape(3);
    if (wire.image_bytes() != bytes || msg.labels_size() != b || msg.samples_size() != b) {
      return absl::DataLossError(absl::StrFormat(
          "%s: %d image bytes, %d labels, %d samples for shape [%s] (want %d, %d, %d)", where,
          wire.image_bytes(), msg.labels_size(), msg.samples_size(),
          absl::StrJoin(msg.shape(), ","), bytes, b, b));
    }
    return absl::OkStatus();
  }

  // What one StreamBatches call came to.
  struct Attempt {
    grpc::Status status;   // OK once the epoch's last batch arrived
    int64_t received = 0;  // batches this call delivered
    bool stalled = false;  // the watchdog cut it
    bool moving = false;   // the server drains: the rank moves to another replica
    bool ended = false;    // the loop must end: an error was delivered, or stop
  };

  // One StreamBatches call from batch *next of `epoch`: delivers what arrives, checked,
  // advancing *next, until the stream ends, breaks, is cut by the watchdog (the read
  // deadlines come from the clocks) or the consumer stops.
  Attempt StreamOnce(int64_t epoch, int64_t n, int64_t sample_offset, int64_t* next,
                     const RetryClock& retry, StallClock* stall) {
    Attempt attempt;
    auto read_deadline = [&] {
      return stall->ReadDeadline(absl::Now(), std::min(retry.GiveUp(), stall->GiveUp()));
    };
    grpc::ClientContext context;
    if (!SetActiveContext(&context)) {
      attempt.ended = true;
      return attempt;
    }
    v1::StreamBatchesRequest request;
    request.set_job_id(options_.job.job_id());
    request.set_rank(options_.job.rank());
    request.set_epoch(epoch);
    request.set_start_batch(*next);
    request.set_sample_offset(sample_offset);
    request.set_job_fingerprint(registration_.job_fingerprint());
    WatchRead(read_deadline());  // the first batch counts from the request
    // The generated stub would parse every batch into a v1::Batch, copying its
    // pixels; a reader of WireBatch keeps them in the received slices.
    std::unique_ptr<grpc::ClientReader<WireBatch>> reader =
        replica().batch_stub.StreamBatches(&context, request);
    auto msg = std::make_shared<WireBatch>();
    absl::Status bad;
    while (reader->Read(msg.get())) {
      WatchRead(absl::InfiniteFuture());  // waiting for queue space is the consumer's time
      if (*next >= n) {
        bad = absl::DataLossError(absl::StrFormat(
            "job '%s' rank %d epoch %d: server sent batch %d past the last one (%d)",
            options_.job.job_id(), options_.job.rank(), epoch, msg->index(), n - 1));
      } else {
        bad = CheckBatch(*msg, epoch, *next);
      }
      if (!bad.ok()) break;
      if (options_.join_images) msg->JoinImages();
      if (!WaitForSpace()) break;
      const bool draining = msg->header().server_draining();
      Deliver(QueueItem{std::move(msg), absl::OkStatus()});
      ++*next;
      ++attempt.received;
      stall->BatchArrived();
      // A draining server's batches say so: with another replica to go to, the rank
      // moves now rather than when the grace period cuts the stream.
      if (draining && replicas_.size() > 1 && *next < n) {
        attempt.moving = true;
        break;
      }
      msg = std::make_shared<WireBatch>();
      WatchRead(read_deadline());
    }
    // A message that did not parse ends Read() as the stream's end would: it is the
    // server's error, not the network's, so the stream fails here, not retried (and
    // the call is cancelled, or Finish() waits for the rest of it).
    if (bad.ok() && msg != nullptr && !msg->parse_error().ok()) {
      bad = absl::DataLossError(absl::StrFormat("job '%s' rank %d epoch %d batch %d: %s",
                                                options_.job.job_id(), options_.job.rank(), epoch,
                                                *next, msg->parse_error().message()));
    }
    WatchRead(absl::InfiniteFuture());
    if (!bad.ok() || StopRequested() || attempt.moving) context.TryCancel();
    attempt.status = reader->Finish();
    SetActiveContext(nullptr);
    attempt.stalled = TakeStalled();
    if (!bad.ok()) {
      DeliverError(bad);
      attempt.ended = true;
    } else if (StopRequested()) {
      attempt.ended = true;
    } else if (attempt.moving) {
      attempt.status = grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrFormat("server %s is draining; moving after batch %d", replica().target, *next));
    } else if (attempt.stalled && *next < n) {
      attempt.status = grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          absl::StrFormat("no batch for %g s (stream timeout); stream cancelled after batch %d",
                          options_.stream_timeout_seconds, *next));
    } else if (attempt.status.ok() && *next < n) {
      attempt.status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                    absl::StrFormat("stream ended after batch %d of %d", *next, n));
    }
    return attempt;
  }

  // The error to give up with once both clocks' time is over at `now`; OK while
  // retrying may go on.
  absl::Status GiveUpError(absl::Time now, int64_t epoch, int64_t next, int64_t n,
                           const RetryClock& retry, const StallClock& stall) const {
    if (now < std::min(retry.GiveUp(), stall.GiveUp())) return absl::OkStatus();
    if (stall.stalled()) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "job '%s' rank %d epoch %d: no batch from server %s for %g s (the stream timeout) "
          "at batch %d of %d, and reconnecting brought none within another %g s (%d "
          "attempts); last error: %s",
          options_.job.job_id(), options_.job.rank(), epoch, options_.server,
          options_.stream_timeout_seconds, next, n, options_.stream_timeout_seconds,
          retry.attempts(), retry.last_error()));
    }
    return absl::UnavailableError(absl::StrFormat(
        "job '%s' rank %d epoch %d: stream broken at batch %d of %d and server %s not back "
        "within %.1f s (%d attempts); last error: %s",
        options_.job.job_id(), options_.job.rank(), epoch, next, n, options_.server,
        options_.reconnect_deadline_seconds, retry.attempts(), retry.last_error()));
  }

  // The prefetch thread: streams batches start..n-1 of `epoch` (dealt from
  // `sample_offset`) into queue_, resuming after a broken stream at the first batch not
  // yet received.
  void PrefetchLoop(int64_t epoch, int64_t start_batch, int64_t n, int64_t sample_offset) {
    int64_t next = start_batch;  // first batch not yet received
    RetryClock retry(absl::Seconds(options_.reconnect_initial_seconds),
                     absl::Seconds(options_.reconnect_max_seconds),
                     absl::Seconds(options_.reconnect_deadline_seconds));
    StallClock stall(stream_timeout());
    HandshakeRefusalWatch refusal(absl::Seconds(options_.handshake_refusal_seconds));
    bool need_register = false;    // the server may have forgotten the job
    bool registered_here = false;  // a Register succeeded since the last batch

    while (next < n && !StopRequested()) {
      grpc::Status status;
      if (need_register) {
        v1::RegisterResponse response;
        status = RegisterOnce(std::min(retry.GiveUp(), stall.GiveUp()), &response);
        if (absl::Status refused = refusal.Observe(
                status, absl::StrFormat("job '%s' rank %d epoch %d: re-register at %s",
                                        options_.job.job_id(), options_.job.rank(), epoch,
                                        replica().target));
            !refused.ok()) {
          DeliverError(refused);
          break;
        }
        if (status.ok()) {
          registered_here = true;
          if (absl::Status same = SameJob(response, epoch, next); !same.ok()) {
            DeliverError(same);
            break;
          }
        }
      }
      bool stalled = false;
      if (status.ok()) {
        const Attempt attempt = StreamOnce(epoch, n, sample_offset, &next, retry, &stall);
        if (attempt.ended) break;
        status = attempt.status;
        stalled = attempt.stalled;
        if (attempt.received > 0) {
          retry.Reset();
          registered_here = false;
          need_register = false;
          round_start_ = current_.load();
        }
        if (attempt.moving) {
          // A planned move, not a failure: register with the next replica and resume
          // there at batch `next`.
          MoveToNextReplica();
          need_register = true;
          CountReconnect();
          continue;
        }
      }
      if (status.ok()) break;  // next == n
      if (StopRequested()) break;

      const grpc::StatusCode code = status.error_code();
      // A restarted server has forgotten the job: streaming before re-registering
      // fails with NOT_FOUND/FAILED_PRECONDITION. Re-register once before giving up.
      const bool unknown_job =
          (code == grpc::StatusCode::NOT_FOUND || code == grpc::StatusCode::FAILED_PRECONDITION) &&
          !registered_here && !need_register;
      if (IsPermanent(status) && !unknown_job) {
        DeliverError(FromGrpcStatus(
            status, absl::StrFormat("job '%s' rank %d epoch %d batch %d", options_.job.job_id(),
                                    options_.job.rank(), epoch, next)));
        break;
      }
      const absl::Time now = absl::Now();
      if (stalled) stall.Cut(now);
      retry.Failed(now, absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(code)),
                                     ": ", status.error_message()));
      if (absl::Status give_up = GiveUpError(now, epoch, next, n, retry, stall); !give_up.ok()) {
        DeliverError(give_up);
        break;
      }
      // Another replica is tried at once; a round of them that failed waits its
      // backoff (as a single server's reconnect does every time).
      const bool moved = !unknown_job && MoveToNextReplica();
      if (!unknown_job && !moved) {
        const absl::Time give_up = std::min(retry.GiveUp(), stall.GiveUp());
        if (!SleepUnlessStopped(retry.TakeBackoff(now, give_up))) break;
      }
      need_register = true;
      CountReconnect();
    }
    absl::MutexLock lock(&mu_);
    producer_done_ = true;
  }

  const Replica& replica() const { return *replicas_[current_.load()]; }

  // Makes the next replica (in this rank's order) current and returns true, so the
  // caller tries it at once. False when there is only one replica (nothing moves), or
  // when the move closes a round: back where the tries began, every replica having
  // failed since a batch last arrived; the caller then waits its backoff first.
  bool MoveToNextReplica() {
    if (replicas_.size() < 2) return false;
    const size_t next = (current_.load() + 1) % replicas_.size();
    current_.store(next);
    return next != round_start_;
  }

  void CountReconnect() {
    absl::MutexLock lock(&mu_);
    ++reconnects_;
  }

  // Cancels the RPC in flight and joins the prefetch thread.
  void StopPrefetch() {
    RequestStop();
    if (thread_.joinable()) thread_.join();
    if (watchdog_.joinable()) watchdog_.join();
    absl::MutexLock lock(&mu_);
    active_context_ = nullptr;
    sticky_error_ = absl::OkStatus();
    read_deadline_ = absl::InfiniteFuture();
    stalled_ = false;
  }

  const RankStreamOptions options_;
  std::vector<std::unique_ptr<Replica>> replicas_;  // in this rank's order; never empty
  // The replica in use, and the one where the current round of tries began. Only the
  // thread registering or prefetching (one at a time) moves them.
  std::atomic<size_t> current_{0};
  size_t round_start_ = 0;
  // Set once by Connect before any other thread exists; read-only afterwards.
  v1::RegisterResponse registration_;
  std::string registered_at_;  // the replica that answered it
  // The prefetch thread of the current epoch and its watchdog (joined by StopPrefetch).
  std::thread thread_;
  std::thread watchdog_;
  // Held by StartEpoch and Close, which start and join those threads.
  absl::Mutex control_mu_;

  mutable absl::Mutex mu_;
  // Received batches not yet handed out, then at most one error; <= prefetch batches.
  std::deque<QueueItem> queue_ ABSL_GUARDED_BY(mu_);
  // Tells the prefetch thread to stop; set by StopPrefetch.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // The prefetch thread has exited (all batches received, error queued, or stopped).
  bool producer_done_ ABSL_GUARDED_BY(mu_) = true;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // Close() was called: every call returns ClosedError from then on.
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // Batches of epoch_ (n, or fewer when dealt from a sample offset).
  int64_t epoch_batches_ ABSL_GUARDED_BY(mu_) = 0;
  // Batches of epoch_ handed out by Next (counting the skipped start_batch ones).
  int64_t handed_out_ ABSL_GUARDED_BY(mu_) = 0;
  // The error Next returned; returned again until the next StartEpoch.
  absl::Status sticky_error_ ABSL_GUARDED_BY(mu_);
  // The RPC in flight on the prefetch thread, so StopPrefetch can cancel it.
  grpc::ClientContext* active_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t reconnects_ ABSL_GUARDED_BY(mu_) = 0;
  // When the message the prefetch thread waits for is overdue (InfiniteFuture: it is
  // not waiting on the server); the watchdog cancels the stream then and sets stalled_.
  absl::Time read_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
};

bool IsJobChanged(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition &&
         status.GetPayload(kJobChangedPayload).has_value();
}

bool IsClosed(const absl::Status& status) {
  return status.code() == absl::StatusCode::kCancelled &&
         status.GetPayload(kClosedPayload).has_value();
}

absl::StatusOr<std::unique_ptr<RankStream>> RankStream::Connect(RankStreamOptions options,
                                                                const InterruptCheck& interrupted) {
  absl::StatusOr<std::vector<std::string>> targets = ExpandServerList(options.server);
  if (!targets.ok()) return targets.status();
  const std::vector<std::string> order = OrderForRank(*targets, options.job.rank());
  auto impl = std::make_unique<Impl>(std::move(options), order);
  absl::Status status;
  if (interrupted == nullptr) {
    status = impl->InitialRegister();
  } else {
    // The registration (an RPC that may wait up to the reconnect deadline) runs on a
    // thread of its own, so that this one can ask `interrupted` meanwhile; a stop
    // cancels its RPC or backoff at once.
    absl::Notification done;
    std::thread registering([&] {
      status = impl->InitialRegister();
      done.Notify();
    });
    bool stopped = false;
    while (!done.WaitForNotificationWithTimeout(kInterruptPollInterval)) {
      if (!stopped && interrupted()) {
        stopped = true;
        impl->RequestStop();
      }
    }
    registering.join();
    if (stopped) return InterruptedError(impl->options().job);
  }
  if (!status.ok()) return status;
  return std::unique_ptr<RankStream>(new RankStream(std::move(impl)));
}

RankStream::RankStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RankStream::~RankStream() = default;

const RankStreamOptions& RankStream::options() const { return impl_->options(); }
const shardcast::v1::RegisterResponse& RankStream::registration() const {
  return impl_->registration();
}
int64_t RankStream::batches_per_epoch() const { return impl_->batches_per_epoch(); }

absl::Status RankStream::StartEpoch(int64_t epoch, int64_t start_batch, int64_t sample_offset) {
  return impl_->StartEpoch(epoch, start_batch, sample_offset);
}

int64_t RankStream::batches_in_epoch() const { return impl_->batches_in_epoch(); }

absl::StatusOr<std::optional<ReceivedBatch>> RankStream::Next(const InterruptCheck& interrupted) {
  return impl_->Next(interrupted);
}

void RankStream::Close() { impl_->Close(); }

bool RankStream::NextIsReady() const { return impl_->NextIsReady(); }

int64_t RankStream::reconnects() const { return impl_->reconnects(); }

}  // namespace shardcast::client

// RankStream: the prefetch loop with reconnect/resume (see rank_stream.h). Its parts
// live beside it: the first registration (registration.h), the queue to Next()
// (bounded_queue.h), the checks of what a server says (stream_checks.h), the stream
// timeout's watchdog (read_watchdog.h), the replicas (replica_set.h), which failures
// are retried (retry_rules.h) and the reconnect clocks (stream_clocks.h).
#include "client/protocol/rank_stream.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/protocol/bounded_queue.h"
#include "client/protocol/channel.h"
#include "client/protocol/read_watchdog.h"
#include "client/protocol/registration.h"
#include "client/protocol/replica_set.h"
#include "client/protocol/retry_rules.h"
#include "client/protocol/server_list.h"
#include "client/protocol/stream_clocks.h"
#include "common/plan/epoch_plan.h"
#include "common/plan/job_config.h"
#include "common/util/clock.h"
#include "proto/job_config_proto.h"
#include "shardcast/v1/shardcast.grpc.pb.h"

namespace shardcast::client {
namespace {

namespace v1 = ::shardcast::v1;

// What one StreamBatches call came to.
struct Attempt {
  grpc::Status status;   // OK once the epoch's last batch arrived
  int64_t received = 0;  // batches this call delivered
  bool stalled = false;  // the watchdog cut it
  bool moving = false;   // the server drains: the rank moves to another replica
  bool ended = false;    // the loop must end: an error was delivered, or stop
};

}  // namespace

class RankStream::Impl {
 public:
  // `targets`: the replicas in the order this rank tries them (server_list.h).
  Impl(RankStreamOptions options, const std::vector<std::string>& targets)
      : options_(std::move(options)),
        replicas_(options_, targets),
        queue_(static_cast<size_t>(std::max(options_.prefetch, 1))),
        watchdog_([this] { CancelActiveCall(); }) {}

  ~Impl() { StopPrefetch(); }

  // Register with retries on the caller's thread (Connect); a stop (Connect's
  // interrupt) ends its RPC or its wait at once.
  absl::Status InitialRegister() {
    if (absl::Status valid = CheckOptions(); !valid.ok()) return valid;
    absl::StatusOr<v1::RegisterResponse> response = RegisterWithRetry(
        options_, options_.job, &replicas_,
        [this](absl::Time give_up, v1::RegisterResponse* out) {
          return RegisterOnce(give_up, out);
        },
        stop_token_);
    if (!response.ok()) return response.status();
    return Registered(*std::move(response));
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
    absl::StatusOr<int64_t> n = EpochBatches(epoch, sample_offset);
    if (!n.ok()) return n.status();
    if (epoch < 0 || start_batch < 0 || start_batch > *n) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "StartEpoch(epoch=%d, start_batch=%d): need epoch >= 0 and 0 <= start_batch <= %d "
          "(batches of this epoch of job '%s')",
          epoch, start_batch, *n, options_.job.job_id()));
    }
    // Close() on another thread stops the threads this starts: one of the two at a time.
    absl::MutexLock control(&control_mu_);
    if (queue_.closed()) return Closed();
    StopPrefetch();
    queue_.Restart(/*finished=*/start_batch == *n);
    {
      absl::MutexLock lock(&mu_);
      stop_ = false;
      stop_token_.Reset();
      started_ = true;
      epoch_ = epoch;
      epoch_batches_ = *n;
      handed_out_ = start_batch;
    }
    if (start_batch < *n) {
      if (stream_timeout() > absl::ZeroDuration()) watchdog_.Start();
      thread_ = std::thread([this, epoch, start_batch, n = *n, sample_offset] {
        PrefetchLoop(epoch, start_batch, n, sample_offset);
      });
    }
    return absl::OkStatus();
  }

  bool NextIsReady() const { return AnswerWithoutQueue() || queue_.Ready(); }

  void Close() {
    absl::MutexLock control(&control_mu_);
    {
      absl::MutexLock lock(&mu_);
      closed_ = true;
    }
    queue_.Close();  // wakes a Next() waiting on another thread
    StopPrefetch();
  }

  // Tells the thread registering or prefetching to stop, and cancels its RPC in flight.
  void RequestStop() {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    stop_token_.Cancel();  // first: the cancelled RPC's caller reads it
    if (active_context_ != nullptr) active_context_->TryCancel();
    queue_.Stop();
  }

  absl::StatusOr<std::optional<ReceivedBatch>> Next(const InterruptCheck& interrupted) {
    if (interrupted != nullptr) {
      // The wait in slices, `interrupted` asked between them without the lock: it may
      // wait for a lock of its own (Python's GIL) held by a thread that is asking this
      // stream something (reconnects()). Ready stays ready for the one consumer.
      while (!AnswerWithoutQueue() && !queue_.WaitReady(kInterruptPollInterval)) {
        if (interrupted()) return Interrupted();
      }
    }
    StreamPosition due = Position(0, 0);
    {
      absl::MutexLock lock(&mu_);
      if (closed_) return Closed();
      if (!started_) return absl::FailedPreconditionError("Next() before StartEpoch()");
      if (handed_out_ >= epoch_batches_) return std::optional<ReceivedBatch>();
      if (!sticky_error_.ok()) return sticky_error_;
      due = Position(epoch_, handed_out_);
    }
    std::optional<absl::StatusOr<ReceivedBatch>> item = queue_.Pop();
    if (!item.has_value()) {
      if (queue_.closed()) return Closed();  // by Close() on another thread
      // The producer stopped without delivering the batch: only possible if it
      // was told to stop, which only StartEpoch/destructor do.
      absl::MutexLock lock(&mu_);
      return absl::InternalError(
          absl::StrFormat("epoch %d of job '%s': prefetch ended at batch %d of %d without an error",
                          epoch_, options_.job.job_id(), handed_out_, epoch_batches_));
    }
    {
      absl::MutexLock lock(&mu_);
      if (!item->ok()) {
        sticky_error_ = item->status();
        return sticky_error_;
      }
      ++handed_out_;
    }
    const WireBatch& msg = ***item;
    if (msg.epoch() != due.epoch || msg.index() != due.batch) {
      // The prefetch thread already checks this; a mismatch here is a bug in it.
      return absl::InternalError(absl::StrFormat(
          "job '%s' rank %d: expected batch (epoch %d, index %d), got (epoch %d, index %d)",
          due.job_id, due.rank, due.epoch, due.batch, msg.epoch(), msg.index()));
    }
    return std::optional<ReceivedBatch>(*std::move(*item));
  }

  absl::Status Interrupted() const {
    return InterruptedError(options_.job.job_id(), options_.job.rank());
  }

 private:
  absl::Status Closed() const { return ClosedError(options_.job.job_id(), options_.job.rank()); }

  StreamPosition Position(int64_t epoch, int64_t batch) const {
    return StreamPosition{options_.job.job_id(), options_.job.rank(), epoch, batch};
  }

  absl::Status CheckOptions() const {
    if (options_.prefetch < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("prefetch must be >= 1, got ", options_.prefetch));
    }
    if (!(options_.stream_timeout_seconds >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat("stream timeout must be >= 0 seconds, got ",
                                                     options_.stream_timeout_seconds));
    }
    return absl::OkStatus();
  }

  // Whether Next() answers without the queue: closed, not started, the epoch handed out
  // or an error returned before.
  bool AnswerWithoutQueue() const {
    absl::MutexLock lock(&mu_);
    return closed_ || !started_ || handed_out_ >= epoch_batches_ || !sticky_error_.ok();
  }

  // Batches of `epoch`: batches_per_epoch(), or those left from an elastic resume's
  // `sample_offset`.
  absl::StatusOr<int64_t> EpochBatches(int64_t epoch, int64_t sample_offset) const {
    if (sample_offset == 0) return batches_per_epoch();
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
    return *left;
  }

  // Keeps the first registration (set once, before any other thread exists) and checks
  // that a batch can be received with it.
  absl::Status Registered(v1::RegisterResponse response) {
    registration_ = std::move(response);
    registered_at_ = replica().target;
    return CheckRegistration(
        registration_,
        absl::StrFormat("server %s, registering rank %d of job '%s',", replica().target,
                        options_.job.rank(), options_.job.job_id()));
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

  // The watchdog's `cancel` (called with the watchdog's lock held: mu_ comes after it).
  void CancelActiveCall() {
    absl::MutexLock lock(&mu_);
    if (active_context_ != nullptr) active_context_->TryCancel();
  }

  bool StopRequested() {
    absl::MutexLock lock(&mu_);
    return stop_;
  }

  void DeliverError(absl::Status error) { queue_.Push(std::move(error)); }

  absl::Duration stream_timeout() const { return absl::Seconds(options_.stream_timeout_seconds); }

  v1::StreamBatchesRequest StreamRequest(int64_t epoch, int64_t start_batch,
                                         int64_t sample_offset) const {
    v1::StreamBatchesRequest request;
    request.set_job_id(options_.job.job_id());
    request.set_rank(options_.job.rank());
    request.set_epoch(epoch);
    request.set_start_batch(start_batch);
    request.set_sample_offset(sample_offset);
    request.set_job_fingerprint(registration_.job_fingerprint());
    return request;
  }

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
    watchdog_.Arm(read_deadline());  // the first batch counts from the request
    // The generated stub would parse every batch into a v1::Batch, copying its
    // pixels; a reader of WireBatch keeps them in the received slices.
    std::unique_ptr<grpc::ClientReader<WireBatch>> reader =
        replica().batch_stub.StreamBatches(&context, StreamRequest(epoch, *next, sample_offset));
    auto msg = std::make_shared<WireBatch>();
    absl::Status bad;
    while (reader->Read(msg.get())) {
      watchdog_.Arm(absl::InfiniteFuture());  // waiting for queue space is the consumer's time
      bad = CheckBatch(*msg, registration_, Position(epoch, *next), n);
      if (!bad.ok()) break;
      if (options_.join_images) msg->JoinImages();
      if (!queue_.WaitForSpace()) break;
      const bool draining = msg->header().server_draining();
      queue_.Push(ReceivedBatch(std::move(msg)));
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
      watchdog_.Arm(read_deadline());
    }
    // A message that did not parse ends Read() as the stream's end would: it is the
    // server's error, not the network's, so the stream fails here, not retried (and
    // the call is cancelled, or Finish() waits for the rest of it).
    // NOLINTNEXTLINE(bugprone-use-after-move): a moved-from shared_ptr is null, checked here
    if (bad.ok() && msg != nullptr && !msg->parse_error().ok()) {
      bad = absl::DataLossError(absl::StrFormat("job '%s' rank %d epoch %d batch %d: %s",
                                                options_.job.job_id(), options_.job.rank(), epoch,
                                                *next, msg->parse_error().message()));
    }
    watchdog_.Arm(absl::InfiniteFuture());
    if (!bad.ok() || StopRequested() || attempt.moving) context.TryCancel();
    attempt.status = reader->Finish();
    SetActiveContext(nullptr);
    attempt.stalled = watchdog_.TakeStalled();
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

  // Re-registers after a reconnect (at `next` of `epoch`): the refusal or job change to
  // end the loop with (delivered), else OK with *status Register's outcome.
  bool Reregister(int64_t epoch, int64_t next, absl::Time give_up, HandshakeRefusalWatch* refusal,
                  grpc::Status* status) {
    v1::RegisterResponse response;
    *status = RegisterOnce(give_up, &response);
    const std::string what =
        absl::StrFormat("job '%s' rank %d epoch %d: re-register at %s", options_.job.job_id(),
                        options_.job.rank(), epoch, replica().target);
    if (absl::Status refused = refusal->Observe(*status, absl::Now(), what); !refused.ok()) {
      DeliverError(refused);
      return false;
    }
    if (!status->ok()) return true;
    const absl::Status same =
        SameJob(registration_, response, ResumedServer(registered_at_, replica().target),
                Position(epoch, next));
    if (!same.ok()) DeliverError(same);
    return same.ok();
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
        const absl::Time give_up = std::min(retry.GiveUp(), stall.GiveUp());
        if (!Reregister(epoch, next, give_up, &refusal, &status)) break;
        registered_here = registered_here || status.ok();
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
          replicas_.StartRound();
        }
        if (attempt.moving) {
          // A planned move, not a failure: register with the next replica and resume
          // there at batch `next`.
          replicas_.MoveToNext();
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
      const bool moved = !unknown_job && replicas_.MoveToNext();
      if (!unknown_job && !moved) {
        const absl::Time give_up = std::min(retry.GiveUp(), stall.GiveUp());
        if (!util::Clock::Real()->WaitFor(retry.TakeBackoff(now, give_up), &stop_token_)) break;
      }
      need_register = true;
      CountReconnect();
    }
    watchdog_.Quit();
    queue_.FinishProducing();
  }

  const Replica& replica() const { return replicas_.current(); }

  void CountReconnect() {
    absl::MutexLock lock(&mu_);
    ++reconnects_;
  }

  // Cancels the RPC in flight and joins the prefetch thread and its watchdog.
  void StopPrefetch() {
    RequestStop();
    if (thread_.joinable()) thread_.join();
    watchdog_.Stop();
    absl::MutexLock lock(&mu_);
    active_context_ = nullptr;
    sticky_error_ = absl::OkStatus();
  }

  const RankStreamOptions options_;
  ReplicaSet replicas_;  // in this rank's order; moved by the registering or prefetching thread
  // Set once by Connect before any other thread exists; read-only afterwards.
  v1::RegisterResponse registration_;
  std::string registered_at_;  // the replica that answered it
  // Received batches not yet handed out, then at most one error; <= prefetch batches.
  BoundedQueue<ReceivedBatch> queue_;
  // Cancels the stream in flight once the batch it waits for is overdue (stream timeout).
  ReadWatchdog watchdog_;
  // The prefetch thread of the current epoch (joined by StopPrefetch).
  std::thread thread_;
  // Held by StartEpoch and Close, which start and join the threads.
  absl::Mutex control_mu_;

  mutable absl::Mutex mu_;
  // Tells the thread registering or prefetching to stop; set by RequestStop, which
  // also cancels stop_token_ (what ends its waits between attempts).
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  util::CancelToken stop_token_;
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
  // The RPC in flight on the registering or prefetch thread, so a stop can cancel it.
  grpc::ClientContext* active_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t reconnects_ ABSL_GUARDED_BY(mu_) = 0;
};

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
    if (stopped) return impl->Interrupted();
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

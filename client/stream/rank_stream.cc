// RankStream: the prefetch loop with reconnect/resume (see rank_stream.h). Its parts
// live beside it: the first registration (registration.h), the queue to Next()
// (bounded_queue.h), the checks of what a server says (stream_checks.h) and of what the
// caller asks (request_checks.h), one StreamBatches call (stream_attempt.h), the stream
// timeout's watchdog (read_watchdog.h), the replicas (replica_set.h), which failures
// are retried (retry_rules.h), how long reconnecting may go on (reconnect_budget.h),
// the RPC a stop cancels (inflight_call.h) and the interruptible wait of Connect
// (interruptible.h).
#include "client/stream/rank_stream.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/base/bounded_queue.h"
#include "client/base/error_kinds.h"
#include "client/base/interruptible.h"
#include "client/base/read_watchdog.h"
#include "client/checks/request_checks.h"
#include "client/decode/encoded_batch_decoder.h"
#include "client/reconnect/reconnect_budget.h"
#include "client/reconnect/registration.h"
#include "client/reconnect/retry_rules.h"
#include "client/reconnect/server_list.h"
#include "client/rpc/channel.h"
#include "client/rpc/inflight_call.h"
#include "client/rpc/replica_set.h"
#include "client/stream/stream_attempt.h"
#include "common/util/clock.h"
#include "proto/job_config_proto.h"
#include "shardcast/v1/shardcast.grpc.pb.h"

namespace shardcast::client {

namespace v1 = ::shardcast::v1;

class RankStream::Impl {
 public:
  // `targets`: the replicas in the order this rank tries them (server_list.h).
  Impl(RankStreamOptions options, const std::vector<std::string>& targets)
      : options_(std::move(options)),
        replicas_(options_, targets),
        queue_(static_cast<size_t>(std::max(options_.prefetch, 1))),
        watchdog_([this] { call_.CancelCurrent(); }, options_.clock),
        attempts_(options_, registration_, decoder_, &queue_, &watchdog_, &call_) {}

  ~Impl() { StopPrefetch(); }

  // Register with retries on the caller's thread (Connect); a stop (Connect's
  // interrupt) ends its RPC or its wait at once.
  absl::Status InitialRegister() {
    if (absl::Status valid = CheckStreamSettings(options_); !valid.ok()) return valid;
    absl::StatusOr<v1::RegisterResponse> response = RegisterWithRetry(
        options_, options_.job, replicas_.order(),
        [this](absl::Time give_up, v1::RegisterResponse* out) {
          return RegisterOnce(give_up, out);
        },
        call_.token());
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
  int64_t client_substituted() const { return decoder_ == nullptr ? 0 : decoder_->substituted(); }

  int64_t batches_in_epoch() const {
    absl::MutexLock lock(&mu_);
    return epoch_batches_;
  }

  absl::Status StartEpoch(int64_t epoch, int64_t start_batch, int64_t sample_offset,
                          const v1::MixtureResume& mix_resume) {
    absl::StatusOr<int64_t> n =
        EpochBatches(registration_, options_.job, epoch, start_batch, sample_offset);
    if (!n.ok()) return n.status();
    // Close() on another thread stops the threads this starts: one of the two at a time.
    absl::MutexLock control(&control_mu_);
    if (queue_.closed()) return Closed();
    StopPrefetch();
    queue_.Restart(/*finished=*/start_batch == *n);
    call_.Reset();
    {
      absl::MutexLock lock(&mu_);
      started_ = true;
      epoch_ = epoch;
      epoch_batches_ = *n;
      handed_out_ = start_batch;
    }
    if (start_batch < *n) {
      if (options_.stream_timeout_seconds > 0) watchdog_.Start();
      thread_ = std::thread([this, epoch, start_batch, n = *n, sample_offset, mix_resume] {
        PrefetchLoop(epoch, start_batch, n, sample_offset, mix_resume);
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
    call_.Stop();
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

  // Whether Next() answers without the queue: closed, not started, the epoch handed out
  // or an error returned before.
  bool AnswerWithoutQueue() const {
    absl::MutexLock lock(&mu_);
    return closed_ || !started_ || handed_out_ >= epoch_batches_ || !sticky_error_.ok();
  }

  // Keeps the first registration (set once, before any other thread exists) and checks
  // that a batch can be received with it and that it is the job asked for.
  absl::Status Registered(v1::RegisterResponse response) {
    registration_ = std::move(response);
    registered_at_ = replica().target;
    const std::string where =
        absl::StrFormat("server %s, registering rank %d of job '%s',", replica().target,
                        options_.job.rank(), options_.job.job_id());
    if (absl::Status s = CheckRegistration(registration_, where); !s.ok()) return s;
    if (absl::Status s = CheckRegisteredAsAsked(options_.job, registration_, where); !s.ok()) {
      return s;
    }
    return StartDecoder();
  }

  // decode kCpu of a job with images: the threads that decode its batches as they
  // arrive, following the registration's transform (mode, DCT scaling).
  absl::Status StartDecoder() {
    if (options_.decode != ClientDecode::kCpu || !RegisteredWithImages(registration_)) {
      return absl::OkStatus();
    }
    absl::StatusOr<JobConfig> config = ResponseConfig(registration_);
    if (!config.ok()) return config.status();
    decoder_ = std::make_unique<EncodedBatchDecoder>(
        EncodedBatchDecoderOptions{config->transform.mode, config->transform.dct_scaling,
                                   options_.decode_threads, options_.max_decode_memory_bytes});
    return absl::OkStatus();
  }

  // One Register call, failing fast when the channel cannot connect: the callers retry
  // with their own backoff until `give_up`, and a failed connect returns gRPC's reason
  // at once, so a failed TLS handshake is told apart from an unreachable server
  // (wait_for_ready would hide it behind DEADLINE_EXCEEDED at the deadline).
  // Cancellable by StopPrefetch while it is in flight.
  absl::Status RegisterOnce(absl::Time give_up, v1::RegisterResponse* response) {
    grpc::ClientContext context;
    context.set_wait_for_ready(false);
    context.set_deadline(absl::ToChronoTime(give_up));
    if (!call_.Begin(&context)) return absl::CancelledError("stopped");
    const grpc::Status status = replica().stub->Register(&context, options_.job, response);
    call_.End();
    return FromGrpc(status);
  }

  void DeliverError(absl::Status error) { queue_.Push(std::move(error)); }

  // Re-registers after a reconnect (at `next` of `epoch`): the refusal or job change to
  // end the loop with (delivered), else OK with *status Register's outcome.
  bool Reregister(int64_t epoch, int64_t next, absl::Time give_up, HandshakeRefusalWatch* refusal,
                  absl::Status* status) {
    v1::RegisterResponse response;
    *status = RegisterOnce(give_up, &response);
    const std::string what =
        absl::StrFormat("job '%s' rank %d epoch %d: re-register at %s", options_.job.job_id(),
                        options_.job.rank(), epoch, replica().target);
    if (absl::Status refused = refusal->Observe(*status, clock().Now(), what); !refused.ok()) {
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
  void PrefetchLoop(int64_t epoch, int64_t start_batch, int64_t n, int64_t sample_offset,
                    const v1::MixtureResume& mix_resume) {
    int64_t next = start_batch;  // first batch not yet received
    ReconnectBudget budget(options_);
    HandshakeRefusalWatch refusal(absl::Seconds(options_.handshake_refusal_seconds));
    bool need_register = false;    // the server may have forgotten the job
    bool registered_here = false;  // a Register succeeded since the last batch

    while (next < n && !call_.stopped()) {
      absl::Status status;
      if (need_register) {
        if (!Reregister(epoch, next, budget.GiveUp(), &refusal, &status)) break;
        registered_here = registered_here || status.ok();
      }
      bool stalled = false;
      if (status.ok()) {
        const AttemptOutcome attempt = attempts_.Run(replica(), replicas_.size() > 1, epoch, n,
                                                     sample_offset, mix_resume, &next, &budget);
        if (attempt.ended) break;
        status = attempt.status;
        stalled = attempt.stalled;
        if (attempt.received > 0) {
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
      if (call_.stopped()) break;

      const absl::StatusCode code = status.code();
      // A restarted server has forgotten the job: streaming before re-registering
      // fails with NOT_FOUND/FAILED_PRECONDITION. Re-register once before giving up.
      const bool unknown_job =
          (code == absl::StatusCode::kNotFound || code == absl::StatusCode::kFailedPrecondition) &&
          !registered_here && !need_register;
      if (IsPermanent(status) && !unknown_job) {
        DeliverError(WithContext(
            status, absl::StrFormat("job '%s' rank %d epoch %d batch %d", options_.job.job_id(),
                                    options_.job.rank(), epoch, next)));
        break;
      }
      const absl::Time now = clock().Now();
      if (absl::Status give_up = budget.Failed(now, status, stalled, Position(epoch, next), n);
          !give_up.ok()) {
        DeliverError(give_up);
        break;
      }
      // Another replica is tried at once; a round of them that failed waits its
      // backoff (as a single server's reconnect does every time).
      const bool moved = !unknown_job && replicas_.MoveToNext();
      if (!unknown_job && !moved) {
        if (!clock().WaitFor(budget.TakeBackoff(now), &call_.token())) break;
      }
      need_register = true;
      CountReconnect();
    }
    watchdog_.Quit();
    queue_.FinishProducing();
  }

  const Replica& replica() const { return replicas_.current(); }
  const util::Clock& clock() const { return *options_.clock; }

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
    sticky_error_ = absl::OkStatus();
  }

  const RankStreamOptions options_;
  ReplicaSet replicas_;  // in this rank's order; moved by the registering or prefetching thread
  // Set once by Connect before any other thread exists; read-only afterwards.
  v1::RegisterResponse registration_;
  std::string registered_at_;  // the replica that answered it
  // decode kCpu: decodes each encoded batch on the prefetch thread's behalf (set with
  // the registration).
  std::unique_ptr<EncodedBatchDecoder> decoder_;
  // Received batches not yet handed out, then at most one error; <= prefetch batches.
  BoundedQueue<ReceivedBatch> queue_;
  // The RPC of the thread registering or prefetching, and the stop that cancels it.
  InflightCall call_;
  // Cancels the stream in flight once the batch it waits for is overdue (stream timeout).
  ReadWatchdog watchdog_;
  StreamAttempts attempts_;  // the prefetch thread's StreamBatches calls
  // The prefetch thread of the current epoch (joined by StopPrefetch).
  std::thread thread_;
  // Held by StartEpoch and Close, which start and join the threads.
  absl::Mutex control_mu_;

  mutable absl::Mutex mu_;
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
  int64_t reconnects_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::StatusOr<std::unique_ptr<RankStream>> RankStream::Connect(RankStreamOptions options,
                                                                const InterruptCheck& interrupted) {
  absl::StatusOr<std::vector<std::string>> targets = ExpandServerList(options.server);
  if (!targets.ok()) return targets.status();
  const std::vector<std::string> order = OrderForRank(*targets, options.job.rank());
  // The decode choice names the delivery (a job without images has none).
  if (!options.job.has_image() || options.job.image()) {
    options.job.set_delivery(options.decode == ClientDecode::kServer ? v1::IMAGE_DELIVERY_SERVER
                                                                     : v1::IMAGE_DELIVERY_ENCODED);
  }
  auto impl = std::make_unique<Impl>(std::move(options), order);
  // The registration (an RPC that may wait up to the reconnect deadline) runs on a
  // thread of its own when `interrupted` is to be asked meanwhile; a stop cancels its RPC
  // or backoff at once.
  const absl::Status status = RunInterruptibly([&] { return impl->InitialRegister(); }, interrupted,
                                               [&] { impl->RequestStop(); }, impl->Interrupted());
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

absl::Status RankStream::StartEpoch(int64_t epoch, int64_t start_batch, int64_t sample_offset,
                                    const v1::MixtureResume& mix_resume) {
  return impl_->StartEpoch(epoch, start_batch, sample_offset, mix_resume);
}

int64_t RankStream::batches_in_epoch() const { return impl_->batches_in_epoch(); }

absl::StatusOr<std::optional<ReceivedBatch>> RankStream::Next(const InterruptCheck& interrupted) {
  return impl_->Next(interrupted);
}

void RankStream::Close() { impl_->Close(); }

bool RankStream::NextIsReady() const { return impl_->NextIsReady(); }

int64_t RankStream::reconnects() const { return impl_->reconnects(); }

int64_t RankStream::client_substituted() const { return impl_->client_substituted(); }

}  // namespace shardcast::client

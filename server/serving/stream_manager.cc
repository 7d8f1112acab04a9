// Open streams, their admission and their upkeep (see stream_manager.h).
#include "server/serving/stream_manager.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/log.h"
#include "server/base/memory_limit.h"
#include "server/serving/resend_window.h"

namespace shardcast::server {

namespace v1 = ::shardcast::v1;

// ---------------------------------------------------------------------------- StreamSession

StreamSession::StreamSession(SessionContext context, StreamPlan plan,
                             std::shared_ptr<BatchWindow> window, int64_t stream_id,
                             std::shared_ptr<StreamControl> control)
    : context_(context),
      plan_(std::move(plan)),
      window_(std::move(window)),
      stream_id_(stream_id),
      control_(std::move(control)) {}

StreamSession::~StreamSession() { Close("closed"); }

absl::StatusOr<BatchWindow::TakeResult> StreamSession::Take(std::shared_ptr<AssembledBatch>* batch,
                                                            std::function<void()> on_ready) {
  absl::StatusOr<BatchWindow::TakeResult> taken = window_->Take(batch, std::move(on_ready));
  if (!taken.ok()) return taken;
  if (*taken == BatchWindow::TakeResult::kPending) {
    if (pending_since_ == absl::InfinitePast()) pending_since_ = context_.clock->Now();
  } else if (pending_since_ != absl::InfinitePast()) {
    context_.stats->wait_for_batch_nanos.fetch_add(
        absl::ToInt64Nanoseconds(context_.clock->Now() - pending_since_),
        std::memory_order_relaxed);
    pending_since_ = absl::InfinitePast();
  }
  return taken;
}

bool StreamSession::server_draining() const { return context_.draining->load(); }

void StreamSession::WriteStarted() { control_->WriteStarted(context_.clock->Now()); }

void StreamSession::Sent(const AssembledBatch& batch, int64_t message_bytes) {
  ++sent_;
  const absl::Time now = context_.clock->Now();
  const absl::Duration write_wait = control_->WriteWaiting(now).value_or(absl::ZeroDuration());
  control_->WriteDone();
  const int64_t images = batch.header().samples_size();
  ServerStats& stats = *context_.stats;
  stats.images_served.fetch_add(images, std::memory_order_relaxed);
  stats.bytes_served.fetch_add(message_bytes, std::memory_order_relaxed);
  stats.wait_for_client_nanos.fetch_add(absl::ToInt64Nanoseconds(write_wait),
                                        std::memory_order_relaxed);
  stats.rate.Add(images, message_bytes, now);
  if (context_.streams->Sent(plan_.job.get(), plan_.rank, stream_id_, batch.header().index(),
                             now)) {
    LogInfo("stall", absl::StrCat("job '", LogSafe(plan_.job->id()), "' rank ", plan_.rank,
                                  " moves again: took epoch ", batch.header().epoch(), " batch ",
                                  batch.header().index()));
  }
}

void StreamSession::Close(const std::string& how) {
  if (closed_) return;
  closed_ = true;
  window_->Cancel();
  context_.streams->Close(plan_.job.get(), plan_.rank, stream_id_);
  LogInfo("stream", absl::StrCat("closed ", plan_.description, " after ", sent_, "/", plan_.count,
                                 " batches: ", how));
}

// ---------------------------------------------------------------------------- StreamManager

// A stream waiting in the admission queue.
class StreamManager::Pending {
 public:
  Pending(StreamPlan plan, BatchAssembler* assembler, OpenDone done, int64_t batch_bytes,
          absl::Time deadline)
      : plan_(std::move(plan)),
        assembler_(assembler),
        batch_bytes_(batch_bytes),
        deadline_(deadline),
        done_(std::move(done)) {}

  int64_t batch_bytes() const { return batch_bytes_; }
  absl::Time deadline() const { return deadline_; }  // real time

 private:
  friend class StreamManager;
  StreamPlan plan_;
  BatchAssembler* const assembler_;
  const int64_t batch_bytes_;
  const absl::Time deadline_;
  // Held while `done_` runs, so that Withdraw waits for it.
  absl::Mutex mu_;
  OpenDone done_ ABSL_GUARDED_BY(mu_);  // empty once run or withdrawn
};

namespace {

int64_t BatchMemoryLimit(const ServerOptions& options) {
  if (options.max_batch_memory_bytes > 0) return options.max_batch_memory_bytes;
  return DefaultBatchMemoryBytes(AvailableMemory());
}

absl::Status Replaced(const StreamPlan& plan) {
  return absl::AbortedError(absl::StrCat("replaced by a newer stream for the same rank (job '",
                                         LogSafe(plan.job->id()), "' rank ", plan.rank, ")"));
}

}  // namespace

StreamManager::StreamManager(const ServerOptions& options, ServerStats* stats, JobRegistry* jobs,
                             const Clock* clock, std::function<void()> on_monitor_tick)
    : options_(options),
      stats_(stats),
      jobs_(jobs),
      clock_(clock),
      on_monitor_tick_(std::move(on_monitor_tick)),
      budget_(BatchMemoryOptions(BatchMemoryLimit(options), [this] { MemoryReleased(); })) {
  admitter_ = std::thread([this] { AdmissionLoop(); });
  if (options_.stream_idle_timeout > absl::ZeroDuration() ||
      options_.stall_warn > absl::ZeroDuration()) {
    monitor_ = std::thread([this] { MonitorLoop(); });
  }
}

StreamManager::~StreamManager() { Stop(); }

void StreamManager::Stop() {
  if (!stop_monitor_.HasBeenNotified()) stop_monitor_.Notify();
  if (monitor_.joinable()) monitor_.join();
  {
    absl::MutexLock lock(&admission_mu_);
    stopping_ = true;
    ++generation_;
    admission_changed_.Signal();
  }
  if (admitter_.joinable()) admitter_.join();
  std::deque<std::shared_ptr<Pending>> left;
  {
    absl::MutexLock lock(&admission_mu_);
    left.swap(waiting_);
  }
  for (const std::shared_ptr<Pending>& pending : left) {
    Complete(pending, absl::UnavailableError("the server is shutting down"));
  }
}

std::shared_ptr<StreamManager::Pending> StreamManager::Open(StreamPlan plan,
                                                            BatchAssembler* assembler,
                                                            OpenDone done) {
  // One open stream per (job, rank): a reconnect replaces the stream the rank left
  // behind, whose client is gone or no longer reading; ended first, so its memory can
  // go to the new one.
  if (StreamTable::Stream old = table_.NewestOf(plan.job.get(), plan.rank);
      old.control != nullptr) {
    LogInfo("stream",
            absl::StrCat("replacing ", old.control->description(), " by ", plan.description));
    EndStream(old, Replaced(plan));
  }
  // The stream's guaranteed batch: its pixels and its samples' requested members.
  const int64_t batch_bytes = plan.job->batch_memory_bytes();
  if (absl::Status fits = budget_.CheckFits(batch_bytes); !fits.ok()) {
    stats_->streams_refused_memory.fetch_add(1);
    done(std::move(fits));
    return nullptr;
  }
  absl::StatusOr<std::shared_ptr<StreamMemory>> memory = AdmitNow(batch_bytes);
  if (memory.ok()) {
    done(Start(std::move(plan), assembler, *std::move(memory)));
    return nullptr;
  }
  if (options_.admission_wait <= absl::ZeroDuration()) {
    stats_->streams_refused_memory.fetch_add(1);
    done(memory.status());
    return nullptr;
  }
  // Real time: the admission thread waits for memory on a condition variable until
  // this deadline, and a clock nobody moves must not keep a stream waiting forever.
  auto pending = std::make_shared<Pending>(std::move(plan), assembler, std::move(done), batch_bytes,
                                           absl::Now() + options_.admission_wait);
  absl::MutexLock lock(&admission_mu_);
  waiting_.push_back(pending);
  ++generation_;
  admission_changed_.Signal();
  return pending;
}

void StreamManager::Withdraw(const std::shared_ptr<Pending>& pending) {
  if (pending == nullptr) return;
  {
    absl::MutexLock lock(&pending->mu_);
    pending->done_ = nullptr;
  }
  absl::MutexLock lock(&admission_mu_);
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), pending), waiting_.end());
}

absl::StatusOr<std::shared_ptr<StreamMemory>> StreamManager::AdmitNow(int64_t batch_bytes) {
  absl::StatusOr<std::shared_ptr<StreamMemory>> memory =
      StreamMemory::Create(&budget_, batch_bytes);
  if (memory.ok()) return memory;
  // Idle streams are reclaimed first (their memory comes back once gRPC drops the
  // batch they were writing: the queue takes it), then every window gives back its
  // prefetch beyond the next batch.
  ReclaimIdleStreams();
  if (ShrinkWindows() > 0) memory = StreamMemory::Create(&budget_, batch_bytes);
  return memory;
}

std::unique_ptr<StreamSession> StreamManager::Start(StreamPlan plan, BatchAssembler* assembler,
                                                    std::shared_ptr<StreamMemory> memory) {
  BatchWindow::Options window_options;
  window_options.depth = std::max(1, options_.prefetch);
  window_options.count = plan.count;
  window_options.content = plan.job->content();
  window_options.memory = std::move(memory);
  window_options.read_ahead = options_.read_ahead_batches;
  std::shared_ptr<BatchWindow> window =
      options_.bench_only_resend_first_batch
          ? ResendFirstBatchWindow::Create(assembler, std::move(plan.batches), window_options)
          : BatchWindow::Create(assembler, std::move(plan.batches), window_options);
  auto control = std::make_shared<StreamControl>(plan.description);
  StreamTable::Opened opened =
      table_.Open(plan.job.get(), plan.rank, plan.epoch, plan.start_batch, window, control);
  // Another stream of this rank that opened meanwhile is replaced as well.
  if (opened.replaced.control != nullptr) EndStream(opened.replaced, Replaced(plan));
  LogInfo("stream", absl::StrCat("opened ", plan.description));
  window->Start();
  const SessionContext context{clock_, stats_, &table_, &draining_};
  return std::make_unique<StreamSession>(context, std::move(plan), std::move(window),
                                         opened.stream_id, std::move(control));
}

void StreamManager::Complete(const std::shared_ptr<Pending>& pending,
                             absl::StatusOr<std::shared_ptr<StreamMemory>> result) {
  absl::MutexLock lock(&pending->mu_);
  if (!pending->done_) return;  // withdrawn: the memory goes back with `result`
  OpenDone done = std::move(pending->done_);
  pending->done_ = nullptr;
  if (result.ok()) {
    done(Start(std::move(pending->plan_), pending->assembler_, *std::move(result)));
  } else {
    done(result.status());
  }
}

void StreamManager::MemoryReleased() {
  absl::MutexLock lock(&admission_mu_);
  if (waiting_.empty()) return;
  ++generation_;
  admission_changed_.Signal();
}

void StreamManager::AdmissionLoop() {
  absl::MutexLock lock(&admission_mu_);
  while (!stopping_) {
    const int64_t generation = generation_;
    const bool draining = draining_.load();
    const std::vector<std::shared_ptr<Pending>> round(waiting_.begin(), waiting_.end());
    // Out of the queue before its caller hears: a status asked right after the answer
    // no longer counts it as waiting.
    auto finish = [this](const std::shared_ptr<Pending>& pending,
                         absl::StatusOr<std::shared_ptr<StreamMemory>> result) {
      {
        absl::MutexLock lock(&admission_mu_);
        waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), pending), waiting_.end());
      }
      Complete(pending, std::move(result));
    };
    {
      // Outside the lock: admitting starts a stream, which may end another whose
      // memory coming back calls MemoryReleased.
      admission_mu_.Unlock();
      const absl::Time now = absl::Now();  // against the real-time deadlines (see Open)
      for (const std::shared_ptr<Pending>& pending : round) {
        if (draining) {
          finish(pending, absl::UnavailableError("draining: the server is shutting down"));
          continue;
        }
        // First come, first served; a smaller stream behind a large one that does not
        // fit yet may still go first.
        absl::StatusOr<std::shared_ptr<StreamMemory>> memory =
            StreamMemory::Create(&budget_, pending->batch_bytes());
        if (!memory.ok() && now < pending->deadline()) continue;
        if (!memory.ok()) {
          stats_->streams_refused_memory.fetch_add(1);
          memory = absl::ResourceExhaustedError(
              absl::StrCat(memory.status().message(), " (waited ",
                           absl::FormatDuration(options_.admission_wait), ", --admission-wait)"));
        }
        finish(pending, std::move(memory));
      }
      admission_mu_.Lock();
    }
    // Memory came back, a stream came or the drain began meanwhile: another round.
    if (generation_ != generation) continue;
    absl::Time next_deadline = absl::InfiniteFuture();
    for (const std::shared_ptr<Pending>& pending : waiting_) {
      next_deadline = std::min(next_deadline, pending->deadline());
    }
    admission_changed_.WaitWithDeadline(&admission_mu_, next_deadline);
  }
}

void StreamManager::BeginDrain() {
  draining_.store(true);
  absl::MutexLock lock(&admission_mu_);
  ++generation_;
  admission_changed_.Signal();
}

int64_t StreamManager::waiting_streams() const {
  absl::MutexLock lock(&admission_mu_);
  return static_cast<int64_t>(waiting_.size());
}

void StreamManager::EndStream(const StreamTable::Stream& stream, const absl::Status& status) {
  if (stream.control != nullptr && stream.control->End(status)) {
    stats_->streams_replaced.fetch_add(1);
  }
  // The reactor's ender cancels the window too; this frees it even when the reactor
  // is not attached yet or already finishing.
  if (stream.window != nullptr) stream.window->Cancel();
}

int StreamManager::ReclaimIdleStreams() {
  if (options_.stream_idle_timeout <= absl::ZeroDuration()) return 0;
  const absl::Time now = clock_->Now();
  int reclaimed = 0;
  for (const std::shared_ptr<StreamControl>& control : table_.NewestControls()) {
    std::optional<absl::Duration> waiting = control->WriteWaiting(now);
    if (!waiting.has_value() || *waiting < options_.stream_idle_timeout) continue;
    const std::string why = absl::StrCat("idle: the client took no batch for ",
                                         absl::FormatDuration(*waiting), " (--stream-idle-timeout ",
                                         absl::FormatDuration(options_.stream_idle_timeout), ")");
    if (!control->End(absl::CancelledError(why))) continue;
    ++reclaimed;
    stats_->streams_reclaimed_idle.fetch_add(1);
    LogWarning("stream", absl::StrCat("reclaimed ", control->description(), ": ", why));
  }
  return reclaimed;
}

int StreamManager::ShrinkWindows() {
  int given_back = 0;
  for (const std::shared_ptr<BatchWindow>& window : table_.NewestWindows()) {
    given_back += window->Shrink();
  }
  if (given_back > 0) {
    stats_->batches_given_back.fetch_add(given_back);
    LogInfo("stream",
            absl::StrCat("memory pressure: windows gave back ", given_back, " prefetched batches"));
  }
  return given_back;
}

int StreamManager::CheckStalls() {
  if (options_.stall_warn <= absl::ZeroDuration()) return 0;
  const absl::Time now = clock_->Now();
  int flagged = 0;
  for (const std::shared_ptr<Job>& job : jobs_->Jobs()) {
    const int64_t n = job->batches_per_epoch();
    for (const RankProgress& rank : job->UpdateStalls(options_.stall_warn, now)) {
      ++flagged;
      LogWarning(
          "stall",
          absl::StrCat("job '", LogSafe(job->id()), "' rank ", rank.rank,
                       " has taken no batch for ", absl::FormatDuration(now - rank.last_batch),
                       " (--stall-warn ", absl::FormatDuration(options_.stall_warn),
                       ") while other ranks of its job are ahead; it waits at epoch ", rank.epoch,
                       " batch ", rank.next_batch, " of ", n,
                       ": a stuck rank hangs DDP (its peers block in all-reduce)"));
    }
  }
  return flagged;
}

void StreamManager::MonitorLoop() {
  // A quarter of the shorter period: a stream is reclaimed (a stall flagged) between
  // 1x and 1.25x of its timeout.
  absl::Duration period = absl::InfiniteDuration();
  for (absl::Duration d : {options_.stream_idle_timeout, options_.stall_warn}) {
    if (d > absl::ZeroDuration()) period = std::min(period, d);
  }
  const absl::Duration interval = std::clamp(period / 4, absl::Milliseconds(10), absl::Seconds(5));
  while (!stop_monitor_.WaitForNotificationWithTimeout(interval)) {
    ReclaimIdleStreams();
    CheckStalls();
    if (on_monitor_tick_) on_monitor_tick_();
  }
}

void StreamManager::FillStatus(v1::GetStatusResponse* response) const {
  response->set_open_streams(static_cast<int32_t>(open_streams()));
  response->set_streams_waiting_for_memory(static_cast<int32_t>(waiting_streams()));
  response->set_admission_wait_seconds(absl::ToDoubleSeconds(options_.admission_wait));
  response->set_batch_memory_limit_bytes(budget_.limit());
  response->set_batch_memory_reserved_bytes(budget_.in_use());
  response->set_batch_memory_peak_reserved_bytes(budget_.peak_in_use());
  response->set_streams_refused_memory(stats_->streams_refused_memory.load());
  response->set_streams_replaced(stats_->streams_replaced.load());
  response->set_streams_reclaimed_idle(stats_->streams_reclaimed_idle.load());
  response->set_batches_given_back(stats_->batches_given_back.load());
  response->set_stream_idle_timeout_seconds(absl::ToDoubleSeconds(options_.stream_idle_timeout));
  response->set_stall_warn_seconds(absl::ToDoubleSeconds(options_.stall_warn));
}

}  // namespace shardcast::server

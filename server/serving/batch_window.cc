// Per-stream bounded window of batches (see batch_window.h).
#include "server/serving/batch_window.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/log.h"

namespace shardcast::server {

std::shared_ptr<BatchWindow> BatchWindow::Create(BatchAssembler* assembler,
                                                 std::unique_ptr<RankBatchIterator> batches,
                                                 const Options& options) {
  std::shared_ptr<BatchWindow> window(new BatchWindow(assembler, std::move(batches), options));
  WatchMemory(window);
  return window;
}

void BatchWindow::WatchMemory(const std::shared_ptr<BatchWindow>& window) {
  if (window->options_.memory == nullptr) return;
  std::weak_ptr<BatchWindow> weak = window;
  window->options_.memory->SetOnFreed([weak] {
    if (auto self = weak.lock()) self->OnMemoryFreed();
  });
}

BatchWindow::BatchWindow(BatchAssembler* assembler, std::unique_ptr<RankBatchIterator> batches,
                         const Options& options)
    : assembler_(assembler),
      options_(options),
      cancelled_(std::make_shared<std::atomic<bool>>(false)),
      batches_(std::move(batches)) {}

BatchWindow::~BatchWindow() { cancelled_->store(true); }

void BatchWindow::Start() {
  std::vector<Launch> launches;
  {
    absl::MutexLock lock(&mu_);
    launches = PlanLaunchesLocked();
  }
  LaunchAll(std::move(launches));
}

std::vector<BatchWindow::Launch> BatchWindow::PlanLaunchesLocked() {
  std::vector<Launch> launches;
  if (cancelled_locked_) return launches;
  const size_t depth = static_cast<size_t>(std::max(1, options_.depth));
  while (slots_.size() < depth && launched_ < options_.count && launch_error_.ok()) {
    Launch launch;
    if (!relaunch_.empty()) {
      launch.planned = std::move(relaunch_.front());
      relaunch_.pop_front();
    } else if (!NextPlannedLocked(&launch.planned)) {
      launch_error_ = absl::InternalError(absl::StrCat("the epoch plan ended after ", launched_,
                                                       " of ", options_.count, " batches"));
      break;
    }
    // Each sample looked up once, for the batch's size and then for the batch.
    std::vector<SampleEntry> entries;
    if (absl::Status found = assembler_->LookUp(launch.planned, &entries); !found.ok()) {
      launch_error_ = found;
      break;
    }
    // No memory, no launch: the window stays shallower until a batch comes back, and
    // the batch waits first in line.
    BatchGrant grant;
    if (options_.memory != nullptr &&
        !options_.memory->TryAcquire(
            assembler_->BatchBytes(launch.planned, *options_.content, entries), &grant)) {
      relaunch_.push_front(std::move(launch.planned));
      break;
    }
    absl::StatusOr<std::shared_ptr<AssembledBatch>> batch =
        assembler_->Prepare(launch.planned, *options_.content, std::move(grant), &entries);
    if (!batch.ok()) {
      launch_error_ = batch.status();
      break;
    }
    launch.batch = *std::move(batch);
    launch.sequence = launched_++;
    slots_.push_back(Slot{launch.sequence, launch.batch, false, launch.planned});
    launches.push_back(std::move(launch));
  }
  return launches;
}

bool BatchWindow::NextPlannedLocked(PlannedBatch* batch) {
  const size_t want = 1 + static_cast<size_t>(std::max(0, options_.read_ahead));
  while (pulled_.size() < want && !plan_ended_) {
    PlannedBatch next;
    if (!batches_->Next(&next)) {
      plan_ended_ = true;
      break;
    }
    if (options_.read_ahead > 0) announce_.push_back(next);
    pulled_.push_back(std::move(next));
  }
  if (pulled_.empty()) return false;
  *batch = std::move(pulled_.front());
  pulled_.pop_front();
  return true;
}

void BatchWindow::LaunchAll(std::vector<Launch> launches) {
  std::vector<PlannedBatch> announce;
  {
    absl::MutexLock lock(&mu_);
    announce.swap(announce_);
  }
  for (const PlannedBatch& planned : announce) assembler_->Prefetch(planned, *options_.content);
  for (Launch& launch : launches) {
    std::weak_ptr<BatchWindow> weak = weak_from_this();
    const int64_t sequence = launch.sequence;
    assembler_->Launch(std::move(launch.batch), launch.planned, options_.content, cancelled_,
                       [weak, sequence](bool complete) {
                         if (auto self = weak.lock()) self->OnAssembled(sequence, complete);
                       });
  }
}

int BatchWindow::Shrink() {
  std::vector<std::shared_ptr<AssembledBatch>> dropped;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_locked_) return 0;
    // From the back, so the sequence numbers stay contiguous: a dropped batch gets its
    // sequence again when relaunched. Only ready slots: a batch still being assembled
    // would call OnAssembled later for a sequence that may have been relaunched.
    while (slots_.size() > 1 && slots_.back().ready) {
      relaunch_.push_front(std::move(slots_.back().planned));
      dropped.push_back(std::move(slots_.back().batch));
      slots_.pop_back();
      --launched_;
    }
  }
  // The buffers and their grants go back here, outside the lock.
  return static_cast<int>(dropped.size());
}

void BatchWindow::OnMemoryFreed() {
  std::vector<Launch> launches;
  {
    absl::MutexLock lock(&mu_);
    launches = PlanLaunchesLocked();
  }
  LaunchAll(std::move(launches));
}

void BatchWindow::OnAssembled(int64_t sequence, bool complete) {
  std::function<void()> callback;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_locked_ || !complete || slots_.empty()) return;
    const int64_t position = sequence - slots_.front().sequence;
    if (position < 0 || position >= static_cast<int64_t>(slots_.size())) return;
    slots_[position].ready = true;
    if (position != 0 || !on_ready_) return;
    callback = std::move(on_ready_);
    on_ready_ = nullptr;
    ++callbacks_running_;
  }
  callback();
  absl::MutexLock lock(&mu_);
  --callbacks_running_;
}

absl::StatusOr<BatchWindow::TakeResult> BatchWindow::Take(std::shared_ptr<AssembledBatch>* batch,
                                                          std::function<void()> on_ready) {
  std::vector<Launch> launches;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_locked_ || taken_ >= options_.count) return TakeResult::kEnd;
    if (slots_.empty()) {
      // Below `count` the window is empty only when a launch failed or found no memory
      // (the stream's own batch still held by gRPC): try again now.
      if (!launch_error_.ok()) return launch_error_;
      launches = PlanLaunchesLocked();
      if (slots_.empty()) {
        if (!launch_error_.ok()) return launch_error_;
        if (options_.memory == nullptr) {
          return absl::InternalError("batch window: nothing launched");
        }
        // OnMemoryFreed launches once the guaranteed batch is back; OnAssembled then
        // calls on_ready.
        on_ready_ = std::move(on_ready);
        return TakeResult::kPending;
      }
    }
  }
  // Launched outside the lock, before on_ready is armed: a batch with nothing to decode
  // completes inline, and its callback must not re-enter the caller.
  LaunchAll(std::move(launches));
  launches.clear();
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_locked_ || taken_ >= options_.count) return TakeResult::kEnd;
    if (slots_.empty()) {
      // Cancelled meanwhile, or another caller took it: the caller serializes Take,
      // so only an error can bring us here.
      return launch_error_.ok() ? absl::InternalError("batch window: nothing launched")
                                : launch_error_;
    }
    if (!slots_.front().ready) {
      on_ready_ = std::move(on_ready);
      return TakeResult::kPending;
    }
    if (const absl::Status& failure = slots_.front().batch->failure(); !failure.ok()) {
      // Nothing after it is sent or launched: the same shard would fail again.
      launch_error_ = failure;
      slots_.clear();
      relaunch_.clear();
      return launch_error_;
    }
    *batch = std::move(slots_.front().batch);
    slots_.pop_front();
    ++taken_;
    launches = PlanLaunchesLocked();
  }
  LaunchAll(std::move(launches));
  return TakeResult::kBatch;
}

void BatchWindow::Cancel() {
  std::deque<Slot> dropped;
  {
    absl::MutexLock lock(&mu_);
    cancelled_->store(true, std::memory_order_release);
    cancelled_locked_ = true;
    on_ready_ = nullptr;
    dropped.swap(slots_);
    mu_.Await(absl::Condition(
        +[](int* running) { return *running == 0; }, &callbacks_running_));
  }
  // The guaranteed batch goes back to the budget now unless a batch still holds it.
  if (options_.memory != nullptr) options_.memory->Close();
  // Buffers of batches not yet taken are released here (decode tasks still queued
  // hold theirs until they are skipped).
}

int64_t BatchWindow::depth() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(slots_.size());
}

int64_t BatchWindow::taken() const {
  absl::MutexLock lock(&mu_);
  return taken_;
}

}  // namespace shardcast::server

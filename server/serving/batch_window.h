// One stream's producer: keeps up to `depth` batches of a rank's epoch being
// assembled or ready ahead of what the client has taken, in plan order. This is
// the backpressure: a slow client holds at most depth batches (plus the one being
// written), and a cancelled window stops its decode work.
#ifndef SHARDCAST_SERVER_SERVING_BATCH_WINDOW_H_
#define SHARDCAST_SERVER_SERVING_BATCH_WINDOW_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/image/image_transform.h"
#include "common/plan/epoch_plan.h"
#include "server/assembly/batch_assembler.h"
#include "server/assembly/batch_memory.h"

namespace shardcast::server {

class BatchWindow : public std::enable_shared_from_this<BatchWindow> {
 public:
  struct Options {
    int depth = 4;      // batches assembled or in flight ahead of the client (>= 1)
    int64_t count = 0;  // batches this stream sends (n - start_batch)
    // What the job's batches hold (never null).
    std::shared_ptr<const BatchContent> content;
    // The stream's share of --max-batch-memory: every batch is launched only with a
    // grant from it, so the window is as deep as `depth` only while the budget allows
    // (and at least one batch). Null: no budget (tests, benchmarks).
    std::shared_ptr<StreamMemory> memory;
    // The plan's batches this far beyond those launched are announced to the dataset's
    // reader (MemberReader::Prefetch), so that a reader of remote shards fetches their
    // bytes while the batches before them decode. 0 = none.
    int read_ahead = 0;
  };

  // REQUIRES: `assembler` outlives the window and every batch it launched.
  static std::shared_ptr<BatchWindow> Create(BatchAssembler* assembler,
                                             std::unique_ptr<RankBatchIterator> batches,
                                             const Options& options);
  virtual ~BatchWindow();

  // Launches the first batches. Called once, before Take().
  void Start() ABSL_LOCKS_EXCLUDED(mu_);

  enum class TakeResult {
    kBatch,    // *batch is the next batch in order; the window refills behind it
    kPending,  // the next batch is not ready (or waits for memory); `on_ready` will be
               // called once when it is
    kEnd,      // all `count` batches were taken (or the window was cancelled)
  };
  // Never blocks. `on_ready` runs on a pool thread (or the thread that made the batch
  // ready) without any window lock held; it may call Take() again.
  // An error ends the stream, after every batch launched before it was taken:
  // RESOURCE_EXHAUSTED (a batch buffer could not be allocated), FAILED_PRECONDITION (a
  // sample's shard changed since indexing: AssembledBatch::failure; that batch and the
  // ones after it are dropped) or INTERNAL (the plan ended before `count` batches: a
  // planner bug, never expected). It is returned
  // again by later calls.
  virtual absl::StatusOr<TakeResult> Take(std::shared_ptr<AssembledBatch>* batch,
                                          std::function<void()> on_ready) ABSL_LOCKS_EXCLUDED(mu_);

  // Stops the stream's work: queued decode tasks are skipped, buffers not yet
  // taken are released, and no callback fires afterwards. Idempotent.
  virtual void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

  // Memory pressure: gives back the batches assembled ahead of the client beyond the
  // next one (ready ones only; a batch being assembled is left alone). They are
  // assembled again, byte for byte, when the window refills. Returns how many.
  int Shrink() ABSL_LOCKS_EXCLUDED(mu_);

  // Batches assembled or being assembled ahead of the client.
  int64_t depth() const ABSL_LOCKS_EXCLUDED(mu_);
  virtual int64_t taken() const ABSL_LOCKS_EXCLUDED(mu_);

 protected:
  BatchWindow(BatchAssembler* assembler, std::unique_ptr<RankBatchIterator> batches,
              const Options& options);
  // Lets `window`'s stream memory call it back when the guaranteed batch is freed.
  static void WatchMemory(const std::shared_ptr<BatchWindow>& window);

 private:
  struct Slot {
    int64_t sequence = 0;                   // 0-based position in this stream
    std::shared_ptr<AssembledBatch> batch;  // allocated when launched
    bool ready = false;                     // assembly finished
    PlannedBatch planned;                   // to assemble it again after a Shrink
  };
  struct Launch {
    std::shared_ptr<AssembledBatch> batch;
    PlannedBatch planned;
    int64_t sequence;
  };

  // Reserves slots up to the depth; returns what the caller must launch (unlocked).
  std::vector<Launch> PlanLaunchesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The plan's next batch, keeping `read_ahead` more pulled from the plan behind it
  // (those pulled now wait in announce_ for LaunchAll). False once the plan ended.
  bool NextPlannedLocked(PlannedBatch* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LaunchAll(std::vector<Launch> launches) ABSL_LOCKS_EXCLUDED(mu_);
  void OnAssembled(int64_t sequence, bool complete) ABSL_LOCKS_EXCLUDED(mu_);
  // The stream's guaranteed batch came back after a launch found no memory.
  void OnMemoryFreed() ABSL_LOCKS_EXCLUDED(mu_);

  BatchAssembler* const assembler_;
  const Options options_;
  // Set by Cancel(); decode tasks of this window read it to skip their work.
  const std::shared_ptr<std::atomic<bool>> cancelled_;

  mutable absl::Mutex mu_;
  std::unique_ptr<RankBatchIterator> batches_ ABSL_GUARDED_BY(mu_);  // the plan, lazily
  std::deque<PlannedBatch> pulled_ ABSL_GUARDED_BY(mu_);     // from the plan, not launched yet
  std::vector<PlannedBatch> announce_ ABSL_GUARDED_BY(mu_);  // pulled, not yet announced
  bool plan_ended_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Slot> slots_ ABSL_GUARDED_BY(mu_);  // launched, not yet taken, in order
  // Given back by Shrink, or found no memory, in order: launched before the plan's next.
  std::deque<PlannedBatch> relaunch_ ABSL_GUARDED_BY(mu_);
  int64_t launched_ ABSL_GUARDED_BY(mu_) = 0;            // batches launched so far
  int64_t taken_ ABSL_GUARDED_BY(mu_) = 0;               // batches handed to the client
  std::function<void()> on_ready_ ABSL_GUARDED_BY(mu_);  // armed by a kPending Take
  bool cancelled_locked_ ABSL_GUARDED_BY(mu_) = false;
  // Why no more batches are launched before `count` (plan ended early, allocation
  // failed); delivered by Take once the batches launched before it are taken.
  absl::Status launch_error_ ABSL_GUARDED_BY(mu_);
  // on_ready callbacks running right now; Cancel() waits for them so that the
  // callback's owner may be destroyed as soon as Cancel() returns.
  int callbacks_running_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_SERVING_BATCH_WINDOW_H_

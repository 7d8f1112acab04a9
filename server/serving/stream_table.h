// The server's open streams, in one place: which streams are open, the newest of each
// (job, rank) and the one it replaced, and what the periodic rounds act on (the
// windows to shrink, the controls the idle reaper ends). A job's progress moves with
// its ranks' newest streams only: the table tells the job (Job::StreamStarted,
// Job::RankTookBatch, ...) under its own lock, so that a replaced stream still
// sending cannot move its rank back.
//
// StreamManager owns the table and its sessions report to it; the job registry asks it
// whether a job has a stream open (a job with one never expires).
#ifndef SHARDCAST_SERVER_SERVING_STREAM_TABLE_H_
#define SHARDCAST_SERVER_SERVING_STREAM_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/serving/stream_control.h"

namespace shardcast::server {

class BatchWindow;
class Job;

class StreamTable {
 public:
  // An open stream as the others see it: what ends it and what it prefetches into.
  struct Stream {
    std::shared_ptr<StreamControl> control;  // null: no stream
    std::shared_ptr<BatchWindow> window;     // null: none, or freed already
  };
  // What Open did: the new stream's id, and the stream of the same rank it replaced
  // (nulls when none was open), which the caller ends (one open stream per rank).
  struct Opened {
    int64_t stream_id = 0;
    Stream replaced;
  };

  StreamTable() = default;
  StreamTable(const StreamTable&) = delete;
  StreamTable& operator=(const StreamTable&) = delete;

  // Adds a stream of (`job`, `rank`) that sends from `start_batch` of `epoch`, as the
  // rank's newest, and tells the job (Job::StreamStarted). REQUIRES: `job` outlives the
  // stream (until Close).
  Opened Open(Job* job, int32_t rank, int64_t epoch, int64_t start_batch,
              std::weak_ptr<BatchWindow> window, std::shared_ptr<StreamControl> control)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Stream `stream_id` sent batch `batch_index` at `now`. The job counts it; its rank's
  // progress moves only when it is the rank's newest stream. True when that rank was
  // flagged stalled (Job::RankTookBatch).
  bool Sent(Job* job, int32_t rank, int64_t stream_id, int64_t batch_index, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Stream `stream_id` ended: removed (its rank then has none open unless a newer one
  // replaced it), and the job told (Job::StreamEnded).
  void Close(Job* job, int32_t rank, int64_t stream_id) ABSL_LOCKS_EXCLUDED(mu_);

  // The newest stream of (`job`, `rank`) while open (nulls otherwise).
  Stream NewestOf(const Job* job, int32_t rank) const ABSL_LOCKS_EXCLUDED(mu_);
  // The windows of the ranks' newest streams (to shrink them under memory pressure).
  std::vector<std::shared_ptr<BatchWindow>> NewestWindows() const ABSL_LOCKS_EXCLUDED(mu_);
  // The controls of the ranks' newest streams (for the idle reaper).
  std::vector<std::shared_ptr<StreamControl>> NewestControls() const ABSL_LOCKS_EXCLUDED(mu_);

  // Streams open, replaced ones not yet closed included.
  int64_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a stream of `job` is open (replaced ones included).
  bool AnyOpen(const Job* job) const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits (real time: streams end on their own events) until no stream is open or
  // `deadline`; true when none is.
  bool AwaitNone(absl::Time deadline) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using RankKey = std::pair<const Job*, int32_t>;
  struct Entry {
    RankKey rank;
    std::weak_ptr<BatchWindow> window;  // the stream's, not kept alive by the table
    std::shared_ptr<StreamControl> control;
  };
  // Whether `stream_id` is the newest stream of `rank`.
  bool IsNewest(const RankKey& rank, int64_t stream_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  int64_t next_stream_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<int64_t, Entry> streams_ ABSL_GUARDED_BY(mu_);           // open, by id
  std::map<RankKey, int64_t> newest_ ABSL_GUARDED_BY(mu_);          // a rank's newest open stream
  std::map<const Job*, int64_t> open_of_job_ ABSL_GUARDED_BY(mu_);  // only jobs with some
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_SERVING_STREAM_TABLE_H_

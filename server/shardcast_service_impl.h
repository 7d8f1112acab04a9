// The serving core: registration, batch streams and status, with absl::Status
// errors and no gRPC types (grpc_shardcast_service.h adapts it to the wire).
#ifndef SHARDCAST_SERVER_SHARDCAST_SERVICE_IMPL_H_
#define SHARDCAST_SERVER_SHARDCAST_SERVICE_IMPL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/batch_assembler.h"
#include "server/batch_memory.h"
#include "server/batch_window.h"
#include "server/dataset_registry.h"
#include "server/decode_budget.h"
#include "server/decode_pool.h"
#include "server/job_registry.h"
#include "server/metrics_text.h"
#include "server/served_dataset.h"
#include "server/server_options.h"
#include "server/server_stats.h"
#include "server/stream_control.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::server {

class ShardcastServiceImpl;

// One open StreamBatches call: hands out the batches of (job, rank, epoch) from
// start_batch in order and keeps the job's progress and the server's counters.
// Not thread-safe: the owner (one stream reactor) serializes calls.
class StreamSession {
 public:
  ~StreamSession();  // Close()s
  StreamSession(const StreamSession&) = delete;
  StreamSession& operator=(const StreamSession&) = delete;

  // See BatchWindow::Take. A kPending result starts the clock of the client waiting
  // on the server; the next kBatch stops it (counted in ServerStats).
  absl::StatusOr<BatchWindow::TakeResult> Take(std::shared_ptr<AssembledBatch>* batch,
                                               std::function<void()> on_ready);
  // The client's transport took `batch` (a message of `message_bytes` bytes) after
  // the write had waited `write_wait` on it.
  void Sent(const AssembledBatch& batch, int64_t message_bytes, absl::Duration write_wait);
  // Ends the stream: stops decode work, frees its buffers, logs `how`. Idempotent.
  void Close(const std::string& how);

  // Stops the stream's work and frees its batches not yet taken, from any thread (a
  // stream ended from outside its call); Close() still follows.
  void CancelWindow() { window_->Cancel(); }

  int64_t count() const { return count_; }
  int64_t sent() const { return sent_; }
  const std::string& description() const { return description_; }
  const std::shared_ptr<StreamControl>& control() const { return control_; }

 private:
  friend class ShardcastServiceImpl;
  StreamSession(ShardcastServiceImpl* service, std::shared_ptr<Job> job, int32_t rank,
                int64_t count, std::shared_ptr<BatchWindow> window, int64_t stream_id,
                std::string description, std::shared_ptr<StreamControl> control);

  ShardcastServiceImpl* const service_;
  const std::shared_ptr<Job> job_;
  const int32_t rank_;
  const int64_t count_;  // messages this stream sends: n - start_batch
  const std::shared_ptr<BatchWindow> window_;
  const int64_t stream_id_;
  const std::string description_;  // "job 'x' rank 0 epoch 1 batches [0, 12)"
  const std::shared_ptr<StreamControl> control_;
  int64_t sent_ = 0;
  bool closed_ = false;
  absl::Time pending_since_ = absl::InfinitePast();  // Take said kPending (not yet a batch)
};

class ShardcastServiceImpl {
 public:
  // Starts the decode pool. The datasets come later (LoadDatasets/SetDataset):
  // until one is loaded, requests for it are UNAVAILABLE ("indexing").
  explicit ShardcastServiceImpl(const ServerOptions& options);
  ~ShardcastServiceImpl();
  ShardcastServiceImpl(const ShardcastServiceImpl&) = delete;
  ShardcastServiceImpl& operator=(const ShardcastServiceImpl&) = delete;

  // Builds (or loads from cache) the index of every dataset of the options
  // (DatasetsToServe), one after the other, serving each as soon as it is ready and
  // calling `on_ready(name)` then. Called once. Stops at the first dataset that
  // cannot be indexed: it is reported FAILED, and the error names it.
  absl::Status LoadDatasets(const std::function<void(const std::string&)>& on_ready = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Serves a dataset made elsewhere (tests, benchmarks) as `name`.
  void SetDataset(std::unique_ptr<ServedDataset> dataset,
                  const std::string& name = kDefaultDatasetName) ABSL_LOCKS_EXCLUDED(mu_);

  // Refuses new registrations and streams (UNAVAILABLE "draining"); open streams go on.
  void BeginDrain();
  // True once every dataset is loaded and until BeginDrain().
  bool serving() const;

  // `peer`: the client's PeerHost (grpc_shardcast_service.h), which
  // --max-unstreamed-jobs-per-peer counts by.
  absl::StatusOr<shardcast::v1::RegisterResponse> Register(
      const shardcast::v1::RegisterRequest& request, const std::string& peer);

  // Validates the request and starts assembling its window. Errors: UNAVAILABLE
  // (indexing/draining), NOT_FOUND (unknown job), INVALID_ARGUMENT (rank outside the
  // job's world), FAILED_PRECONDITION (rank not registered), OUT_OF_RANGE (epoch < 0,
  // start_batch outside [0, n]), RESOURCE_EXHAUSTED (not even one batch fits
  // --max-batch-memory, after idle streams were reclaimed). A stream of the same
  // (job, rank) still open is ended first (ABORTED, "replaced ...").
  absl::StatusOr<std::unique_ptr<StreamSession>> OpenStream(
      const shardcast::v1::StreamBatchesRequest& request);

  // Changes nothing: expired jobs are left out of the reply, not dropped (Register and
  // the monitor thread drop them).
  shardcast::v1::GetStatusResponse GetStatus() const;
  // GetStatus plus what only /metrics shows (the decode-time histogram, whether the
  // server drains), taken together.
  MetricsSnapshot Metrics() const;

  // Ends the streams whose client has not taken a batch for --stream-idle-timeout
  // (CANCELLED, counted, logged); returns how many. The monitor thread calls it.
  int ReclaimIdleStreams() ABSL_LOCKS_EXCLUDED(mu_);
  // Flags the ranks stalled for --stall-warn (stall_watch.h) and logs each new one
  // once; returns how many were newly flagged. The monitor thread calls it.
  int CheckStalls() ABSL_LOCKS_EXCLUDED(mu_);
  // "draining" after BeginDrain, else the state of `dataset`: "indexing", "serving" or
  // "failed".
  std::string IndexState(DatasetRegistry::State dataset) const ABSL_LOCKS_EXCLUDED(mu_);

  // The largest epoch a stream may ask for: a billion epochs is beyond any training run,
  // and keeps a rank's global position (epoch * n + batch, the lag figures) far from
  // overflowing for any n an index can have (issue 29: 2^63-1 was accepted).
  static constexpr int64_t kMaxEpoch = 1'000'000'000;
  // GetStatus lists at most this many jobs, and ranks per job.
  static constexpr int kMaxListedJobs = 100;
  static constexpr int kMaxListedRanks = 256;
  // ... and at most this many skipped shards, and changed shards; their names and
  // reasons cut to these sizes (LogSafe).
  static constexpr int kMaxListedShardProblems = 100;
  static constexpr size_t kMaxShardNameBytes = 256;
  static constexpr size_t kMaxShardReasonBytes = 512;

  int64_t open_streams() const { return open_streams_.load(); }
  const BatchMemoryBudget& budget() const { return budget_; }
  const DecodeBudget& decode_budget() const { return decode_budget_; }
  ServerStats& stats() { return stats_; }
  DecodePool& pool() { return *pool_; }
  const DatasetRegistry& datasets() const { return datasets_; }
  JobRegistry& registry() { return jobs_; }

 private:
  friend class StreamSession;
  // OpenStream without the log line for a refusal.
  absl::StatusOr<std::unique_ptr<StreamSession>> StartStream(
      const shardcast::v1::StreamBatchesRequest& request);
  // Ends `control`'s stream (if still open) with `status` and frees its window.
  void EndStream(const std::shared_ptr<StreamControl>& control,
                 const std::shared_ptr<BatchWindow>& window, const absl::Status& status);
  // The stream's share of the budget; reclaims idle streams and waits briefly for
  // ended streams' batches when it does not fit at once.
  absl::StatusOr<std::shared_ptr<StreamMemory>> AdmitStream(int64_t batch_bytes,
                                                            bool ended_another);
  // Shrinks every open window to its next batch; returns the batches given back.
  int ShrinkWindows() ABSL_LOCKS_EXCLUDED(mu_);
  void MonitorLoop();
  // Drops the jobs idle for --job-ttl, with a log line each.
  void DropExpiredJobs();
  // The descriptor limit, descriptors and connections open, the listener's state.
  void AddDescriptorFigures(shardcast::v1::GetStatusResponse* response) const;
  // UNAVAILABLE while draining.
  absl::Status Available() const ABSL_LOCKS_EXCLUDED(mu_);
  // Indexes one dataset and publishes it.
  absl::Status LoadDataset(const DatasetSpec& spec);

  const ServerOptions options_;
  ServerStats stats_;
  BatchMemoryBudget budget_;  // --max-batch-memory
  // --max-decode-memory; outlives the pool (declared before it), whose tasks use it.
  DecodeBudget decode_budget_;
  // Stopped first by the destructor: its tasks use the dataset and the stats.
  std::unique_ptr<DecodePool> pool_;
  std::atomic<int64_t> open_streams_{0};

  // Datasets by name; a spec error (DatasetsToServe) is kept in options_error_ and
  // returned by LoadDatasets.
  absl::Status options_error_;
  DatasetRegistry datasets_;
  // Jobs of all datasets. Declared after datasets_: jobs refer to their dataset.
  JobRegistry jobs_;

  mutable absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  // Set by BeginDrain: a scan still running stops within one tar member, so SIGTERM
  // during a long indexing exits promptly.
  std::atomic<bool> stop_indexing_{false};

  // Runs ReclaimIdleStreams and CheckStalls every quarter of the shorter of
  // --stream-idle-timeout and --stall-warn (when either is set).
  absl::Notification stop_monitor_;
  std::thread monitor_;
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_SHARDCAST_SERVICE_IMPL_H_

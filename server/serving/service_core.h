// The serving core: registration, batch streams and status, with absl::Status
// errors and no gRPC types (grpc_adapter.h adapts it to the wire).
#ifndef SHARDCAST_SERVER_SERVING_SERVICE_CORE_H_
#define SHARDCAST_SERVER_SERVING_SERVICE_CORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/memory/memory_budget.h"
#include "server/assembly/batch_assembler.h"
#include "server/assembly/decode_pool.h"
#include "server/assembly/remote_storage.h"
#include "server/assembly/served_dataset.h"
#include "server/base/server_stats.h"
#include "server/serving/dataset_registry.h"
#include "server/serving/job_registry.h"
#include "server/serving/server_options.h"
#include "server/serving/status_reply.h"
#include "server/serving/stream_manager.h"
#include "server/status/metrics_text.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::server {

class ServiceCore {
 public:
  // Starts the decode pool. The datasets come later (LoadDatasets/SetDataset):
  // until one is loaded, requests for it are UNAVAILABLE ("indexing").
  explicit ServiceCore(const ServerOptions& options);
  ~ServiceCore();
  ServiceCore(const ServiceCore&) = delete;
  ServiceCore& operator=(const ServiceCore&) = delete;

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

  // `peer`: the client's PeerHost (grpc_adapter.h), which
  // --max-unstreamed-jobs-per-peer counts by.
  absl::StatusOr<shardcast::v1::RegisterResponse> Register(
      const shardcast::v1::RegisterRequest& request, const std::string& peer);

  // Validates the request and opens its stream (StreamManager::Open: a stream of the
  // same (job, rank) still open is ended first). `done` gets the session or the error:
  // UNAVAILABLE (indexing/draining), NOT_FOUND (unknown job), INVALID_ARGUMENT (rank
  // outside the job's world), FAILED_PRECONDITION (rank not registered, fingerprint),
  // OUT_OF_RANGE (epoch, start_batch outside [0, n]), RESOURCE_EXHAUSTED (not even one
  // batch fits --max-batch-memory within --admission-wait). It runs on this thread,
  // or later on the admission thread when the stream waits for memory; the returned
  // Pending (null when `done` already ran) withdraws it (StreamManager::Withdraw).
  std::shared_ptr<StreamManager::Pending> OpenStream(
      const shardcast::v1::StreamBatchesRequest& request, StreamManager::OpenDone done);

  // The status reply (status_reply.h). Changes nothing: expired jobs are left out of the
  // reply, not dropped (Register and the monitor thread drop them).
  shardcast::v1::GetStatusResponse GetStatus() const;
  // GetStatus plus what only /metrics shows (the decode-time histogram, whether the
  // server drains), taken together.
  MetricsSnapshot Metrics() const;

  // "draining" after BeginDrain, else the state of `dataset`: "indexing", "serving" or
  // "failed".
  std::string IndexState(DatasetRegistry::State dataset) const ABSL_LOCKS_EXCLUDED(mu_);

  // The largest epoch a stream may ask for: a billion epochs is beyond any training run,
  // and keeps a rank's global position (epoch * n + batch, the lag figures) far from
  // overflowing for any n an index can have (issue 29: 2^63-1 was accepted).
  static constexpr int64_t kMaxEpoch = 1'000'000'000;
  // The status reply's listing bounds (status_reply.h), under the names tests use.
  static constexpr int kMaxListedJobs = server::kMaxListedJobs;
  static constexpr int kMaxListedRanks = server::kMaxListedRanks;

  StreamManager& streams() { return *streams_; }
  const MemoryBudget& decode_budget() const { return decode_budget_; }
  ServerStats& stats() { return stats_; }
  DecodePool& pool() { return *pool_; }
  const DatasetRegistry& datasets() const { return datasets_; }
  JobRegistry& registry() { return jobs_; }
  const Clock& clock() const { return *options_.clock; }

 private:
  // The stream a request asks for, validated; OpenStream's errors but memory.
  absl::StatusOr<StreamPlan> PlanStream(const shardcast::v1::StreamBatchesRequest& request);
  // Register for a job of one dataset (RegisterRequest.dataset) or a mixture
  // (RegisterRequest.mix): the datasets resolved by name, then the job registry's.
  absl::StatusOr<shardcast::v1::RegisterResponse> RegisterOne(
      const shardcast::v1::RegisterRequest& request, const std::string& peer);
  absl::StatusOr<shardcast::v1::RegisterResponse> RegisterMixture(
      const shardcast::v1::RegisterRequest& request, const std::string& peer);
  // Drops the jobs idle for --job-ttl, with a log line each.
  void DropExpiredJobs();
  // BeginDrain was called.
  bool draining() const ABSL_LOCKS_EXCLUDED(mu_);
  // UNAVAILABLE while draining.
  absl::Status Available() const ABSL_LOCKS_EXCLUDED(mu_);
  // Indexes one dataset and publishes it.
  absl::Status LoadDataset(const DatasetSpec& spec);

  const ServerOptions options_;
  ServerStats stats_;
  // --max-decode-memory; outlives the pool (declared before it), whose tasks use it.
  MemoryBudget decode_budget_;
  // Stopped first by the destructor: its tasks use the dataset and the stats.
  std::unique_ptr<DecodePool> pool_;

  // Datasets by name; a spec error (DatasetsToServe) is kept in options_error_ and
  // returned by LoadDatasets.
  absl::Status options_error_;
  // Before datasets_: the readers of remote datasets use its fetcher and cache.
  RemoteStorage remote_storage_;
  DatasetRegistry datasets_;
  // Jobs of all datasets. Declared after datasets_: jobs refer to their dataset.
  JobRegistry jobs_;
  // Open streams and their memory. After jobs_, which it walks. The destructor stops
  // its threads first (the monitor drops expired jobs) and frees it after the pool
  // (decode tasks hold batches that give memory back to its budget).
  std::unique_ptr<StreamManager> streams_;

  mutable absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  // Set by BeginDrain: a scan still running stops within one tar member, so SIGTERM
  // during a long indexing exits promptly.
  std::atomic<bool> stop_indexing_{false};
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_SERVING_SERVICE_CORE_H_

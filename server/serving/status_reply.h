// The GetStatus reply (and so /metrics and shardcast-ctl status): built here from the
// serving core's parts, read only, so that the service core keeps to answering
// requests. Every figure comes from one of the parts named in StatusSources; the
// listing bounds keep the reply's size bounded whatever the number of jobs and shards.
#ifndef SHARDCAST_SERVER_SERVING_STATUS_REPLY_H_
#define SHARDCAST_SERVER_SERVING_STATUS_REPLY_H_

#include <cstddef>
#include <string>

#include "absl/time/time.h"
#include "common/memory/memory_budget.h"
#include "server/assembly/decode_pool.h"
#include "server/assembly/remote_storage.h"
#include "server/base/server_stats.h"
#include "server/serving/dataset_registry.h"
#include "server/serving/job_registry.h"
#include "server/serving/server_options.h"
#include "server/serving/stream_manager.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::server {

// The reply lists at most this many jobs, and ranks per job...
inline constexpr int kMaxListedJobs = 100;
inline constexpr int kMaxListedRanks = 256;
// ... and at most this many skipped shards, and changed shards; their names and
// reasons cut to these sizes (LogSafe).
inline constexpr int kMaxListedShardProblems = 100;
inline constexpr size_t kMaxShardNameBytes = 256;
inline constexpr size_t kMaxShardReasonBytes = 512;

// What the reply is read from. REQUIRES: every pointer is set and outlives the call.
struct StatusSources {
  const ServerOptions* options = nullptr;
  const ServerStats* stats = nullptr;
  const DecodePool* pool = nullptr;
  const MemoryBudget* decode_budget = nullptr;
  const DatasetRegistry* datasets = nullptr;
  const JobRegistry* jobs = nullptr;
  const StreamManager* streams = nullptr;
  const RemoteStorage* remote_storage = nullptr;
};

// The reply at `now`; `draining`: the server drains (SIGTERM), so it is not serving and
// its index state reads "draining". Changes nothing: expired jobs are left out of the
// reply, not dropped.
shardcast::v1::GetStatusResponse BuildStatusReply(const StatusSources& sources, absl::Time now,
                                                  bool draining);

// "draining" when `draining`, else the state of `dataset`: "indexing", "serving" or
// "failed".
std::string IndexStateName(DatasetRegistry::State dataset, bool draining);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_SERVING_STATUS_REPLY_H_

// The server's figures in the Prometheus text exposition format (version 0.0.4):
// metric names with the shardcast_ prefix and base units (seconds, bytes), counters
// ending in _total, and labels of bounded cardinality (jobs and ranks as GetStatus
// lists them: at most kMaxListedJobs x kMaxListedRanks series per per-rank metric).
// A pure function of a snapshot: no clock, no I/O.
#ifndef SHARDCAST_SERVER_METRICS_TEXT_H_
#define SHARDCAST_SERVER_METRICS_TEXT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "server/server_stats.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::server {

// One served dataset's index, for the dataset="NAME" series.
struct DatasetMetrics {
  std::string name;   // --dataset NAME ("default" for --shards)
  std::string state;  // "indexing", "serving", "draining" or "failed"
  int64_t shards = 0;
  int64_t samples = 0;
  int64_t skipped_samples = 0;
};

struct MetricsSnapshot {
  shardcast::v1::GetStatusResponse status;  // what GetStatus answers at the same moment
  DurationHistogram::Snapshot decode_time;
  std::vector<DatasetMetrics> datasets;
};

// The states a DatasetMetrics::state may take: each dataset gets one
// shardcast_index_state series per state, 1 for its current one.
inline constexpr const char* kIndexStates[] = {"indexing", "serving", "draining", "failed"};

// The exposition text, each family with # HELP and # TYPE, ending in a newline.
std::string RenderPrometheusText(const MetricsSnapshot& snapshot);

// A label value as the text format wants it. The value is first written as log lines
// write it (LogSafe: C escapes such as \" \\ \n \xff, so a job id of any bytes gives
// printable ASCII and reads the same in the log and in Prometheus), then the format's
// own escaping of `\` and `"` is applied.
std::string PrometheusLabelValue(const std::string& value);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_METRICS_TEXT_H_

// The server's figures in the Prometheus text exposition format (version 0.0.4):
// metric names with the shardcast_ prefix and base units (seconds, bytes), counters
// ending in _total, and labels of bounded cardinality (jobs and ranks as GetStatus
// lists them: at most kMaxListedJobs x kMaxListedRanks series per per-rank metric).
// The server-level families come from the table of the reply's figures
// (proto/status_fields.h); the per-dataset, per-job and per-rank families and the
// decode histogram are written here. A pure function of a snapshot: no clock, no I/O.
#ifndef SHARDCAST_SERVER_STATUS_METRICS_TEXT_H_
#define SHARDCAST_SERVER_STATUS_METRICS_TEXT_H_

#include <string>

#include "server/base/server_stats.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::server {

struct MetricsSnapshot {
  shardcast::v1::GetStatusResponse status;  // what GetStatus answers at the same moment
  DurationHistogram::Snapshot decode_time;
  // The server drains (SIGTERM): every dataset's shardcast_index_state is "draining",
  // a state the reply's DatasetStatus.State does not have.
  bool draining = false;
};

// The states shardcast_index_state takes: each dataset of status.datasets() gets one
// series per state, 1 for its current one.
inline constexpr const char* kIndexStates[] = {"indexing", "serving", "draining", "failed"};

// The exposition text, each family with # HELP and # TYPE, ending in a newline.
std::string RenderPrometheusText(const MetricsSnapshot& snapshot);

// A label value as the text format wants it. The value is first written as log lines
// write it (LogSafe: C escapes such as \" \\ \n \xff, so a job id of any bytes gives
// printable ASCII and reads the same in the log and in Prometheus), then the format's
// own escaping of `\` and `"` is applied.
std::string PrometheusLabelValue(const std::string& value);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_STATUS_METRICS_TEXT_H_

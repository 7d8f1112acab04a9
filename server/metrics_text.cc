// Prometheus text exposition of the server's figures (see metrics_text.h).
#include "server/metrics_text.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_config.h"
#include "server/log.h"

namespace shardcast::server {

namespace v1 = ::shardcast::v1;

namespace {

// One metric family: HELP and TYPE once, then its samples.
class Family {
 public:
  Family(std::string* out, const std::string& name, const char* type, const char* help)
      : out_(out), name_(name) {
    absl::StrAppend(out_, "# HELP ", name_, " ", help, "\n# TYPE ", name_, " ", type, "\n");
  }
  // `labels`: already rendered ("job=\"a\",rank=\"0\""), or empty.
  void Sample(double value, const std::string& labels = "", const char* suffix = "") {
    absl::StrAppend(out_, name_, suffix);
    if (!labels.empty()) absl::StrAppend(out_, "{", labels, "}");
    absl::StrAppend(out_, " ", FormatValue(value), "\n");
  }

 private:
  static std::string FormatValue(double value) {
    if (std::isnan(value)) return "NaN";
    if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
    // Integers exactly (counters of bytes pass 2^53 only after petabytes), the rest
    // with 15 significant digits (what a double holds for sure: 0.3 stays "0.3").
    if (value == std::floor(value) && std::fabs(value) < 9.007199254740992e15) {
      return absl::StrFormat("%.0f", value);
    }
    return absl::StrFormat("%.15g", value);
  }

  std::string* const out_;
  const std::string name_;
};

std::string Label(const char* name, const std::string& value) {
  return absl::StrCat(name, "=\"", PrometheusLabelValue(value), "\"");
}

}  // namespace

std::string PrometheusLabelValue(const std::string& value) {
  const std::string safe = LogSafe(value, kMaxJobIdLength);
  std::string out;
  out.reserve(safe.size());
  for (char c : safe) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string RenderPrometheusText(const MetricsSnapshot& snapshot) {
  const v1::GetStatusResponse& s = snapshot.status;
  std::string out;
  Family(&out, "shardcast_build_info", "gauge", "The server's version (value 1).")
      .Sample(1, Label("version", s.version()));
  Family(&out, "shardcast_uptime_seconds", "gauge", "Seconds since the server started.")
      .Sample(s.uptime_seconds());
  Family(&out, "shardcast_serving", "gauge",
         "1 while the server accepts registrations and streams (health SERVING).")
      .Sample(s.serving() ? 1 : 0);

  // Index state per dataset.
  {
    Family state(&out, "shardcast_index_state", "gauge",
                 "1 for the dataset's current index state, 0 for the others.");
    for (const DatasetMetrics& d : snapshot.datasets) {
      for (const char* name : kIndexStates) {
        state.Sample(d.state == name ? 1 : 0,
                     absl::StrCat(Label("dataset", d.name), ",", Label("state", name)));
      }
    }
    Family shards(&out, "shardcast_index_shards", "gauge", "Shards in the dataset's index.");
    for (const DatasetMetrics& d : snapshot.datasets)
      shards.Sample(d.shards, Label("dataset", d.name));
    Family samples(&out, "shardcast_index_samples", "gauge", "Samples in the dataset's index.");
    for (const DatasetMetrics& d : snapshot.datasets) {
      samples.Sample(d.samples, Label("dataset", d.name));
    }
    Family skipped(&out, "shardcast_index_skipped_samples", "gauge",
                   "Samples the index skipped (no image, bad label, ...).");
    for (const DatasetMetrics& d : snapshot.datasets) {
      skipped.Sample(d.skipped_samples, Label("dataset", d.name));
    }
    Family problems(&out, "shardcast_shard_problems", "gauge",
                    "Shards not served: skipped (left out of the index), changed (found "
                    "changed since indexing; streams that read them fail until a restart) or "
                    "unreadable (the host failed their last read: EMFILE, EACCES, EIO...).");
    // From the status reply's datasets, which count them already.
    for (const v1::DatasetStatus& d : snapshot.status.datasets()) {
      const std::string dataset = Label("dataset", d.name());
      problems.Sample(d.total_skipped_shards(),
                      absl::StrCat(dataset, ",", Label("problem", "skipped")));
      problems.Sample(d.total_changed_shards(),
                      absl::StrCat(dataset, ",", Label("problem", "changed")));
      problems.Sample(d.total_unreadable_shards(),
                      absl::StrCat(dataset, ",", Label("problem", "unreadable")));
    }
  }

  // Throughput and errors.
  Family(&out, "shardcast_images_served_total", "counter",
         "Images (valid and padding entries) in batches handed to gRPC.")
      .Sample(s.images_served());
  Family(&out, "shardcast_bytes_served_total", "counter", "Batch message bytes handed to gRPC.")
      .Sample(s.bytes_served());
  Family(&out, "shardcast_decode_errors_total", "counter",
         "Samples that failed to read or decode at serve time.")
      .Sample(s.decode_errors());
  Family(&out, "shardcast_shard_read_retries_total", "counter",
         "Shard reads the host failed (EMFILE, EACCES, EIO...) that were tried again.")
      .Sample(s.shard_read_retries());
  Family(&out, "shardcast_substitutions_total", "counter",
         "Substitute images sent in place of samples that failed.")
      .Sample(s.substitutions());
  {
    const DurationHistogram::Snapshot& h = snapshot.decode_time;
    Family decode(&out, "shardcast_decode_duration_seconds", "histogram",
                  "Read, decode and transform time of one sample.");
    int64_t cumulative = 0;
    for (size_t i = 0; i < DurationHistogram::kBounds.size(); ++i) {
      cumulative += h.counts[i];
      decode.Sample(cumulative, Label("le", absl::StrFormat("%g", DurationHistogram::kBounds[i])),
                    "_bucket");
    }
    decode.Sample(h.count, Label("le", "+Inf"), "_bucket");
    decode.Sample(h.sum_seconds, "", "_sum");
    decode.Sample(h.count, "", "_count");
  }
  Family(&out, "shardcast_stream_wait_for_batch_seconds_total", "counter",
         "Time streams waited for their next batch to be assembled (clients waiting on the "
         "server), summed over streams.")
      .Sample(s.stream_wait_for_batch_seconds());
  Family(&out, "shardcast_stream_wait_for_client_seconds_total", "counter",
         "Time written batches waited for their client to take them (the server waiting on "
         "clients), summed over streams.")
      .Sample(s.stream_wait_for_client_seconds());

  // Streams, pool and memory.
  Family(&out, "shardcast_open_streams", "gauge", "Open StreamBatches calls.")
      .Sample(s.open_streams());
  Family(&out, "shardcast_decode_queue_depth", "gauge", "Decode tasks waiting in the pool.")
      .Sample(s.queue_depth());
  Family(&out, "shardcast_decode_tasks_running", "gauge",
         "Decode tasks running on the pool's threads.")
      .Sample(s.decode_tasks_running());
  Family(&out, "shardcast_decode_threads", "gauge", "Threads of the decode pool.")
      .Sample(s.decode_threads());
  Family(&out, "shardcast_batch_memory_in_use_bytes", "gauge", "Bytes held in live batch buffers.")
      .Sample(s.memory_in_use_bytes());
  Family(&out, "shardcast_batch_memory_reserved_bytes", "gauge",
         "Bytes reserved for batch buffers under --max-batch-memory.")
      .Sample(s.batch_memory_reserved_bytes());
  Family(&out, "shardcast_batch_memory_limit_bytes", "gauge", "--max-batch-memory.")
      .Sample(s.batch_memory_limit_bytes());
  Family(&out, "shardcast_batch_memory_peak_reserved_bytes", "gauge",
         "The most bytes ever reserved for batch buffers at once.")
      .Sample(s.batch_memory_peak_reserved_bytes());
  Family(&out, "shardcast_decode_memory_in_use_bytes", "gauge",
         "Decode buffers admitted from image headers, all decode threads together.")
      .Sample(s.decode_memory_in_use_bytes());
  Family(&out, "shardcast_decode_memory_peak_bytes", "gauge",
         "The most decode-buffer bytes ever admitted at once.")
      .Sample(s.decode_memory_peak_bytes());
  Family(&out, "shardcast_decode_memory_limit_bytes", "gauge", "--max-decode-memory.")
      .Sample(s.decode_memory_limit_bytes());
  Family(&out, "shardcast_decode_memory_waits_total", "counter",
         "Decodes that waited for others to give decode memory back.")
      .Sample(s.decode_memory_waits());
  Family(&out, "shardcast_images_over_decode_memory_total", "counter",
         "Images whose decode buffers alone exceed --max-decode-memory (substituted).")
      .Sample(s.images_over_decode_memory());
  Family(&out, "shardcast_max_member_bytes", "gauge", "--max-member-bytes.")
      .Sample(s.max_member_bytes());
  Family(&out, "shardcast_images_over_member_limit_total", "counter",
         "Image members over --max-member-bytes (substituted without being read).")
      .Sample(s.images_over_member_limit());
  Family(&out, "shardcast_decode_task_exceptions_total", "counter",
         "Decode pool tasks that threw (logged; the process lives on).")
      .Sample(s.decode_task_exceptions());
  Family(&out, "shardcast_resident_memory_bytes", "gauge", "Resident set size of the server.")
      .Sample(s.rss_bytes());
  Family(&out, "shardcast_streams_refused_memory_total", "counter",
         "Streams refused because not even one batch fit --max-batch-memory.")
      .Sample(s.streams_refused_memory());
  Family(&out, "shardcast_streams_waiting_for_memory", "gauge",
         "Streams waiting (up to --admission-wait) for batch memory that ending streams free.")
      .Sample(s.streams_waiting_for_memory());
  Family(&out, "shardcast_admission_wait_seconds", "gauge", "--admission-wait.")
      .Sample(s.admission_wait_seconds());
  Family(&out, "shardcast_streams_replaced_total", "counter",
         "Streams ended by a newer stream of the same rank.")
      .Sample(s.streams_replaced());
  Family(&out, "shardcast_streams_reclaimed_idle_total", "counter",
         "Streams ended by --stream-idle-timeout.")
      .Sample(s.streams_reclaimed_idle());
  Family(&out, "shardcast_stream_idle_timeout_seconds", "gauge", "--stream-idle-timeout (0 = off).")
      .Sample(s.stream_idle_timeout_seconds());
  Family(&out, "shardcast_batches_given_back_total", "counter",
         "Prefetched batches dropped under memory pressure (assembled again later).")
      .Sample(s.batches_given_back());

  // Descriptors and connections.
  Family(&out, "shardcast_descriptor_limit", "gauge", "Soft RLIMIT_NOFILE of the server.")
      .Sample(s.descriptor_limit());
  Family(&out, "shardcast_open_descriptors", "gauge", "Descriptors the server has open.")
      .Sample(s.open_descriptors());
  Family(&out, "shardcast_max_connections", "gauge", "--max-connections (0 = no limit).")
      .Sample(s.max_connections());
  Family(&out, "shardcast_max_connections_per_peer", "gauge",
         "--max-connections-per-peer (0 = no limit).")
      .Sample(s.max_connections_per_peer());
  Family(&out, "shardcast_connections_open", "gauge", "Client connections open.")
      .Sample(s.connections_open());
  Family(&out, "shardcast_connections_refused_total", "counter",
         "Connections closed as accepted because --max-connections were open.")
      .Sample(s.connections_refused());
  Family(&out, "shardcast_listener_accepting", "gauge",
         "1 while the listener probe finds the listener accepting connections; 0: restart "
         "the server.")
      .Sample(s.listener_accepting() ? 1 : 0);

  // Jobs and ranks.
  Family(&out, "shardcast_jobs", "gauge", "Registered jobs.").Sample(s.total_jobs());
  Family(&out, "shardcast_max_jobs", "gauge", "--max-jobs (0 = no limit).").Sample(s.max_jobs());
  Family(&out, "shardcast_jobs_truncated", "gauge",
         "1 when more jobs are registered than the per-job series list (the first 100 by id).")
      .Sample(s.jobs_truncated() ? 1 : 0);
  Family(&out, "shardcast_stall_warn_seconds", "gauge", "--stall-warn (0 = off).")
      .Sample(s.stall_warn_seconds());
  Family(&out, "shardcast_stalled_ranks", "gauge",
         "Ranks flagged stalled (no batch for --stall-warn while a peer is ahead), all jobs.")
      .Sample(s.stalled_ranks());
  {
    Family ranks(&out, "shardcast_job_registered_ranks", "gauge", "Ranks registered in the job.");
    for (const v1::JobStatus& job : s.jobs())
      ranks.Sample(job.total_ranks(), Label("job", job.job_id()));
    Family world(&out, "shardcast_job_world_size", "gauge", "The job's world size.");
    for (const v1::JobStatus& job : s.jobs())
      world.Sample(job.world_size(), Label("job", job.job_id()));
    Family batch(&out, "shardcast_job_batch_size", "gauge", "Samples per batch of every rank.");
    for (const v1::JobStatus& job : s.jobs())
      batch.Sample(job.batch_size(), Label("job", job.job_id()));
    Family n(&out, "shardcast_job_batches_per_epoch", "gauge",
             "Batches every rank gets per epoch.");
    for (const v1::JobStatus& job : s.jobs()) {
      n.Sample(job.batches_per_epoch(), Label("job", job.job_id()));
    }
    Family stalled(&out, "shardcast_job_stalled_ranks", "gauge",
                   "The job's ranks flagged stalled (--stall-warn).");
    for (const v1::JobStatus& job : s.jobs())
      stalled.Sample(job.stalled_ranks(), Label("job", job.job_id()));
  }
  // Per rank: each family's samples together, as the format requires.
  const auto per_rank = [&out, &s](const std::string& name, const char* type, const char* help,
                                   double (*value)(const v1::JobStatus&, const v1::RankStatus&)) {
    Family family(&out, name, type, help);
    for (const v1::JobStatus& job : s.jobs()) {
      for (const v1::RankStatus& rank : job.ranks()) {
        family.Sample(value(job, rank), absl::StrCat(Label("job", job.job_id()), ",",
                                                     Label("rank", absl::StrCat(rank.rank()))));
      }
    }
  };
  per_rank("shardcast_rank_position_batches", "gauge",
           "The rank's next batch in the job's global order (epoch * n + batch).",
           [](const v1::JobStatus& job, const v1::RankStatus& rank) {
             return static_cast<double>(rank.epoch() * job.batches_per_epoch() + rank.next_batch());
           });
  per_rank("shardcast_rank_epoch", "gauge", "The epoch of the rank's stream.",
           [](const v1::JobStatus&, const v1::RankStatus& rank) {
             return static_cast<double>(rank.epoch());
           });
  per_rank("shardcast_rank_lag_batches", "gauge",
           "Batches the rank is behind its job's most advanced rank.",
           [](const v1::JobStatus&, const v1::RankStatus& rank) {
             return static_cast<double>(rank.lag_batches());
           });
  per_rank("shardcast_rank_seconds_since_last_batch", "gauge",
           "Seconds since the rank last took a batch (or opened its stream).",
           [](const v1::JobStatus&, const v1::RankStatus& rank) {
             return rank.seconds_since_last_batch();
           });
  per_rank(
      "shardcast_rank_stalled", "gauge", "1 while the rank is flagged stalled (--stall-warn).",
      [](const v1::JobStatus&, const v1::RankStatus& rank) { return rank.stalled() ? 1.0 : 0.0; });
  per_rank("shardcast_rank_streaming", "gauge", "1 while the rank has a stream open.",
           [](const v1::JobStatus&, const v1::RankStatus& rank) {
             return rank.streaming() ? 1.0 : 0.0;
           });
  per_rank("shardcast_rank_window_batches", "gauge",
           "Batches ready or being assembled ahead of the rank's client.",
           [](const v1::JobStatus&, const v1::RankStatus& rank) {
             return static_cast<double>(rank.window_depth());
           });
  per_rank("shardcast_rank_batches_sent_total", "counter",
           "Batches sent to the rank since it registered.",
           [](const v1::JobStatus&, const v1::RankStatus& rank) {
             return static_cast<double>(rank.batches_sent());
           });
  return out;
}

}  // namespace shardcast::server

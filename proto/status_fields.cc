// The table of the GetStatus reply's server-level figures (see status_fields.h).
#include "proto/status_fields.h"

#include <cmath>
#include <limits>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace shardcast {

namespace {

using U = StatusUnit;

constexpr StatusField Counter(const char* field, const char* metric, const char* help) {
  StatusField f;
  f.field = field;
  f.metric = metric;
  f.type = MetricType::kCounter;
  f.help = help;
  return f;
}

constexpr StatusField Gauge(const char* field, const char* metric, const char* help) {
  StatusField f = Counter(field, metric, help);
  f.type = MetricType::kGauge;
  return f;
}

// A figure /metrics leaves out; `why` says why (and what to use there instead).
constexpr StatusField NotInMetrics(const char* field, const char* why) {
  StatusField f;
  f.field = field;
  f.help = why;
  return f;
}

}  // namespace

const std::vector<StatusField>& StatusFields() {
  // clang-format off
  static const auto* fields = new std::vector<StatusField>{
      Gauge("uptime_seconds", "shardcast_uptime_seconds", "Seconds since the server started.")
          .Ctl("uptime", "", U::kSeconds),
      // ctl adds the index state (a string) to this line.
      Gauge("serving", "shardcast_serving",
            "1 while the server accepts registrations and streams (health SERVING).")
          .Ctl("serving", "", U::kYesNo),

      NotInMetrics("images_per_second",
                   "a recent rate: Prometheus derives it, rate(shardcast_images_served_total)")
          .Ctl("throughput", "images/s", U::kRate),
      NotInMetrics("bytes_per_second",
                   "a recent rate: Prometheus derives it, rate(shardcast_bytes_served_total)")
          .Ctl("throughput", "", U::kByteRate),

      Counter("images_served", "shardcast_images_served_total",
              "Images (valid and padding entries) in batches handed to gRPC.")
          .Ctl("served", "images", U::kCount),
      Counter("bytes_served", "shardcast_bytes_served_total", "Batch message bytes handed to gRPC.")
          .Ctl("served", "", U::kBytes),

      Gauge("open_streams", "shardcast_open_streams", "Open StreamBatches calls.")
          .Ctl("streams", "open", U::kCount),
      Counter("streams_refused_memory", "shardcast_streams_refused_memory_total",
              "Streams refused because not even one batch fit --max-batch-memory.")
          .Ctl("streams", "refused (memory)", U::kCount),
      Gauge("streams_waiting_for_memory", "shardcast_streams_waiting_for_memory",
            "Streams waiting (up to --admission-wait) for batch memory that ending streams free.")
          .Ctl("streams", "waiting for memory", U::kCount),
      Counter("streams_replaced", "shardcast_streams_replaced_total",
              "Streams ended by a newer stream of the same rank.")
          .Ctl("streams", "replaced", U::kCount),
      Counter("streams_reclaimed_idle", "shardcast_streams_reclaimed_idle_total",
              "Streams ended by --stream-idle-timeout.")
          .Ctl("streams", "reclaimed idle", U::kCount),
      Counter("batches_given_back", "shardcast_batches_given_back_total",
              "Prefetched batches dropped under memory pressure (assembled again later).")
          .Ctl("streams", "prefetched batches given back", U::kCount),
      Gauge("stream_idle_timeout_seconds", "shardcast_stream_idle_timeout_seconds",
            "--stream-idle-timeout (0 = off).")
          .Ctl("streams", "--stream-idle-timeout {}", U::kSeconds)
          .IfZero("--stream-idle-timeout off"),
      Gauge("admission_wait_seconds", "shardcast_admission_wait_seconds",
            "--admission-wait (0 = a stream that does not fit is refused at once).")
          .Ctl("streams", "--admission-wait {}", U::kSeconds)
          .IfZero("--admission-wait off"),

      Counter("stream_wait_for_batch_seconds", "shardcast_stream_wait_for_batch_seconds_total",
              "Time streams waited for their next batch to be assembled (clients waiting on the "
              "server), summed over streams.")
          .Ctl("streams waited", "for batches (clients on the server)", U::kSeconds),
      Counter("stream_wait_for_client_seconds", "shardcast_stream_wait_for_client_seconds_total",
              "Time written batches waited for their client to take them (the server waiting on "
              "clients), summed over streams.")
          .Ctl("streams waited", "for clients (the server on them)", U::kSeconds),

      Gauge("stalled_ranks", "shardcast_stalled_ranks",
            "Ranks flagged stalled (no batch for --stall-warn while a peer is ahead), all jobs.")
          .Ctl("stall warning", "stalled ranks", U::kCount)
          .Alarm("no batch for --stall-warn while a peer is ahead: a DDP hang in the making"),
      Gauge("stall_warn_seconds", "shardcast_stall_warn_seconds", "--stall-warn (0 = off).")
          .Ctl("stall warning", "--stall-warn {}", U::kSeconds)
          .IfZero("--stall-warn off"),

      Gauge("total_jobs", "shardcast_jobs", "Registered jobs.")
          .Ctl("jobs", "registered", U::kCount),
      Gauge("max_jobs", "shardcast_max_jobs", "--max-jobs (0 = no limit).")
          .Ctl("jobs", "--max-jobs {}", U::kCount)
          .IfZero("--max-jobs off"),
      Gauge("jobs_truncated", "shardcast_jobs_truncated",
            "1 when more jobs are registered than the per-job series list (the first 100 by id).")
          .Ctl("jobs", "list truncated: {}", U::kYesNo)
          .IfZero(""),

      Gauge("decode_threads", "shardcast_decode_threads", "Threads of the decode pool.")
          .Ctl("decode", "threads", U::kCount),
      Gauge("queue_depth", "shardcast_decode_queue_depth", "Decode tasks waiting in the pool.")
          .Ctl("decode", "tasks waiting", U::kCount),
      Gauge("decode_tasks_running", "shardcast_decode_tasks_running",
            "Decode tasks running on the pool's threads.")
          .Ctl("decode", "running", U::kCount),
      Counter("decode_errors", "shardcast_decode_errors_total",
              "Samples that failed to read or decode at serve time.")
          .Ctl("decode", "errors", U::kCount),
      Counter("substitutions", "shardcast_substitutions_total",
              "Substitute images sent in place of samples that failed.")
          .Ctl("decode", "substitutions", U::kCount),
      Counter("images_unsupported_format", "shardcast_images_unsupported_format_total",
              "Images in a format PIL opens that shardcast does not decode (GIF, BMP, TIFF, "
              "animated WebP...; substituted).")
          .Ctl("decode", "unsupported formats", U::kCount),
      Counter("decode_task_exceptions", "shardcast_decode_task_exceptions_total",
              "Decode pool tasks that threw (logged; the process lives on).")
          .Ctl("decode", "task exceptions", U::kCount)
          .Alarm("see the server log"),

      Gauge("memory_in_use_bytes", "shardcast_batch_memory_in_use_bytes",
            "Bytes held in live batch buffers.")
          .Ctl("batch memory", "in buffers", U::kBytes),
      Gauge("batch_memory_limit_bytes", "shardcast_batch_memory_limit_bytes", "--max-batch-memory.")
          .Ctl("batch memory", "--max-batch-memory {}", U::kBytes)
          .GatesRest(),
      Gauge("batch_memory_reserved_bytes", "shardcast_batch_memory_reserved_bytes",
            "Bytes reserved for batch buffers under --max-batch-memory.")
          .Ctl("batch memory", "reserved", U::kBytes),
      Gauge("batch_memory_peak_reserved_bytes", "shardcast_batch_memory_peak_reserved_bytes",
            "The most bytes ever reserved for batch buffers at once.")
          .Ctl("batch memory", "peak reserved", U::kBytes),

      Gauge("decode_memory_limit_bytes", "shardcast_decode_memory_limit_bytes",
            "--max-decode-memory.")
          .Ctl("decode memory", "--max-decode-memory {}", U::kBytes)
          .GatesRest(),
      Gauge("decode_memory_in_use_bytes", "shardcast_decode_memory_in_use_bytes",
            "Decode buffers admitted from image headers, all decode threads together.")
          .Ctl("decode memory", "in use", U::kBytes),
      Gauge("decode_memory_peak_bytes", "shardcast_decode_memory_peak_bytes",
            "The most decode-buffer bytes ever admitted at once.")
          .Ctl("decode memory", "peak", U::kBytes),
      Counter("decode_memory_waits", "shardcast_decode_memory_waits_total",
              "Decodes that waited for others to give decode memory back.")
          .Ctl("decode memory", "decodes waited", U::kCount),
      Counter("images_over_decode_memory", "shardcast_images_over_decode_memory_total",
              "Images whose decode buffers alone exceed --max-decode-memory (substituted).")
          .Ctl("decode memory", "images over it (substituted)", U::kCount),

      Gauge("max_member_bytes", "shardcast_max_member_bytes", "--max-member-bytes.")
          .Ctl("member limit", "--max-member-bytes {}", U::kBytes)
          .GatesRest(),
      Counter("images_over_member_limit", "shardcast_images_over_member_limit_total",
              "Image members over --max-member-bytes (substituted without being read).")
          .Ctl("member limit", "images over it (substituted unread)", U::kCount),

      Gauge("rss_bytes", "shardcast_resident_memory_bytes", "Resident set size of the server.")
          .Ctl("RSS", "", U::kBytes),

      NotInMetrics("total_skipped_shards",
                   "per dataset: shardcast_shard_problems{dataset=...,problem=\"skipped\"}")
          .Ctl("shard problems", "skipped", U::kCount),
      NotInMetrics("total_changed_shards",
                   "per dataset: shardcast_shard_problems{dataset=...,problem=\"changed\"}")
          .Ctl("shard problems", "changed", U::kCount)
          .Alarm("streams reading them fail; restart to re-index"),
      NotInMetrics("total_unreadable_shards",
                   "per dataset: shardcast_shard_problems{dataset=...,problem=\"unreadable\"}")
          .Ctl("shard problems", "unreadable (errors of the host)", U::kCount),
      Counter("shard_read_retries", "shardcast_shard_read_retries_total",
              "Shard reads the host failed (EMFILE, EACCES, EIO...) that were tried again.")
          .Ctl("shard problems", "reads retried", U::kCount),

      Counter("remote_requests", "shardcast_remote_requests_total",
              "HTTP requests to object storage (retries included).")
          .Ctl("object storage", "requests", U::kCount),
      Counter("remote_bytes", "shardcast_remote_bytes_total",
              "Body bytes received from object storage.")
          .Ctl("object storage", "received", U::kBytes),
      Counter("remote_retries", "shardcast_remote_retries_total",
              "Attempts after a request's first (5xx, Retry-After, cut bodies, trickles).")
          .Ctl("object storage", "retries", U::kCount),
      Counter("remote_failures", "shardcast_remote_failures_total",
              "Requests to object storage that failed for good.")
          .Ctl("object storage", "failed", U::kCount),
      Counter("remote_requests_ok", "shardcast_remote_requests_ok_total",
              "Requests to object storage that succeeded (the count of the latency sum).")
          .Ctl("object storage", "succeeded", U::kCount),
      Counter("remote_fetch_seconds", "shardcast_remote_fetch_seconds_total",
              "Time the successful requests took, first attempt to last byte (sum).")
          .Ctl("object storage", "time in requests", U::kSeconds),
      Gauge("remote_connections_in_use", "shardcast_remote_connections_in_use",
            "Requests to object storage in flight now.")
          .Ctl("object storage", "in flight", U::kCount),
      Counter("read_ahead_members", "shardcast_read_ahead_members_total",
              "Members of the plan's next batches announced for fetching ahead.")
          .Ctl("read-ahead", "members", U::kCount),
      Counter("read_ahead_requests", "shardcast_read_ahead_requests_total",
              "Coalesced requests the announced members became.")
          .Ctl("read-ahead", "requests", U::kCount),
      Counter("read_ahead_hits", "shardcast_read_ahead_hits_total",
              "Reads served by read-ahead.")
          .Ctl("read-ahead", "hits", U::kCount),
      Counter("read_ahead_dropped", "shardcast_read_ahead_dropped_total",
              "Members not fetched ahead: --remote-read-ahead-memory was held.")
          .Ctl("read-ahead", "dropped", U::kCount),
      Counter("remote_direct_reads", "shardcast_remote_direct_reads_total",
              "Reads of remote members that fetched on demand (no read-ahead, no cache).")
          .Ctl("read-ahead", "on-demand reads", U::kCount),
      Gauge("read_ahead_bytes", "shardcast_read_ahead_bytes",
            "Memory held by members fetched ahead and not yet read.")
          .Ctl("read-ahead", "held", U::kBytes),
      Gauge("cache_limit_bytes", "shardcast_cache_limit_bytes", "--cache-size (0 = no cache).")
          .Ctl("disk cache", "--cache-size {}", U::kBytes)
          .IfZero("no --cache-dir")
          .GatesRest(),
      Gauge("cache_bytes", "shardcast_cache_bytes", "Bytes held by the disk cache.")
          .Ctl("disk cache", "held", U::kBytes),
      Counter("cache_hits", "shardcast_cache_hits_total", "Reads served by the disk cache.")
          .Ctl("disk cache", "hits", U::kCount),
      Counter("cache_misses", "shardcast_cache_misses_total", "Reads the disk cache missed.")
          .Ctl("disk cache", "misses", U::kCount),
      Counter("cache_evictions", "shardcast_cache_evictions_total",
              "Entries the disk cache dropped to stay within --cache-size.")
          .Ctl("disk cache", "evicted", U::kCount),
      Counter("cache_write_errors", "shardcast_cache_write_errors_total",
              "Writes to the disk cache that failed (disk full?); the reads succeeded.")
          .Ctl("disk cache", "write errors", U::kCount),
      Gauge("index_memory_limit_bytes", "shardcast_index_memory_limit_bytes",
            "--index-memory, the bound on each dataset's shard tables read back from the "
            "index cache (0 = every sample kept in memory).")
          .Ctl("index tables", "--index-memory {}", U::kBytes)
          .IfZero("samples in memory")
          .GatesRest(),
      Gauge("index_memory_bytes", "shardcast_index_memory_bytes",
            "Memory held by shard tables read back from the index cache.")
          .Ctl("index tables", "held", U::kBytes),
      Counter("index_table_hits", "shardcast_index_table_hits_total",
              "Sample lookups whose shard table was in memory.")
          .Ctl("index tables", "hits", U::kCount),
      Counter("index_table_misses", "shardcast_index_table_misses_total",
              "Sample lookups that read their shard's table from the index cache.")
          .Ctl("index tables", "misses", U::kCount),
      Counter("index_table_loads", "shardcast_index_table_loads_total",
              "Shard tables read from the index cache (misses and the read-ahead).")
          .Ctl("index tables", "loads", U::kCount),
      Counter("index_table_load_failures", "shardcast_index_table_load_failures_total",
              "Shard table reads that failed or failed their checksum (host errors: "
              "retried, then the batch fails).")
          .Ctl("index tables", "load failures", U::kCount),

      Gauge("connections_open", "shardcast_connections_open", "Client connections open.")
          .Ctl("connections", "open", U::kCount),
      Counter("connections_refused", "shardcast_connections_refused_total",
              "Connections closed as accepted because --max-connections were open.")
          .Ctl("connections", "refused", U::kCount),
      Gauge("max_connections", "shardcast_max_connections", "--max-connections (0 = no limit).")
          .Ctl("connections", "--max-connections {}", U::kCount)
          .IfZero("--max-connections off"),
      Gauge("max_connections_per_peer", "shardcast_max_connections_per_peer",
            "--max-connections-per-peer (0 = no limit).")
          .Ctl("connections", "--max-connections-per-peer {}", U::kCount)
          .IfZero("--max-connections-per-peer off"),
      Gauge("listener_accepting", "shardcast_listener_accepting",
            "1 while the listener probe finds the listener accepting connections; 0: restart "
            "the server.")
          .Ctl("connections", "listener accepting: {}", U::kYesNo)
          .Alarm("restart the server"),

      Gauge("open_descriptors", "shardcast_open_descriptors", "Descriptors the server has open.")
          .Ctl("descriptors", "open", U::kCount),
      Gauge("descriptor_limit", "shardcast_descriptor_limit", "Soft RLIMIT_NOFILE of the server.")
          .Ctl("descriptors", "soft limit (RLIMIT_NOFILE)", U::kCount),
  };
  // clang-format on
  return *fields;
}

const std::vector<StatusFieldElsewhere>& StatusFieldsRenderedElsewhere() {
  static const auto* elsewhere = new std::vector<StatusFieldElsewhere>{
      // Text, not figures.
      {"version", "/metrics: shardcast_build_info{version=...}; ctl: the `server` line"},
      {"index_state",
       "/metrics: shardcast_index_state{dataset=...,state=...}; ctl: the `serving` line"},
      // The single-dataset fields: the dataset "default" (or the first), which /metrics
      // has per dataset (shardcast_index_*{dataset=...}) and ctl prints in its own lines
      // above the table's (and per dataset in its datasets table).
      {"shards_dir", "ctl: `shards dir`"},
      {"index_fingerprint", "ctl: `index`"},
      {"num_shards", "/metrics: shardcast_index_shards; ctl: `shards/samples`"},
      {"num_samples", "/metrics: shardcast_index_samples; ctl: `shards/samples`"},
      {"num_classes", "ctl: `classes`; a property of the data, not in /metrics"},
      {"skipped_samples", "/metrics: shardcast_index_skipped_samples; ctl: `skipped samples`"},
      // The bounds of the reply's own lists: they shape the reply, they measure nothing.
      {"max_listed_jobs", "ctl: the jobs heading when the list is cut"},
      {"max_listed_ranks", "ctl: a job's heading says how many ranks are listed"},
      {"max_listed_shard_problems", "ctl: a shard problem list's heading when it is cut"},
  };
  return *elsewhere;
}

const google::protobuf::FieldDescriptor* StatusFieldDescriptor(const StatusField& row) {
  return shardcast::v1::GetStatusResponse::descriptor()->FindFieldByName(row.field);
}

StatusFieldValue ReadStatusField(const shardcast::v1::GetStatusResponse& status,
                                 const StatusField& row) {
  using google::protobuf::FieldDescriptor;
  StatusFieldValue value;
  value.number = std::numeric_limits<double>::quiet_NaN();
  const FieldDescriptor* field = StatusFieldDescriptor(row);
  if (field == nullptr || field->is_repeated()) return value;
  const google::protobuf::Reflection* reflection = status.GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      value.integer = reflection->GetInt32(status, field);
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      value.integer = reflection->GetInt64(status, field);
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      value.integer = reflection->GetUInt32(status, field);
      break;
    case FieldDescriptor::CPPTYPE_UINT64: {
      const uint64_t u = reflection->GetUInt64(status, field);
      value.number = static_cast<double>(u);
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        value.integer = static_cast<int64_t>(u);
      }
      return value;
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      value.integer = reflection->GetBool(status, field) ? 1 : 0;
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      value.number = reflection->GetDouble(status, field);
      return value;
    case FieldDescriptor::CPPTYPE_FLOAT:
      value.number = reflection->GetFloat(status, field);
      return value;
    case FieldDescriptor::CPPTYPE_ENUM:
    case FieldDescriptor::CPPTYPE_STRING:
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return value;
  }
  value.number = static_cast<double>(*value.integer);
  return value;
}

const char* DatasetStateName(shardcast::v1::DatasetStatus::State state) {
  switch (state) {
    case shardcast::v1::DatasetStatus::INDEXING:
      return "indexing";
    case shardcast::v1::DatasetStatus::SERVING:
      return "serving";
    case shardcast::v1::DatasetStatus::FAILED:
      return "failed";
    default:
      return "unknown";
  }
}

}  // namespace shardcast

// shardcast-server's flags (see server_flags.h).
#include "server/server_flags.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/flags/flags.h"
#include "common/flags/job_flags.h"
#include "common/plan/job_config.h"
#include "common/remote/store_table.h"
#include "server/base/memory_limit.h"
#include "server/net/host_port.h"
#include "server/serving/dataset_registry.h"

namespace shardcast::server {

namespace {

LogLevel LogLevelNamed(const std::string& name) {
  if (name == "warning") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

// What is served and how: the datasets, the listener, decoding, the index.
void AddServingFlags(FlagSet& flags, ServerOptions& o) {
  flags.String({{"--shards"},
                "DIR|URL",
                "directory holding the .tar/.tar.gz shards, served as the dataset \"default\"\n"
                "(what a trainer gets without --dataset); needed unless --dataset is given.\n"
                "Or shards in object storage: s3://bucket/prefix/, or http(s) URLs in brace\n"
                "notation, https://host/d/shard-{000000..000127}.tar (docs/server.md)"},
               &o.shards_dir);
  flags.Add({{"--dataset"},
             "NAME=DIR|URL",
             "also serve the shards in DIR (or at URL) as the dataset NAME (repeatable; e.g.\n"
             "--dataset val=/data/val). A trainer picks one with --dataset NAME /\n"
             "--val-dataset NAME; each is indexed on its own and shown by name in status",
             "none",
             /*repeatable=*/true},
            1, [&o](const std::string& flag, const std::vector<std::string>& values) {
              const size_t eq = values[0].find('=');
              if (eq == std::string::npos) {
                return absl::InvalidArgumentError(
                    absl::StrCat(flag, " takes NAME=DIR, got '", values[0], "'"));
              }
              o.datasets.push_back({values[0].substr(0, eq), values[0].substr(eq + 1)});
              return absl::OkStatus();
            });
  flags.String({{"--listen"},
                "HOST:PORT",
                "address to listen on; port 0 picks a free port\n"
                "(printed on stdout); unix:PATH for a socket file\n"
                "(mode 0660: its owner and group may connect)"},
               &o.listen_address);
  flags.Int({{"--decode-threads"}, "N", "decode pool threads; 0 = all cores"}, &o.decode_threads,
            0);
  flags.Int({{"--prefetch"},
             "N",
             "batches assembled ahead of each stream's client (per-stream memory bound)"},
            &o.prefetch, 1);
  flags.String({{"--index-cache-dir"},
                "DIR",
                "directory for the dataset index cache (never inside --shards);\n"
                "empty = no cache"},
               &o.index_cache_dir, /*allow_empty=*/true);
  flags.String({{"--label-field"},
                "F",
                "field of a sample's .json holding its integer label (when it has no .cls)"},
               &o.label_field);
  flags.Int({{"--max-classes"},
             "N",
             "labels must be in [0, N): a sample with another label is skipped (listed by\n"
             "shardcast-ctl inspect, counted in status), and an info.json \"num_classes\"\n"
             "above N is ignored. num_classes sizes the trainer's last layer"},
            &o.max_classes, 1);
  flags.Size({{"--gzip-index-memory"},
              "SIZE",
              "memory for the seek indexes of a dataset's .tar.gz shards, local or\n"
              "remote (about 1/8 of a shard's uncompressed size each, built on its\n"
              "first read); beyond it the least recently used are dropped and rebuilt\n"
              "when needed"},
             &o.gzip_index_memory_bytes);
  flags.Size({{"--index-memory"},
              "SIZE",
              "memory for the shard tables read back from the index cache: with\n"
              "--index-cache-dir, a dataset keeps only per-shard counts in memory and\n"
              "reads a shard's keys, labels and member offsets (about 20 bytes a sample)\n"
              "from its cache file when its samples are served, the least recently used\n"
              "dropped beyond this; 0 keeps every sample in memory"},
             &o.index_memory_bytes);
  flags.Size({{"--max-message-size"},
              "SIZE",
              "largest Batch message (at least 1MiB); jobs whose batches exceed it are\n"
              "refused"},
             &o.max_message_bytes);
}

// Shards in object storage: the store, the requests, read-ahead and the disk cache.
void AddRemoteFlags(FlagSet& flags, ServerOptions& o) {
  RemoteStorageOptions& r = o.remote;
  remote::AddStoreFlags(&flags, &r.stores);
  flags.Int({{"--remote-connections"},
             "N",
             "requests to object storage in flight at once (kept-alive connections)"},
            &r.fetch.max_connections, 1, 1024);
  flags.Duration({{"--remote-timeout"},
                  "DURATION",
                  "deadline of one request to object storage, retries and backoff included\n"
                  "(of a whole object streamed: the longest time without a byte); then the\n"
                  "read fails like a failing disk (retried for --shard-read-retry)"},
                 &r.fetch.request_deadline);
  flags.String({{"--remote-ca-file"},
                "FILE",
                "CA certificates (PEM) to verify https stores with, instead of the system's"},
               &r.fetch.ca_file, /*allow_empty=*/true);
  flags.Add(
      {{"--remote-insecure"}, "", "do not verify https stores' certificates (testing only)", "off"},
      0, [&r](const std::string&, const std::vector<std::string>&) {
        r.fetch.verify_tls = false;
        return absl::OkStatus();
      });
  flags.Int({{"--remote-read-ahead"},
             "N",
             "batches of each stream's plan whose bytes are fetched ahead of the batches\n"
             "being decoded (0 = none)"},
            &o.read_ahead_batches, 0, 1000);
  flags.Size({{"--remote-read-ahead-memory"},
              "SIZE",
              "memory for bytes fetched ahead and not yet read, all streams together"},
             &r.read.read_ahead_memory_bytes);
  flags.String({{"--cache-dir"},
                "DIR",
                "disk cache of bytes read from object storage (kept across restarts, in\n"
                "DIR/shardcast-bytes: nothing else in DIR is touched);\n"
                "empty = none: every epoch reads the store again"},
               &r.cache_dir, /*allow_empty=*/true);
  flags.Size(
      {{"--cache-size"}, "SIZE", "the most the disk cache holds; least recently used go first"},
      &r.cache_size_bytes);
}

// How long a drain, a job and a job that never streamed last.
void AddLifetimeFlags(FlagSet& flags, ServerOptions& o) {
  flags.Duration({{"--grace-period"},
                  "DURATION",
                  "on SIGTERM/SIGINT: how long open streams may go on before they are\n"
                  "cancelled"},
                 &o.grace_period);
  flags.Duration({{"--job-ttl"},
                  "DURATION",
                  "drop a job once none of its ranks has had a stream open for this long "
                  "(0 = never); a rank that comes back re-registers it"},
                 &o.job_ttl);
  flags.Duration({{"--unstreamed-job-ttl"},
                  "DURATION",
                  "drop a job none of whose ranks ever opened a stream once it has been\n"
                  "idle this long (0 = only --job-ttl): registrations that never stream\n"
                  "cannot hold the job table"},
                 &o.unstreamed_job_ttl);
}

// What all clients together, or one of them, may take: memory, time, descriptors,
// connections, jobs.
void AddResourceFlags(FlagSet& flags, const DescriptorLimit& descriptors, ServerOptions& o) {
  // The default budget is computed here so that --help shows the figure and its source.
  const MemoryLimit available = AvailableMemory();
  o.max_batch_memory_bytes = DefaultBatchMemoryBytes(available);
  flags.Size({{"--max-batch-memory"},
              "SIZE",
              "batch buffers in flight, all streams together, never exceed this. Each\n"
              "stream is guaranteed one batch (a stream that cannot get one is refused\n"
              "with RESOURCE_EXHAUSTED); prefetch beyond it only while the budget allows.\n"
              "Default: half of the memory available to the process (the cgroup's\n"
              "memory.max, e.g. docker -m or systemd MemoryMax=, else physical memory)",
              absl::StrFormat("%s: half of %.1fGiB, %s", FormatFlagSize(o.max_batch_memory_bytes),
                              static_cast<double>(available.bytes) / (int64_t{1} << 30),
                              available.source)},
             &o.max_batch_memory_bytes);
  o.max_decode_memory_bytes = DefaultDecodeMemoryBytes(available);
  flags.Duration({{"--admission-wait"},
                  "DURATION",
                  "a stream whose first batch does not fit --max-batch-memory waits this long\n"
                  "for memory that ending streams give back (in a queue, first come first\n"
                  "served), then is refused RESOURCE_EXHAUSTED (0 = refuse at once)"},
                 &o.admission_wait);
  flags.Size({{"--max-decode-memory"},
              "SIZE",
              "decode buffers of the images being decoded, all decode threads together,\n"
              "never exceed this; the size is read from the image header before anything\n"
              "is allocated. An image waits until its buffer fits; one that needs more than\n"
              "SIZE alone is substituted (counted in status). Default: an eighth of the\n"
              "memory available to the process, at most 4GiB",
              absl::StrFormat("%s: an eighth of %.1fGiB", FormatFlagSize(o.max_decode_memory_bytes),
                              static_cast<double>(available.bytes) / (int64_t{1} << 30))},
             &o.max_decode_memory_bytes);
  flags.Duration({{"--shard-read-retry"},
                  "DURATION",
                  "how long a shard read that fails with an error of the host (EMFILE,\n"
                  "EACCES, EIO...: not of the data) is retried before the stream fails\n"
                  "UNAVAILABLE naming the shard and the error (never a substitute)"},
                 &o.shard_read_retry);
  flags.Size({{"--max-member-bytes"},
              "SIZE",
              "an image member larger than this is substituted without being read\n"
              "(counted in status)"},
             &o.max_member_bytes);
  flags.Duration({{"--stream-idle-timeout"},
                  "DURATION",
                  "cancel a stream whose client has not taken a batch for this long and free\n"
                  "its memory (0 = never); a training step is far shorter"},
                 &o.stream_idle_timeout);
  const DescriptorShares shares = DescriptorBudget(descriptors.soft, AcceptQueueLimit());
  o.accept_backlog = shares.accept_backlog;
  o.max_connections = shares.max_connections;
  o.metrics_max_connections = shares.metrics_connections;
  flags.Int64({{"--max-connections"},
               "N",
               "connections open at once; one more is closed as it is accepted (its client\n"
               "sees UNAVAILABLE and retries), so connections cannot take the descriptors\n"
               "the listener needs (0 = no limit). Default: the descriptor limit less the\n"
               "accept queue (a quarter of what connections share, at most\n"
               "net.core.somaxconn), the /metrics listener's share and 64 (half a limit\n"
               "under 128) for the server's own files",
               absl::StrFormat("%d: of %d descriptors, %d queued", o.max_connections,
                               descriptors.soft, o.accept_backlog)},
              &o.max_connections, 0);
  flags.Int64({{"--max-connections-per-peer"},
               "N",
               "of those, connections from one IP address (every unix-socket client is one\n"
               "peer), so that one host cannot take them all (0 = no limit). Default: a\n"
               "quarter of --max-connections, at least 16",
               "a quarter of --max-connections"},
              &o.max_connections_per_peer, 0);
  flags.Duration({{"--listener-probe-interval"},
                  "DURATION",
                  "how often the server connects to its own listener to check that it still\n"
                  "accepts; two failed checks in a row turn health NOT_SERVING, then the\n"
                  "server drains and exits 75 for its supervisor to restart it (0 = never)"},
                 &o.listener_probe_interval);
  flags.Int({{"--max-jobs"},
             "N",
             "jobs registered at once; Register of one more job id is refused with\n"
             "RESOURCE_EXHAUSTED (expired jobs are dropped first; 0 = no limit)"},
            &o.max_jobs, 0);
  flags.Int({{"--max-unstreamed-jobs-per-peer"},
             "N",
             "jobs one peer (client address without its port; all unix-socket clients\n"
             "are one) may hold that none of whose ranks opened a stream yet; its next\n"
             "new job id is refused with RESOURCE_EXHAUSTED, while ranks joining a job\n"
             "already registered are not counted (0 = no limit)"},
            &o.max_unstreamed_jobs_per_peer, 0);
}

void AddMonitoringFlags(FlagSet& flags, ServerOptions& o) {
  flags.String({{"--metrics-listen"},
                "HOST:PORT",
                "serve Prometheus metrics on http://HOST:PORT/metrics and the status page\n"
                "(HTML) on http://HOST:PORT/ (port 0 = a free port, printed on stdout).\n"
                "Off by default: it is one more port, plain HTTP, and shows job ids and\n"
                "progress to whoever reaches it (as GetStatus does); with --auth-token-file\n"
                "it requires the same bearer tokens"},
               &o.metrics_listen_address, /*allow_empty=*/true);
  flags.String({{"--health-listen"},
                "HOST:PORT",
                "also answer grpc.health.v1 (and nothing else) on this address, in\n"
                "plaintext whatever --tls-cert says: for probes that speak neither TLS nor\n"
                "tokens, e.g. Kubernetes' grpc probes (port 0 = any free port)",
                "off"},
               &o.health_listen_address, /*allow_empty=*/true);
  flags.Duration({{"--stall-warn"},
                  "DURATION",
                  "DDP-hang early warning: a rank that has taken no batch for this long while\n"
                  "another rank of its job is ahead is logged once and flagged in status and\n"
                  "metrics until it takes a batch (0 = off)"},
                 &o.stall_warn);
}

void AddSecurityFlags(FlagSet& flags, ServerOptions& o) {
  flags.String({{"--tls-cert"},
                "FILE",
                "serve TLS with this PEM certificate chain (needs --tls-key); empty = plaintext"},
               &o.tls_cert_file, /*allow_empty=*/true);
  flags.String({{"--tls-key"}, "FILE", "PEM private key of --tls-cert"}, &o.tls_key_file,
               /*allow_empty=*/true);
  flags.String({{"--tls-client-ca"},
                "FILE",
                "mutual TLS: clients must present a certificate signed by this PEM CA"},
               &o.tls_client_ca_file, /*allow_empty=*/true);
  flags.String({{"--auth-token-file"},
                "FILE",
                "require 'authorization: Bearer <token>' on Register, StreamBatches and "
                "GetStatus; one accepted token a line ('#' comments), re-read on SIGHUP. "
                "Health stays open. Without TLS the tokens cross the network in clear"},
               &o.auth_token_file, /*allow_empty=*/true);
  flags.Bool({{"--reflection"},
              "",
              "offer grpc.reflection (grpcurl, grpc_cli). Off by default: it lets any peer "
              "that reaches the port list and describe the whole API"},
             &o.reflection);
}

void AddBenchmarkFlags(FlagSet& flags, ServerOptions& o) {
  flags.Bool({{"--bench-only-resend-first-batch"},
              "",
              "every stream re-sends its first batch, stamped with each batch's index\n"
              "(measures the wire and the clients without decode; clients receive wrong\n"
              "data). Never use for training."},
             &o.bench_only_resend_first_batch);
}

// The checks the flags' own parsers cannot make.
absl::Status CheckOptions(const ServerOptions& o) {
  if (absl::Status s = DatasetsToServe(o).status(); !s.ok()) return s;
  // The listen addresses are checked here, not by the listener: gRPC and getaddrinfo
  // take a port above 65535 modulo 2^16 and would listen where nobody looks.
  const bool unix_socket = absl::StartsWith(o.listen_address, "unix:") ||
                           absl::StartsWith(o.listen_address, "unix-abstract:");
  for (const auto& [flag, address] :
       {std::pair<const char*, std::string>{"--listen", unix_socket ? "" : o.listen_address},
        {"--metrics-listen", o.metrics_listen_address},
        {"--health-listen", o.health_listen_address}}) {
    if (address.empty()) continue;
    if (absl::Status s = SplitHostPort(address).status(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": ", s.message()));
    }
  }
  if (o.max_message_bytes < (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("--max-message-size must be at least 1MiB, got ",
                                                   FormatFlagSize(o.max_message_bytes)));
  }
  if (o.max_batch_memory_bytes <= 0) {
    return absl::InvalidArgumentError("--max-batch-memory must be more than 0");
  }
  if (o.max_decode_memory_bytes <= 0) {
    return absl::InvalidArgumentError("--max-decode-memory must be more than 0");
  }
  if (o.max_member_bytes <= 0) {
    return absl::InvalidArgumentError("--max-member-bytes must be more than 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseServerCommandLine(int argc, char** argv, ServerCommandLine* cl) {
  ServerOptions& o = cl->options;
  o.listen_address = "127.0.0.1:50051";
  const JobConfig built_in = DefaultJobConfig();
  JobOverrides job;
  std::string log_level = "info";

  FlagSet flags("shardcast-server");
  AddServingFlags(flags, o);
  AddLifetimeFlags(flags, o);
  AddResourceFlags(flags, cl->descriptors, o);
  flags.Choice({{"--log-level"}, "", "lowest level logged"}, {"info", "warning", "error"},
               &log_level);
  flags.Bool({{"--version"}, "", "print the version and exit"}, &cl->version);
  flags.Section("Object storage (docs/server.md, \"Shards in object storage\"):");
  AddRemoteFlags(flags, o);
  flags.Section("Monitoring (docs/server.md, \"Metrics\"):");
  AddMonitoringFlags(flags, o);
  flags.Section("Security (docs/server.md):");
  AddSecurityFlags(flags, o);
  flags.Section("Job defaults (for what a RegisterRequest leaves unset):");
  AddJobFlags(&flags, built_in, &job);
  // Server only: a trainer says where it decodes with its own flag (--decode).
  flags.Add({{"--delivery"},
             absl::StrJoin(ImageDeliveryNames(), "|"),
             "server: batches carry decoded pixels; encoded: each image as stored with the\n"
             "crop the transform makes of it, for the trainer to decode (same samples, same\n"
             "crops; a job without images ignores it)",
             ImageDeliveryName(built_in.delivery)},
            1, EnumFlag(&ParseImageDelivery, &job.delivery));
  bool dct_scaling = built_in.transform.dct_scaling;
  flags.Bool({{"--dct-scaling"},
              "",
              "every job: decode JPEGs at 1/2, 1/4 or 1/8 scale where the crop still gets\n"
              "enough pixels (much faster on images far above the crop size). Off by\n"
              "default: those pixels differ from torchvision's (up to 44 levels at sharp\n"
              "edges, docs/BENCHMARKS.md)"},
             &dct_scaling);
  flags.Bool({{"--lossless-cut"},
              "",
              "encoded delivery, random crops: send each JPEG cut losslessly to the part its\n"
              "crop reads (about 40% fewer bytes on the wire, the same pixels) at a CPU cost\n"
              "above a full decode's; for a network, not a CPU, that is the limit\n"
              "(docs/BENCHMARKS.md, \"Encoded delivery\")"},
             &o.lossless_cut);
  flags.Section("Benchmarks only:");
  AddBenchmarkFlags(flags, o);

  o.max_connections_per_peer = -1;  // unset: derived from --max-connections below
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return s;
  // The /metrics listener's share of one peer: a quarter, so a host that holds all it
  // may leaves the others (Prometheus, a browser) three quarters.
  o.metrics_max_connections_per_peer = std::max<int64_t>(1, o.metrics_max_connections / 4);
  if (o.max_connections_per_peer < 0) {
    o.max_connections_per_peer = DefaultMaxConnectionsPerPeer(o.max_connections);
  }
  cl->help = flags.help_requested();
  if (cl->help) cl->help_text = flags.Help();
  if (cl->help || cl->version) return absl::OkStatus();
  if (absl::Status s = CheckOptions(o); !s.ok()) return s;
  o.defaults = ApplyOverrides(job, built_in);
  // Not a RegisterRequest field: the server decides how it decodes, for every job.
  o.defaults.transform.dct_scaling = dct_scaling;
  JobLimits limits;
  limits.max_message_bytes = o.max_message_bytes;
  if (absl::Status s = Validate(o.defaults, limits); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("job defaults: ", s.message()));
  }
  cl->log_level = LogLevelNamed(log_level);
  return absl::OkStatus();
}

}  // namespace shardcast::server

// The daemon's configuration: where the data is, where to listen, and the job
// defaults that a RegisterRequest leaves unset (server flags set them). In serving, the
// room that puts datasets, jobs and streams together, because it names what every
// room below takes (job defaults, remote storage); each room takes its own part.
#ifndef SHARDCAST_SERVER_SERVING_SERVER_OPTIONS_H_
#define SHARDCAST_SERVER_SERVING_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/plan/job_config.h"
#include "common/shards/sample_entry.h"
#include "server/assembly/remote_storage_options.h"
#include "server/base/clock.h"

namespace shardcast::server {

// A dataset served under a name (--dataset NAME=DIR).
struct DatasetSpec {
  std::string name;
  std::string dir;  // directory holding its .tar/.tar.gz shards, or an s3:// / http(s):// URL
};

struct ServerOptions {
  // The dataset "default" (--shards DIR): its shard directory; empty = none.
  std::string shards_dir;
  // More datasets by name (--dataset NAME=DIR, repeatable); see dataset_registry.h.
  std::vector<DatasetSpec> datasets;
  std::string listen_address = "127.0.0.1:0";  // port 0 = any free port (see port())
  // The job settings a RegisterRequest leaves unset (world_size unused): server flags
  // change them.
  JobConfig defaults = DefaultJobConfig();
  int decode_threads = 0;       // 0 = hardware concurrency
  int prefetch = 4;             // batches assembled ahead of each stream's client
  std::string index_cache_dir;  // empty = no index cache
  RemoteStorageOptions remote;
  // The plan's batches announced to the reader ahead of those being assembled, so that
  // a remote dataset's bytes are fetched while earlier batches decode
  // (--remote-read-ahead, BatchWindow::Options::read_ahead).
  int read_ahead_batches = 4;
  std::string label_field = "label";  // .json field holding the label (no .cls)
  // Memory for the seek indexes of .tar.gz shards (ShardReader's LRU).
  int64_t gzip_index_memory_bytes = int64_t{1} << 30;
  // Memory for the shard tables read back from the index cache (ShardTableCache's LRU,
  // ServedDataset::kDefaultIndexMemoryBytes): with an index cache, each dataset keeps
  // only its per-shard counts in memory and reads a shard's samples through these.
  int64_t index_memory_bytes = int64_t{64} << 20;
  int64_t max_message_bytes = 512ll << 20;          // largest Batch message a job may need
  absl::Duration grace_period = absl::Seconds(10);  // drain: how long open streams may run on
  // Labels outside [0, max_classes) are skipped (IndexOptions::max_classes).
  int max_classes = kDefaultMaxClasses;
  // A job none of whose ranks has had a stream open for this long is dropped, so its id
  // and config are free again (a rank that comes back later simply re-registers).
  // Zero = jobs never expire.
  absl::Duration job_ttl = absl::Hours(1);
  // A job none of whose ranks ever opened a stream is dropped once it has been idle this
  // long, far sooner than job_ttl: registrations that never stream (a stranger filling
  // the job table up to max_jobs) free their places within minutes, not the hour.
  // A real job's ranks stream within seconds of registering; one dropped meanwhile (a
  // long rendezvous) is registered again by its client when its stream finds it gone.
  // Zero = only job_ttl applies.
  absl::Duration unstreamed_job_ttl = absl::Minutes(2);
  // Batch buffers in flight, all streams together, never exceed this (see
  // batch_memory.h for the admission policy). 0 = the default: half of the memory
  // available to the process (memory_limit.h).
  int64_t max_batch_memory_bytes = 0;
  // A stream whose guaranteed batch does not fit max_batch_memory_bytes (after idle
  // streams were reclaimed and windows shrunk) waits this long, in a first-come queue
  // off the gRPC threads, for memory that ending streams give back; then it is refused
  // RESOURCE_EXHAUSTED. Zero = refused at once.
  absl::Duration admission_wait = absl::Seconds(1);
  // Decode buffers of the images being decoded, all decode threads together, never
  // exceed this (decode_budget.h); an image that alone needs more is substituted.
  // 0 = the default: DefaultDecodeMemoryBytes (memory_limit.h).
  int64_t max_decode_memory_bytes = 0;
  // A shard read that fails with an error of the host (EMFILE, EACCES, EIO...: not of
  // the data) is retried this long, then fails its stream UNAVAILABLE naming the shard.
  absl::Duration shard_read_retry = absl::Seconds(20);
  // An image member larger than this is substituted without being read.
  int64_t max_member_bytes = int64_t{64} << 20;
  // Encoded delivery: random-crop JPEGs are sent cut losslessly to what their crop reads.
  bool lossless_cut = false;
  // A stream whose client has not taken a batch (a write waited) this long is
  // cancelled and its memory freed. Zero = never.
  absl::Duration stream_idle_timeout = absl::Minutes(5);
  // Connections open at once; the excess is shut down as it is accepted (the client
  // sees UNAVAILABLE and retries). Zero = no limit. main.cc's default is
  // DescriptorBudget's max_connections of the descriptor limit.
  int64_t max_connections = 0;
  // The accept queue set on the listeners after gRPC opened them (0 = gRPC's, the
  // kernel's somaxconn). main.cc's default is DescriptorBudget's of the descriptor limit.
  int64_t accept_backlog = 0;
  // Of them, from one peer address (all unix-socket clients are one peer). Zero = no
  // limit. main.cc's default is a quarter of max_connections, at least 16.
  int64_t max_connections_per_peer = 0;
  // How often the server connects to its own listener to check that it still accepts
  // (listener_probe.h); zero = never.
  absl::Duration listener_probe_interval = absl::Seconds(10);
  // Register of a new job id beyond this many jobs is refused (RESOURCE_EXHAUSTED).
  // Zero = no limit.
  int max_jobs = 64;
  // Register of a new job id is refused (RESOURCE_EXHAUSTED) when the same peer (its
  // address without the port: PeerHost in grpc_adapter.h) already created
  // this many jobs none of whose ranks opened a stream yet: a stranger on an open
  // network cannot fill the job table alone. A real training run registers one job
  // and streams within seconds. Zero = no limit.
  int max_unstreamed_jobs_per_peer = 8;
  // DDP-hang early warning (stall_watch.h): a rank that has taken no batch for this
  // long while another rank of its job is ahead is logged once and flagged in status
  // and metrics. Zero = off.
  absl::Duration stall_warn = absl::Minutes(2);
  // Prometheus text exposition on http://HOST:PORT/metrics (metrics_http.h). Empty =
  // off: it is one more port, in plain HTTP, that shows job ids to whoever reaches it.
  std::string metrics_listen_address;
  // Its connections at most, and of them from one peer address (metrics_http.h's
  // Limits). main.cc's defaults: DescriptorBudget's metrics_connections of the
  // descriptor limit, and a quarter of that (at least 1).
  int64_t metrics_max_connections = 64;
  int64_t metrics_max_connections_per_peer = 16;
  // A second gRPC listener, always plaintext, serving grpc.health.v1 alone with the
  // same answers as the main one: for probes that cannot speak TLS or send tokens
  // (Kubernetes' native gRPC probes). It tells nothing but SERVING or NOT_SERVING per
  // service name. Empty = off.
  std::string health_listen_address;
  // Security (rpc/server_credentials.h, net/token_authenticator.h). Empty paths:
  // plaintext, no client certificates, no tokens.
  std::string tls_cert_file;       // PEM certificate chain served (with tls_key_file)
  std::string tls_key_file;        // PEM private key of tls_cert_file
  std::string tls_client_ca_file;  // PEM CA: clients must present a certificate it signed
  std::string auth_token_file;     // accepted bearer tokens, one a line (re-read on SIGHUP)
  // grpc.reflection: off unless asked for, since it lets any peer that reaches the port
  // enumerate the API (debugging with grpcurl/grpc_cli is what it is for).
  bool reflection = false;
  // BENCHMARK ONLY: each stream assembles its first batch once and re-sends that same
  // buffer for every message (its index stamped with the position it goes out at, so
  // clients' sequence checks take it), so a benchmark measures the wire and the clients
  // without decode cost. Clients receive wrong data in this mode; never set it when
  // serving a trainer.
  bool bench_only_resend_first_batch = false;
  // The time the core reads (TTLs, idle streams, stalls, rates): tests pass a clock they
  // advance. Not owned; must outlive the server.
  const Clock* clock = Clock::Real();
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_SERVING_SERVER_OPTIONS_H_

// The process's file descriptor limit, which is what every connection, shard read and
// index file takes one of. gRPC 1.51's listener stops for good on the first accept()
// that fails with EMFILE (docs/server.md, "Running out of descriptors"), so the server
// raises its soft limit as far as it may and keeps its connections below it.
#ifndef SHARDCAST_SERVER_NET_DESCRIPTOR_LIMIT_H_
#define SHARDCAST_SERVER_NET_DESCRIPTOR_LIMIT_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace shardcast::server {

struct DescriptorLimit {
  uint64_t soft_before = 0;  // RLIMIT_NOFILE's soft limit as the process started
  uint64_t soft = 0;         // after raising it
  uint64_t hard = 0;         // the ceiling an unprivileged process may raise it to
};

// Raises the soft RLIMIT_NOFILE to the hard limit (an infinite hard limit is capped at
// the kernel's fs/nr_open). Anything may raise its own soft limit up to the hard one:
// the soft default of 1024 exists for select(), which nothing here uses.
absl::StatusOr<DescriptorLimit> RaiseDescriptorLimit();

// The most connections the kernel queues for a listener (net.core.somaxconn; gRPC
// listens with it as backlog).
int64_t AcceptQueueLimit();

// How the server shares its descriptor limit out (DescriptorBudget below). Every
// field is at least 1, and for every limit of at least kMinDescriptorLimit
//   reserve + max_connections + (accept_backlog + 1) + metrics_connections <= limit,
// so one round of gRPC's accepts (which takes a whole queue, refused connections
// included, before it closes any; Linux queues one more than the backlog) on top of the
// most connections allowed, the /metrics listener full and the server's own files never
// reaches the limit: the accept that fails with EMFILE, after which gRPC 1.51 never
// accepts again, cannot happen while the defaults hold.
struct DescriptorShares {
  // What is not a connection: shards being read, the index, gRPC's epoll and pipes,
  // the log, the listener probe. kDescriptorReserve, or half a small limit.
  int64_t reserve = 0;
  // The accept queue set on the gRPC listeners (AcceptWatch::SetAcceptBacklog): a
  // quarter of what the connections share, at most the kernel's somaxconn.
  int64_t accept_backlog = 0;
  // The default --max-connections: what is left.
  int64_t max_connections = 0;
  // The /metrics and status page listener's connections at most
  // (MetricsHttpServer::Limits): an eighth of what is not reserved, at most
  // kMaxMetricsConnections.
  int64_t metrics_connections = 0;
};

// The smallest limit DescriptorBudget keeps its promise for: below it the server's own
// descriptors (about 15 at start) leave too little to share, and the shares are
// smaller than the promise needs (every one still at least 1).
inline constexpr uint64_t kMinDescriptorLimit = 64;
inline constexpr int64_t kDescriptorReserve = 64;
inline constexpr int64_t kMaxMetricsConnections = 64;
// Pure: `limit` is the soft RLIMIT_NOFILE, `accept_queue_limit` the kernel's
// somaxconn (AcceptQueueLimit()).
DescriptorShares DescriptorBudget(uint64_t limit, int64_t accept_queue_limit);

// The default --max-connections-per-peer: a quarter of the connections, at least 16
// (a trainer node opens one per rank, plus ctl and scrapes) but never more than all of
// them: one host's flood leaves the others three quarters. 0 (no limit) stays 0.
int64_t DefaultMaxConnectionsPerPeer(int64_t max_connections);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_NET_DESCRIPTOR_LIMIT_H_

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

// The accept queue the server sets on its listeners (AcceptWatch::SetAcceptBacklog):
// gRPC accepts a whole queue in one go, refused connections included, before any of
// them is closed, so the queue must fit in the descriptors left beside the connections.
// A quarter of the soft limit, at least 64, at most `accept_queue_limit`.
int64_t AcceptBacklog(uint64_t soft_limit, int64_t accept_queue_limit);

// The default --max-connections: the soft limit less one accept queue (`backlog`) and
// a fixed reserve for what is not a connection (shards being read, the index, gRPC's
// pipes and epoll, the log); never fewer than kMinConnections.
inline constexpr int64_t kDescriptorReserve = 64;
inline constexpr int64_t kMinConnections = 8;
int64_t DefaultMaxConnections(uint64_t soft_limit, int64_t backlog);

// The default --max-connections-per-peer: a quarter of the connections, at least 16
// (a trainer node opens one per rank, plus ctl and scrapes): one host's flood leaves
// the others three quarters. 0 (no limit) stays 0.
int64_t DefaultMaxConnectionsPerPeer(int64_t max_connections);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_NET_DESCRIPTOR_LIMIT_H_

// Which replicas of shardcast-server a rank may use, and in which order (issue 26).
//
// A client's --server is one gRPC target or a comma-separated list of them; a
// hostname that resolves to several addresses (a Kubernetes headless Service, a DNS
// round robin) counts as one replica per address. Replicas need no coordination: the
// plan is a pure function of the index content and the job, so every replica serving
// the same shards deals the same batches, and a rank may move from one to another at
// any batch.
//
// The order a rank tries them in: the replicas on its own host first (a unix: socket,
// a loopback address, an address of one of this host's interfaces, this host's name),
// so that batches cross no network when they need not; then the others, rotated by
// rank, so that the ranks of a job spread over the remote replicas instead of all
// picking the first. On failure a rank moves to the next one in its order.
#ifndef SHARDCAST_CLIENT_RECONNECT_SERVER_LIST_H_
#define SHARDCAST_CLIENT_RECONNECT_SERVER_LIST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardcast::client {

// INVALID_ARGUMENT, saying what to write instead, unless `entry` can be one gRPC target
// of shardcast-server: HOST:PORT, [IPV6]:PORT, unix:PATH, dns:[//RESOLVER/]HOST:PORT (or
// gRPC's ipv4:, ipv6:, xds: forms, passed on as written). Refused at once rather than
// retried for the reconnect deadline: "http://host:port", "host" without a port, a port
// out of 1-65535, an IPv6 address without brackets.
absl::Status CheckServerTarget(absl::string_view entry);

// CheckServerTarget for each entry of a comma-separated --server value (an empty entry
// is refused too); resolves nothing, so it answers at once.
absl::Status CheckServerList(absl::string_view servers);

// The targets of a --server value, in the order written, duplicates dropped; a
// hostname that resolves to several addresses is replaced by them ("ADDR:PORT", IPv6
// in brackets), one that resolves to one address or not at all (a server not yet
// in DNS) stays as written, for gRPC to resolve. INVALID_ARGUMENT for an empty list,
// an empty entry or one that CheckServerTarget refuses.
absl::StatusOr<std::vector<std::string>> ExpandServerList(absl::string_view servers);

// Whether `target` is on this host: unix:, loopback, an address of this host's
// interfaces, or "localhost"/this host's name.
bool IsLocalTarget(absl::string_view target);

// `targets` in the order rank `rank` tries them: the local ones first, then the
// others; each group rotated by rank (rank r starts at the r-th modulo its size).
std::vector<std::string> OrderForRank(const std::vector<std::string>& targets, int rank);

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_RECONNECT_SERVER_LIST_H_

// Every connection gRPC's listener accepts passes through here: counted, refused
// beyond --max-connections, and seen by the listener probe (listener_probe.h).
//
// Why: gRPC 1.51's listener stops for good on the first accept() that fails with
// EMFILE, and it has no connection limit of its own. A socket mutator
// (grpc_socket_mutator_abi.h) is called with each accepted descriptor; a connection
// beyond the limit is shut down there (the client sees UNAVAILABLE and retries), so
// connections alone cannot take the descriptors the listener needs. The mutator must
// never return false for an accepted connection: gRPC 1.51 would close the listener.
#ifndef SHARDCAST_SERVER_RPC_ACCEPT_WATCH_H_
#define SHARDCAST_SERVER_RPC_ACCEPT_WATCH_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/base/clock.h"
#include "server/base/server_stats.h"

namespace grpc {
class ServerBuilderOption;
}

namespace shardcast::server {

class AcceptWatch : public std::enable_shared_from_this<AcceptWatch> {
 public:
  // `max_connections`: connections open at once (0 = no limit); `max_per_peer`: of
  // them, from one peer (its IP address; every unix-socket client is one peer "unix";
  // 0 = no limit), so that one host's flood cannot take every place. Keeps stats->
  // connections_open and connections_refused. `clock` spaces the refusal log lines.
  // REQUIRES: `stats` and `clock` outlive the watch.
  AcceptWatch(int64_t max_connections, int64_t max_per_peer, ServerStats* stats,
              const Clock* clock = Clock::Real());

  // The option that makes a ServerBuilder's server call OnAccepted for every accepted
  // connection. It holds a reference to this watch for as long as gRPC keeps the mutator.
  std::unique_ptr<grpc::ServerBuilderOption> BuilderOption();

  // One accepted connection `fd`: counted, or shut down when a limit is reached.
  // Called on gRPC's threads; public for tests.
  void OnAccepted(int fd) ABSL_LOCKS_EXCLUDED(mu_);

  // Sets the accept queue of the listeners gRPC opened (their descriptors came through
  // the mutator): listen() again on a listening socket only changes its backlog. Call
  // after the server started. INTERNAL names a listener that refused.
  absl::Status SetAcceptBacklog(int backlog) ABSL_LOCKS_EXCLUDED(mu_);

  // A listening socket gRPC made (called before gRPC's own listen()).
  void OnListening(int fd) ABSL_LOCKS_EXCLUDED(mu_);

  // gRPC's listening sockets seen through the mutator (one a listening address).
  int64_t listeners() const ABSL_LOCKS_EXCLUDED(mu_);

  // Connections open now: those gRPC has closed since they were counted are dropped.
  int64_t CountOpen() ABSL_LOCKS_EXCLUDED(mu_);

  // Connections accepted so far (refused ones included): the listener probe reads it
  // before it connects and waits for it to grow.
  int64_t accepted() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until more than `seen` connections were accepted; false after `timeout`.
  bool AwaitAcceptedBeyond(int64_t seen, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Counted {
    ino_t inode;       // tells a descriptor gRPC closed and the kernel reused
    std::string peer;  // PeerOf the connection
  };
  // Drops the descriptors that no longer are the socket counted (closed, or reused).
  void DropClosed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One connection of `peer` less.
  void Uncount(const std::string& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why `peer`'s new connection is refused; empty when it is not.
  std::string RefusalReason(const std::string& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_connections_;
  const int64_t max_per_peer_;
  ServerStats* const stats_;
  const Clock* const clock_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, Counted> open_ ABSL_GUARDED_BY(mu_);  // by descriptor
  absl::flat_hash_map<std::string, int64_t> per_peer_ ABSL_GUARDED_BY(mu_);
  int64_t accepted_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> listeners_ ABSL_GUARDED_BY(mu_);  // gRPC's listening sockets
  absl::Time last_refusal_log_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// The peer of connected socket `fd` as AcceptWatch counts it: "ipv4:10.0.0.5",
// "ipv6:fd00::1" (a v4-mapped address as ipv4), "unix"; "unknown" when it has none.
std::string PeerOf(int fd);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_RPC_ACCEPT_WATCH_H_

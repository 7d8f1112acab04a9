// ReplicaOrder: the replicas of a server one rank talks to, by target, in the order it
// tries them (server_list.h), and which one is in use. A rank moves on to the next at
// once when one fails or drains; a round of moves that came back where it began (every
// replica failed since a batch last arrived) waits its backoff first, as a single
// server's reconnect does every time. Plain targets: the channels to them are the gRPC
// edge's (client/rpc/replica_set.h), which moves through them by this order.
#ifndef SHARDCAST_CLIENT_RECONNECT_REPLICA_ORDER_H_
#define SHARDCAST_CLIENT_RECONNECT_REPLICA_ORDER_H_

#include <atomic>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace shardcast::client {

class ReplicaOrder {
 public:
  // `targets`: never empty, in this rank's order.
  explicit ReplicaOrder(std::vector<std::string> targets) : targets_(std::move(targets)) {}

  // The replica in use, by its index in the order and by its target. Only the thread
  // registering or prefetching (one at a time) moves it; others may read it.
  size_t current() const { return current_.load(); }
  const std::string& current_target() const { return targets_[current_.load()]; }
  size_t size() const { return targets_.size(); }
  // Makes the next replica current and returns true, so the caller tries it at once.
  // False when there is only one replica (nothing moves), or when the move closes a
  // round: back where the tries began; the caller then waits its backoff first.
  bool MoveToNext();
  // A batch arrived: the next round of tries begins at the replica in use.
  void StartRound() { round_start_ = current_.load(); }

 private:
  const std::vector<std::string> targets_;
  std::atomic<size_t> current_{0};
  size_t round_start_ = 0;
};

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_RECONNECT_REPLICA_ORDER_H_

// ReplicaOrder (see replica_order.h).
#include "client/reconnect/replica_order.h"

namespace shardcast::client {

bool ReplicaOrder::MoveToNext() {
  if (targets_.size() < 2) return false;
  const size_t next = (current_.load() + 1) % targets_.size();
  current_.store(next);
  return next != round_start_;
}

}  // namespace shardcast::client

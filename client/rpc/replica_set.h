// ReplicaSet: the channels to the replicas of a server one rank talks to, moved through
// by their ReplicaOrder (client/reconnect/replica_order.h: which one is in use, when a
// round of moves came back where it began). The order decides; this holds the gRPC side.
#ifndef SHARDCAST_CLIENT_RPC_REPLICA_SET_H_
#define SHARDCAST_CLIENT_RPC_REPLICA_SET_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "client/base/stream_settings.h"
#include "client/reconnect/replica_order.h"
#include "client/rpc/wire_batch.h"
#include "shardcast/v1/shardcast.grpc.pb.h"

namespace shardcast::client {

// One replica of the server: its channel (nothing connects before the first call).
struct Replica {
  Replica(const StreamSettings& settings, std::string replica_target);
  const std::string target;
  const std::shared_ptr<grpc::Channel> channel;
  const std::unique_ptr<shardcast::v1::Shardcast::Stub> stub;  // Register
  const WireBatchStub batch_stub;                              // StreamBatches
};

class ReplicaSet {
 public:
  // `targets`: never empty, in this rank's order.
  ReplicaSet(const StreamSettings& settings, const std::vector<std::string>& targets);

  // The replica in use. Only the thread registering or prefetching (one at a time)
  // moves it; others may read it.
  const Replica& current() const { return *replicas_[order_.current()]; }
  size_t size() const { return replicas_.size(); }

  // ReplicaOrder's moves (replica_order.h).
  bool MoveToNext() { return order_.MoveToNext(); }
  void StartRound() { order_.StartRound(); }
  // The order itself, for the registration's retries (client/reconnect/registration.h).
  ReplicaOrder* order() { return &order_; }

 private:
  ReplicaOrder order_;
  std::vector<std::unique_ptr<Replica>> replicas_;
};

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_RPC_REPLICA_SET_H_

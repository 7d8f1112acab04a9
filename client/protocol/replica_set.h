// ReplicaSet: the replicas of a server one rank talks to, in the order it tries them
// (server_list.h), and which one is in use. A rank moves on to the next at once when one
// fails or drains; a round of moves that came back where it began (every replica failed
// since a batch last arrived) waits its backoff first, as a single server's reconnect
// does every time.
#ifndef SHARDCAST_CLIENT_PROTOCOL_REPLICA_SET_H_
#define SHARDCAST_CLIENT_PROTOCOL_REPLICA_SET_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "client/protocol/stream_settings.h"
#include "client/protocol/wire_batch.h"
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
  const Replica& current() const { return *replicas_[current_.load()]; }
  size_t size() const { return replicas_.size(); }

  // Makes the next replica current and returns true, so the caller tries it at once.
  // False when there is only one replica (nothing moves), or when the move closes a
  // round: back where the tries began; the caller then waits its backoff first.
  bool MoveToNext();
  // A batch arrived: the next round of tries begins at the replica in use.
  void StartRound() { round_start_ = current_.load(); }

 private:
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::atomic<size_t> current_{0};
  size_t round_start_ = 0;
};

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_PROTOCOL_REPLICA_SET_H_

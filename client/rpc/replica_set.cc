// ReplicaSet (see replica_set.h).
#include "client/rpc/replica_set.h"

#include <utility>

#include "absl/time/time.h"
#include "client/checks/stream_checks.h"
#include "client/rpc/channel.h"

namespace shardcast::client {
namespace {

std::shared_ptr<grpc::Channel> MakeStreamChannel(const StreamSettings& settings,
                                                 const std::string& target) {
  ChannelOptions channel;
  channel.target = target;
  channel.credentials = settings.credentials;
  channel.bearer_token = settings.bearer_token;
  channel.reconnect_backoff_initial = absl::Seconds(settings.reconnect_initial_seconds);
  channel.reconnect_backoff_max = absl::Seconds(settings.reconnect_max_seconds);
  channel.stream_window_bytes = settings.stream_window_bytes;
  channel.max_receive_message_bytes = kMaxBatchMessageBytes;
  return MakeChannel(channel);
}

}  // namespace

Replica::Replica(const StreamSettings& settings, std::string replica_target)
    : target(std::move(replica_target)),
      channel(MakeStreamChannel(settings, target)),
      stub(shardcast::v1::Shardcast::NewStub(channel)),
      batch_stub(channel) {}

ReplicaSet::ReplicaSet(const StreamSettings& settings, const std::vector<std::string>& targets)
    : order_(targets) {
  for (const std::string& target : targets) {
    replicas_.push_back(std::make_unique<Replica>(settings, target));
  }
}

}  // namespace shardcast::client

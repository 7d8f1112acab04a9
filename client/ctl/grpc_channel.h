// How shardcast-ctl reaches a server: one insecure channel per invocation, a
// deadline per call, and the exit codes its server-facing subcommands share.
#ifndef SHARDCAST_CLIENT_CTL_GRPC_CHANNEL_H_
#define SHARDCAST_CLIENT_CTL_GRPC_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace shardcast::ctl {

// Exit codes of `health` and `status` (documented in their --help).
inline constexpr int kExitOk = 0;
inline constexpr int kExitNotServing = 1;  // health: reachable, but not SERVING
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;  // no connection, deadline passed, or RPC failed

// A channel to `target` (host:port, [v6]:port, unix:/path, or any gRPC target
// string). Nothing connects until the first call.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target);

// Sets a deadline `timeout_seconds` from now. Calls do not wait for the
// channel to become ready: a refused connection fails at once as UNAVAILABLE
// instead of retrying until the deadline.
void SetCallOptions(grpc::ClientContext* context, double timeout_seconds);

// "UNAVAILABLE: failed to connect to all addresses; ..." — the code by name,
// then gRPC's message.
std::string DescribeRpcError(const grpc::Status& status);

}  // namespace shardcast::ctl

#endif  // SHARDCAST_CLIENT_CTL_GRPC_CHANNEL_H_

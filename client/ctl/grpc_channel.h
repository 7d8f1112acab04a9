// How shardcast-ctl reaches a server: one insecure channel per invocation, a
// deadline per call, and the exit codes its server-facing subcommands share.
#ifndef SHARDCAST_CLIENT_CTL_GRPC_CHANNEL_H_
#define SHARDCAST_CLIENT_CTL_GRPC_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/ctl/flag_parser.h"

namespace shardcast::ctl {

// Exit codes of `health` and `status` (documented in their --help).
inline constexpr int kExitOk = 0;
inline constexpr int kExitNotServing = 1;  // health: reachable, but not SERVING
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;  // no connection, deadline passed, or RPC failed

// The flag handling `health` and `status` share: parses `args` with `flags`. With
// --help, prints `help` (usage line first), the flags and `exit_codes` to stdout and
// returns kExitOk; on a bad flag, or when `server` (bound to --server) is still empty,
// prints the error and the usage line to stderr and returns kExitUsage. nullopt: go on.
std::optional<int> ParseServerCommandFlags(const std::string& command, FlagParser& flags,
                                           const std::vector<std::string>& args,
                                           const std::string& server, const char* help,
                                           const char* exit_codes);

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

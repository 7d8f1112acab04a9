// How shardcast-ctl reaches a server: one channel per invocation (plaintext, or TLS
// and a bearer token per the security flags), a deadline per call, and the exit
// codes its server-facing subcommands share.
#ifndef SHARDCAST_CLIENT_CTL_GRPC_CHANNEL_H_
#define SHARDCAST_CLIENT_CTL_GRPC_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/rpc/channel.h"
#include "client/rpc/client_security.h"
#include "common/flags/flags.h"

namespace shardcast::ctl {

// Exit codes of `health` and `status` (documented in their --help).
inline constexpr int kExitOk = 0;
inline constexpr int kExitNotServing = 1;  // health: reachable, but not SERVING
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;  // no connection, deadline passed, or RPC failed

// The flags `health` and `status` share.
struct ServerCommandFlags {
  std::string server;  // --server ADDR[,ADDR...] (required)
  // The replicas --server names (client/reconnect/server_list.h: a list, or a name
  // that resolves to several addresses), filled by ParseServerCommandFlags.
  std::vector<std::string> targets;
  absl::Duration rpc_timeout;            // --rpc-timeout DURATION: the deadline of the call
  client::ClientSecurityFlags security;  // --tls-ca, --tls-cert, --tls-key, --auth-token-file
  client::ClientSecurity loaded;         // what `security` named, read by ParseServerCommandFlags
};

// Adds --server, --rpc-timeout and the client security flags to `flags`;
// `dst->rpc_timeout` is the default.
void AddServerCommandFlags(FlagSet* flags, ServerCommandFlags* dst);

// Parses `args` with `flags` (which AddServerCommandFlags filled `common` through). With
// --help, prints `help` (usage line first), the flags and `exit_codes` to stdout and
// returns kExitOk; on a bad flag, a missing --server, a zero --rpc-timeout or an
// unreadable certificate or token file, prints the error and the usage line to stderr
// and returns kExitUsage. nullopt: go on (`common.loaded` is filled).
std::optional<int> ParseServerCommandFlags(const std::string& command, FlagSet& flags,
                                           const std::vector<std::string>& args,
                                           ServerCommandFlags& common, const char* help,
                                           const char* exit_codes);

// The channel to `target`, one of flags.targets (host:port, [v6]:port, unix:/path, or
// any gRPC target string), made by the clients' one channel factory
// (client/rpc/channel.h). Nothing connects until the first call.
std::shared_ptr<grpc::Channel> ServerChannel(const ServerCommandFlags& flags,
                                             const std::string& target);

// Sets a deadline `timeout` from now. Calls do not wait for the channel to become
// ready: a refused connection fails at once as UNAVAILABLE instead of retrying until
// the deadline.
void SetCallOptions(grpc::ClientContext* context, absl::Duration timeout);

using client::DescribeRpcError;

}  // namespace shardcast::ctl

#endif  // SHARDCAST_CLIENT_CTL_GRPC_CHANNEL_H_

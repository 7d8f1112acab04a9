// shardcast-ctl's channel set-up and RPC error descriptions.
#include "client/ctl/grpc_channel.h"

#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/reconnect/server_list.h"

namespace shardcast::ctl {

void AddServerCommandFlags(FlagSet* flags, ServerCommandFlags* dst) {
  flags->String({{"--server"},
                 "ADDR",
                 "server address, host:port or unix:PATH (required); several replicas as\n"
                 "ADDR,ADDR,... or a name that resolves to several addresses: each is asked"},
                &dst->server);
  flags->Duration({{"--rpc-timeout"}, "DURATION", "deadline of the call"}, &dst->rpc_timeout);
  client::AddClientSecurityFlags(flags, &dst->security);
}

std::optional<int> ParseServerCommandFlags(const std::string& command, FlagSet& flags,
                                           const std::vector<std::string>& args,
                                           ServerCommandFlags& common, const char* help,
                                           const char* exit_codes) {
  absl::Status parsed = flags.Parse(args);
  if (flags.help_requested()) {
    std::printf("%s%s%s", help, flags.Help().c_str(), exit_codes);
    return kExitOk;
  }
  if (parsed.ok() && common.server.empty()) {
    parsed = absl::InvalidArgumentError("--server ADDR is required");
  } else if (parsed.ok() && common.rpc_timeout <= absl::ZeroDuration()) {
    parsed = absl::InvalidArgumentError("--rpc-timeout must be above 0");
  } else if (parsed.ok()) {
    absl::StatusOr<std::vector<std::string>> targets = client::ExpandServerList(common.server);
    if (targets.ok()) {
      common.targets = *std::move(targets);
    } else {
      parsed = targets.status();
    }
  }
  if (parsed.ok()) {
    absl::StatusOr<client::ClientSecurity> loaded = client::LoadClientSecurity(common.security);
    if (loaded.ok()) {
      common.loaded = *std::move(loaded);
    } else {
      parsed = loaded.status();
    }
  }
  if (!parsed.ok()) {
    const char* cmd = command.c_str();
    std::fprintf(stderr, "shardcast-ctl %s: %s\n%.*s(shardcast-ctl %s --help for more)\n", cmd,
                 std::string(parsed.message()).c_str(),
                 static_cast<int>(std::strchr(help, '\n') - help + 1), help, cmd);
    return kExitUsage;
  }
  return std::nullopt;
}

std::shared_ptr<grpc::Channel> ServerChannel(const ServerCommandFlags& flags,
                                             const std::string& target) {
  client::ChannelOptions options;
  options.target = target;
  options.credentials = flags.loaded.credentials;
  options.bearer_token = flags.loaded.bearer_token;
  // One call per invocation: no keepalive pings (a status report of a server with many
  // jobs can outgrow gRPC's 4 MB default; the factory sets no receive limit).
  options.keepalive_time = absl::ZeroDuration();
  return client::MakeChannel(options);
}

void SetCallOptions(grpc::ClientContext* context, absl::Duration timeout) {
  // gRPC's deadline is a time of the real clock.
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  context->set_wait_for_ready(false);
}

}  // namespace shardcast::ctl

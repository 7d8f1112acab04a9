// shardcast-ctl's channel set-up and RPC error descriptions.
#include "client/ctl/grpc_channel.h"

#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardcast::ctl {

void AddServerCommandFlags(FlagSet* flags, ServerCommandFlags* dst) {
  flags->String({{"--server"}, "ADDR", "server address, host:port or unix:PATH (required)"},
                &dst->server);
  flags->Duration({{"--rpc-timeout"}, "DURATION", "deadline of the call"}, &dst->rpc_timeout);
}

std::optional<int> ParseServerCommandFlags(const std::string& command, FlagSet& flags,
                                           const std::vector<std::string>& args,
                                           const ServerCommandFlags& common, const char* help,
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

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target) {
  grpc::ChannelArguments args;
  // A status report of a server with many jobs can outgrow the 4 MB default.
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

void SetCallOptions(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  context->set_wait_for_ready(false);
}

std::string DescribeRpcError(const grpc::Status& status) {
  // grpc::StatusCode and absl::StatusCode share their numbering (both are the
  // canonical gRPC codes), so absl can name the code.
  std::string out = absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
  if (!status.error_message().empty()) absl::StrAppend(&out, ": ", status.error_message());
  return out;
}

}  // namespace shardcast::ctl

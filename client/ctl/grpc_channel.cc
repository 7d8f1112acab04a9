// shardcast-ctl's channel set-up and RPC error descriptions.
#include "client/ctl/grpc_channel.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardcast::ctl {

std::optional<int> ParseServerCommandFlags(const std::string& command, FlagParser& flags,
                                           const std::vector<std::string>& args,
                                           const std::string& server, const char* help,
                                           const char* exit_codes) {
  const absl::Status parsed = flags.Parse(args);
  if (flags.help_requested() && parsed.ok()) {
    std::printf("%s%s%s", help, flags.FlagsHelp().c_str(), exit_codes);
    return kExitOk;
  }
  if (!parsed.ok() || server.empty()) {
    const char* cmd = command.c_str();
    std::fprintf(stderr, "shardcast-ctl %s: %s\n%.*s(shardcast-ctl %s --help for more)\n", cmd,
                 parsed.ok() ? "--server ADDR is required" : std::string(parsed.message()).c_str(),
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

void SetCallOptions(grpc::ClientContext* context, double timeout_seconds) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(timeout_seconds * 1e6)));
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

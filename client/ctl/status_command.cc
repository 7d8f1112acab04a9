// `shardcast-ctl status`: fetches Shardcast/GetStatus and prints it as tables
// (jobs, ranks, throughput, errors, memory) or, with --json, as proto3 JSON.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "client/ctl/command_registry.h"
#include "client/ctl/grpc_channel.h"
#include "client/ctl/status_report.h"
#include "common/flags.h"
#include "shardcast/v1/shardcast.grpc.pb.h"

namespace shardcast::ctl {
namespace {

constexpr char kHelp[] =
    "usage: shardcast-ctl status --server ADDR [--json] [--rpc-timeout DURATION]\n"
    "\n"
    "Calls shardcast.v1.Shardcast/GetStatus and prints the server's figures\n"
    "(uptime, index, throughput, errors, substitutions, memory), its jobs and the\n"
    "progress of every rank. Sizes use decimal units (1 MB = 10^6 bytes).\n"
    "\n"
    "flags:\n";

constexpr char kExitCodes[] =
    "\n"
    "exit codes:\n"
    "  0  the status was printed\n"
    "  2  usage error\n"
    "  3  unreachable: no connection, timeout, or the GetStatus RPC failed\n"
    "     (or, never expected, the reply could not be turned into JSON)\n";

int RunStatus(const std::vector<std::string>& args) {
  ServerCommandFlags common;
  common.rpc_timeout = absl::Seconds(10);
  bool json = false;
  FlagSet flags("shardcast-ctl status");
  AddServerCommandFlags(&flags, &common);
  flags.Bool({{"--json"}, "", "print the reply as JSON (every field, proto3 JSON mapping)"}, &json);
  if (std::optional<int> done =
          ParseServerCommandFlags("status", flags, args, common, kHelp, kExitCodes)) {
    return *done;
  }
  const std::string& server = common.server;

  auto stub = shardcast::v1::Shardcast::NewStub(ServerChannel(common));
  grpc::ClientContext context;
  SetCallOptions(&context, common.rpc_timeout);
  shardcast::v1::GetStatusResponse response;
  const grpc::Status status =
      stub->GetStatus(&context, shardcast::v1::GetStatusRequest(), &response);
  if (!status.ok()) {
    std::fprintf(stderr, "shardcast-ctl status: %s: %s\n", server.c_str(),
                 DescribeRpcError(status).c_str());
    return kExitUnreachable;
  }
  if (!json) {
    std::fputs(RenderStatusReport(response, server).c_str(), stdout);
    return kExitOk;
  }
  absl::StatusOr<std::string> text = StatusToJson(response);
  if (!text.ok()) {
    std::fprintf(stderr, "shardcast-ctl status: %s\n",
                 std::string(text.status().message()).c_str());
    return kExitUnreachable;
  }
  std::fputs(text->c_str(), stdout);
  if (text->empty() || text->back() != '\n') std::fputc('\n', stdout);
  return kExitOk;
}

RegisterCommand reg("status",
                    {"jobs, ranks, throughput and errors of a server (--json)", RunStatus});

}  // namespace
}  // namespace shardcast::ctl

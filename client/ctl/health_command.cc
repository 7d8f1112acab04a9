// `shardcast-ctl health`: asks a server's grpc.health.v1.Health service whether
// it is SERVING; the exit code is made for scripts, probes and HEALTHCHECK.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "client/ctl/command_registry.h"
#include "client/ctl/grpc_channel.h"
#include "common/flags/flags.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace shardcast::ctl {
namespace {

constexpr char kHelp[] =
    "usage: shardcast-ctl health --server ADDR [--service NAME | --dataset NAME]\n"
    "                             [--rpc-timeout DURATION]\n"
    "\n"
    "Calls grpc.health.v1.Health/Check on the server and prints the answer:\n"
    "SERVING, NOT_SERVING (e.g. while indexing or draining), UNKNOWN,\n"
    "SERVICE_UNKNOWN (no such --service or --dataset), or 'unreachable: ' and the\n"
    "gRPC error. The server is SERVING once every dataset is indexed; --dataset\n"
    "asks about one (service shardcast.v1.Shardcast/NAME), SERVING as soon as it is.\n"
    "With several replicas (--server A,B or a name with several addresses) each is\n"
    "asked, one line each, 'ADDR: ' first; the exit code is the worst answer.\n"
    "\n"
    "flags:\n";

constexpr char kExitCodes[] =
    "\n"
    "exit codes:\n"
    "  0  SERVING (every replica)\n"
    "  1  reachable but not serving (NOT_SERVING, UNKNOWN, SERVICE_UNKNOWN)\n"
    "  2  usage error\n"
    "  3  unreachable: no connection, timeout, or the health RPC failed\n";

// Asks `target`, prints the answer after `prefix`; returns the exit code it means.
int CheckHealth(const ServerCommandFlags& common, const std::string& target,
                const std::string& service, const std::string& prefix) {
  auto stub = grpc::health::v1::Health::NewStub(ServerChannel(common, target));
  grpc::ClientContext context;
  SetCallOptions(&context, common.rpc_timeout);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);

  if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
    // The health service answers NOT_FOUND for a service name it does not know.
    std::printf("%sSERVICE_UNKNOWN: %s has no health status for service '%s'\n", prefix.c_str(),
                target.c_str(), service.c_str());
    return kExitNotServing;
  }
  if (!status.ok()) {
    std::printf("%sunreachable: %s: %s\n", prefix.c_str(), target.c_str(),
                DescribeRpcError(status).c_str());
    return kExitUnreachable;
  }
  using grpc::health::v1::HealthCheckResponse_ServingStatus;
  const HealthCheckResponse_ServingStatus serving = response.status();
  std::string name = grpc::health::v1::HealthCheckResponse_ServingStatus_Name(serving);
  if (name.empty()) name = "UNKNOWN(" + std::to_string(static_cast<int>(serving)) + ")";
  std::printf("%s%s\n", prefix.c_str(), name.c_str());
  return serving == grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk : kExitNotServing;
}

int RunHealth(const std::vector<std::string>& args) {
  ServerCommandFlags common;
  common.rpc_timeout = absl::Seconds(5);
  std::string service;
  FlagSet flags("shardcast-ctl health");
  AddServerCommandFlags(&flags, &common);
  flags.String({{"--service"},
                "NAME",
                "ask about one service, e.g. shardcast.v1.Shardcast",
                "\"\": the server"},
               &service, /*allow_empty=*/true);
  std::string dataset;
  flags.String({{"--dataset"},
                "NAME",
                "ask whether the server's dataset NAME (its --dataset NAME=DIR, or \"default\"\n"
                "for --shards) is indexed and served"},
               &dataset);
  if (std::optional<int> done =
          ParseServerCommandFlags("health", flags, args, common, kHelp, kExitCodes)) {
    return *done;
  }
  if (!dataset.empty()) {
    if (flags.Given("--service")) {
      std::fprintf(stderr, "shardcast-ctl health: give --service or --dataset, not both\n");
      return kExitUsage;
    }
    service = "shardcast.v1.Shardcast/" + dataset;
  }
  // Every replica is asked; each line names its replica when there are several. The
  // exit code is the worst answer: unreachable over not serving over serving.
  const bool several = common.targets.size() > 1;
  int exit_code = kExitOk;
  for (const std::string& target : common.targets) {
    const std::string prefix = several ? target + ": " : "";
    exit_code = std::max(exit_code, CheckHealth(common, target, service, prefix));
  }
  return exit_code;
}

RegisterCommand reg("health", {"is the server SERVING? (grpc.health.v1; exit 0 = yes)", RunHealth});

}  // namespace
}  // namespace shardcast::ctl

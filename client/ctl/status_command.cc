// `shardcast-ctl status`: fetches Shardcast/GetStatus and prints it as tables
// (jobs, ranks, throughput, errors, memory) or, with --json, as proto3 JSON; with
// --watch, again and again as a live view, like top.
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/ctl/command_registry.h"
#include "client/ctl/grpc_channel.h"
#include "client/ctl/status_report.h"
#include "common/flags/flags.h"
#include "common/util/json_fields.h"
#include "shardcast/v1/shardcast.grpc.pb.h"

namespace shardcast::ctl {
namespace {

constexpr char kHelp[] =
    "usage: shardcast-ctl status --server ADDR [--json | --watch [--interval D]]\n"
    "                            [--rpc-timeout DURATION]\n"
    "\n"
    "Calls shardcast.v1.Shardcast/GetStatus and prints the server's figures\n"
    "(uptime, index, throughput, errors, substitutions, memory, stalled ranks), its\n"
    "jobs and the progress of every rank. Sizes use decimal units (1 MB = 10^6 bytes).\n"
    "--watch redraws the report every --interval until Ctrl-C (on a terminal it\n"
    "clears the screen first; elsewhere reports follow one another); a failed call\n"
    "is shown in place of the report and the watch goes on. With several replicas\n"
    "(--server A,B or a name with several addresses) each one's report is shown;\n"
    "--json then prints a list of {\"server\": ADDR, \"status\": REPLY}.\n"
    "\n"
    "flags:\n";

constexpr char kExitCodes[] =
    "\n"
    "exit codes:\n"
    "  0  the status was printed (--watch: --count reports were shown)\n"
    "  2  usage error\n"
    "  3  unreachable (never with --watch): no connection, timeout, or the GetStatus\n"
    "     RPC failed\n"
    "     (or, never expected, the reply could not be turned into JSON)\n";

// GetStatus of `target`.
grpc::Status FetchStatus(const ServerCommandFlags& common, const std::string& target,
                         shardcast::v1::GetStatusResponse* response) {
  auto stub = shardcast::v1::Shardcast::NewStub(ServerChannel(common, target));
  grpc::ClientContext context;
  SetCallOptions(&context, common.rpc_timeout);
  return stub->GetStatus(&context, shardcast::v1::GetStatusRequest(), response);
}

// The reports of every replica, one after another; a failed call is shown in place of
// its report. Sets *failed when one failed.
std::string ReportEveryReplica(const ServerCommandFlags& common, bool* failed) {
  std::string out;
  for (const std::string& target : common.targets) {
    if (!out.empty()) out += "\n";
    shardcast::v1::GetStatusResponse response;
    const grpc::Status status = FetchStatus(common, target, &response);
    if (status.ok()) {
      out += RenderStatusReport(response, target);
    } else {
      absl::StrAppend(&out, target, ": ", DescribeRpcError(status), "\n");
      *failed = true;
    }
  }
  return out;
}

// The live view: every replica's GetStatus per `interval`, `count` times (0 = until
// interrupted).
int Watch(const ServerCommandFlags& common, absl::Duration interval, int count) {
  // Clearing the screen only makes sense on a terminal; a pipe or a log file gets
  // the reports one after another.
  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  for (int shown = 0; count == 0 || shown < count; ++shown) {
    // Real: the interval a person watching asked for, ended only by Ctrl-C.
    if (shown > 0) absl::SleepFor(interval);
    bool failed = false;
    // The wall time printed for the reader, not a deadline.
    std::string frame =
        absl::StrCat("shardcast-ctl status --watch: every ", FormatFlagDuration(interval), ", ",
                     absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::Now(), absl::UTCTimeZone()),
                     " (Ctrl-C to stop)\n\n", ReportEveryReplica(common, &failed));
    if (terminal) {
      std::fputs("\x1b[H\x1b[2J", stdout);  // cursor home, clear screen
    } else if (shown > 0) {
      std::fputs("\n", stdout);
    }
    std::fputs(frame.c_str(), stdout);
    std::fflush(stdout);
  }
  return kExitOk;
}

// --json: the reply of a single server as it is; of several replicas, a list of
// {"server": ADDR, "status": REPLY}.
int PrintJson(const ServerCommandFlags& common) {
  const bool several = common.targets.size() > 1;
  std::string out = several ? "[" : "";
  int exit_code = kExitOk;
  for (const std::string& target : common.targets) {
    shardcast::v1::GetStatusResponse response;
    const grpc::Status status = FetchStatus(common, target, &response);
    if (!status.ok()) {
      std::fprintf(stderr, "shardcast-ctl status: %s: %s\n", target.c_str(),
                   DescribeRpcError(status).c_str());
      exit_code = kExitUnreachable;
      continue;
    }
    absl::StatusOr<std::string> text = StatusToJson(response);
    if (!text.ok()) {
      std::fprintf(stderr, "shardcast-ctl status: %s\n",
                   std::string(text.status().message()).c_str());
      return kExitUnreachable;
    }
    if (!several) {
      out = *std::move(text);
      break;
    }
    while (!text->empty() && text->back() == '\n') text->pop_back();
    absl::StrAppend(&out, out.size() > 1 ? "," : "", "{\"server\": ", JsonQuote(target),
                    ", \"status\": ", *text, "}");
  }
  if (several) out += "]";
  if (!out.empty()) {
    std::fputs(out.c_str(), stdout);
    if (out.back() != '\n') std::fputc('\n', stdout);
  }
  return exit_code;
}

int RunStatus(const std::vector<std::string>& args) {
  ServerCommandFlags common;
  common.rpc_timeout = absl::Seconds(10);
  bool json = false;
  bool watch = false;
  absl::Duration interval = absl::Seconds(2);
  int count = 0;
  FlagSet flags("shardcast-ctl status");
  AddServerCommandFlags(&flags, &common);
  flags.Bool({{"--json"}, "", "print the reply as JSON (every field, proto3 JSON mapping)"}, &json);
  flags.Bool({{"--watch"}, "", "redraw the report every --interval, like top"}, &watch);
  flags.Duration({{"--interval"}, "DURATION", "--watch: time between two reports"}, &interval);
  flags.Int({{"--count"}, "N", "--watch: stop after N reports (0 = until Ctrl-C)"}, &count, 0);
  if (std::optional<int> done =
          ParseServerCommandFlags("status", flags, args, common, kHelp, kExitCodes)) {
    return *done;
  }
  if (watch && json) {
    std::fprintf(stderr, "shardcast-ctl status: --watch and --json cannot be combined\n");
    return kExitUsage;
  }
  if (interval <= absl::ZeroDuration()) {
    std::fprintf(stderr, "shardcast-ctl status: --interval must be more than 0\n");
    return kExitUsage;
  }

  if (watch) return Watch(common, interval, count);
  if (json) return PrintJson(common);
  bool failed = false;
  const std::string report = ReportEveryReplica(common, &failed);
  // A single server's failure goes to stderr alone, as scripts expect of it.
  if (failed && common.targets.size() == 1) {
    std::fprintf(stderr, "shardcast-ctl status: %s", report.c_str());
    return kExitUnreachable;
  }
  std::fputs(report.c_str(), stdout);
  return failed ? kExitUnreachable : kExitOk;
}

RegisterCommand reg("status",
                    {"jobs, ranks, throughput and errors of a server (--json)", RunStatus});

}  // namespace
}  // namespace shardcast::ctl

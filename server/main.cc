// shardcast-server: indexes a directory of WebDataset shards and streams
// fixed-count batches to registered trainer ranks over gRPC.
#include <grpcpp/version_info.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/accept_reserve.h"
#include "server/base/log.h"
#include "server/base/version.h"
#include "server/daemon.h"
#include "server/net/descriptor_limit.h"
#include "server/server_flags.h"

namespace {

using shardcast::server::LogError;
using shardcast::server::LogInfo;
using shardcast::server::LogWarning;

constexpr char kUsage[] =
    "usage: shardcast-server --shards DIR [--dataset NAME=DIR ...] [--listen HOST:PORT] "
    "[flags]\n"
    "\n"
    "Serves fixed-count batches of WebDataset shard directories over gRPC\n"
    "(service shardcast.v1.Shardcast, grpc.health.v1; reflection with --reflection).\n"
    "SIGTERM/SIGINT drain: health NOT_SERVING, streams finish or are cancelled\n"
    "after --grace-period, exit 0. SIGHUP re-reads --auth-token-file.\n"
    "A listener that stops accepting (see --listener-probe-interval) drains the\n"
    "same way, then exits 75 (EX_TEMPFAIL) for the supervisor to restart.\n"
    "Exit status: 0 drained on a signal, 1 start or indexing failed, 2 usage,\n"
    "75 the listener stopped accepting.\n"
    "\n";

// Blocks the stop signals in every thread (gRPC's included, created later); one thread
// takes them with sigwait (WaitForSignals), so no work happens in a signal handler.
sigset_t BlockStopSignals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);  // reload the token file, never stop
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return stop_signals;
}

void LogStartupFacts(const shardcast::server::ServerOptions& options,
                     const absl::StatusOr<shardcast::server::DescriptorLimit>& descriptors) {
#ifdef SHARDCAST_GRPC_ABI_UNCHECKED
  LogWarning("server", absl::StrCat("built with SHARDCAST_GRPC_ABI_UNCHECKED against gRPC ",
                                    GRPC_CPP_VERSION_STRING,
                                    ", whose socket mutator layout was not verified "
                                    "(server/rpc/grpc_socket_mutator_abi.h): not for production"));
#endif
  if (!descriptors.ok()) {
    LogWarning("server",
               absl::StrCat("descriptor limit unknown: ", descriptors.status().message()));
    return;
  }
  LogInfo("server", absl::StrFormat("descriptor limit %d (was %d, hard limit %d); "
                                    "--max-connections %d, %d per peer; accept queue %d; "
                                    "/metrics connections %d, %d per peer",
                                    descriptors->soft, descriptors->soft_before, descriptors->hard,
                                    options.max_connections, options.max_connections_per_peer,
                                    options.accept_backlog, options.metrics_max_connections,
                                    options.metrics_max_connections_per_peer));
}

void ReloadTokensOnSighup(shardcast::server::Daemon& server) {
  absl::StatusOr<size_t> reloaded = server.ReloadTokens();
  if (reloaded.ok()) {
    LogInfo("server", absl::StrCat("SIGHUP: token file reloaded, ", *reloaded, " tokens accepted"));
  } else if (absl::IsFailedPrecondition(reloaded.status())) {
    LogInfo("server", "SIGHUP: nothing to reload (no --auth-token-file)");
  } else {
    LogError("server", absl::StrCat("SIGHUP: token reload failed, the previous tokens stay "
                                    "in force: ",
                                    reloaded.status().ToString()));
  }
}

// The signal thread: SIGHUP reloads the tokens; the first SIGTERM/SIGINT is stored in
// `received` and notifies `stop`; a second one while draining means "now".
void WaitForSignals(sigset_t stop_signals, shardcast::server::Daemon& server,
                    absl::Notification& stop, std::atomic<int>& received) {
  int stops = 0;
  while (true) {
    int signal_number = 0;
    if (sigwait(&stop_signals, &signal_number) != 0) return;
    if (signal_number == SIGHUP) {
      ReloadTokensOnSighup(server);
      continue;
    }
    if (++stops == 1) {
      received.store(signal_number);
      stop.Notify();
      continue;
    }
    LogError("server", absl::StrCat("second signal (", strsignal(signal_number),
                                    "): exiting without draining"));
    std::_Exit(1);
  }
}

// Serves until a stop signal (drain, exit 0), a failed start of indexing (exit 1) or a
// listener that stopped accepting (drain, exit 75); returns the exit status.
int ServeUntilStopped(shardcast::server::Daemon& server, absl::Notification& stop,
                      const std::atomic<int>& received) {
  while (!stop.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
    std::optional<absl::Status> ready = server.ready_status();
    if (ready.has_value() && !ready->ok()) {
      LogError("server", absl::StrCat("exiting: ", ready->ToString()));
      server.Shutdown();
      return 1;
    }
    // No new client can reach a server whose listener stopped, so it is of no use: it
    // drains as on SIGTERM (open streams get the grace period; their clients resume
    // elsewhere or after the restart) and leaves with a status its supervisor restarts.
    if (std::optional<absl::Status> lost = server.listener_failure(); lost.has_value()) {
      LogError("server",
               absl::StrFormat("%s; draining, then exit %d so that the supervisor restarts "
                               "this server",
                               lost->message(), shardcast::server::Daemon::kExitListenerLost));
      server.Drain();
      LogInfo("server", absl::StrCat("exit ", shardcast::server::Daemon::kExitListenerLost));
      return shardcast::server::Daemon::kExitListenerLost;
    }
  }
  LogInfo("server", absl::StrCat("received ", strsignal(received.load()), "; draining"));
  server.Drain();
  LogInfo("server", "exit 0");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const sigset_t stop_signals = BlockStopSignals();
  shardcast::server::ServerCommandLine cl;
  // Before anything opens a descriptor of its own: see descriptor_limit.h.
  absl::StatusOr<shardcast::server::DescriptorLimit> descriptors =
      shardcast::server::RaiseDescriptorLimit();
  if (descriptors.ok()) cl.descriptors = *descriptors;
  if (absl::Status s = shardcast::server::ParseServerCommandLine(argc, argv, &cl); !s.ok()) {
    std::fprintf(stderr, "shardcast-server: %s (see --help)\n", std::string(s.message()).c_str());
    return 2;
  }
  shardcast::server::SetMinLogLevel(cl.log_level);
  if (cl.help) {
    std::printf("%s%s", kUsage, cl.help_text.c_str());
    return 0;
  }
  if (cl.version) {
    std::printf("shardcast-server %s\n", shardcast::server::kServerVersion);
    return 0;
  }
  LogStartupFacts(cl.options, descriptors);

  // Before the listener exists: the spare that keeps it when descriptors run out.
  if (!shardcast::server::ReserveAcceptDescriptor()) {
    LogWarning(
        "server",
        "no spare descriptor for accept: running out of descriptors would stop the listener");
  }
  shardcast::server::Daemon server(cl.options);
  absl::Status started = server.Start();
  if (!started.ok()) {
    LogError("server", started.ToString());
    return 1;
  }
  std::printf("shardcast-server listening on %s\n", server.listening_address().c_str());
  if (server.metrics_port() != 0) {
    std::printf("shardcast-server metrics on http://%s/metrics\n",
                server.metrics_address().c_str());
  }
  std::fflush(stdout);

  absl::Notification stop;
  std::atomic<int> received{0};
  std::thread(WaitForSignals, stop_signals, std::ref(server), std::ref(stop), std::ref(received))
      .detach();
  return ServeUntilStopped(server, stop, received);
}

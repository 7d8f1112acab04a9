// Connects to the server's own listening address every few seconds and checks that the
// listener accepted the connection, so a listener that stopped accepting is found.
//
// Why: gRPC 1.51 stops its listener for good on an accept() that fails with EMFILE
// (docs/server.md). Connections already open, health on them included, keep
// answering SERVING, and a TCP connect alone still succeeds into the kernel's backlog,
// so neither an orchestrator's probe on a kept connection nor a port check sees it.
// The probe waits for AcceptWatch to see a connection accepted after its own connect;
// after kFailuresBeforeDown probes in a row that see none, it reports the listener
// down (the server turns health NOT_SERVING, drains and exits 75 so that its
// supervisor restarts it: daemon.h), and up again if one succeeds later.
#ifndef SHARDCAST_SERVER_RPC_LISTENER_PROBE_H_
#define SHARDCAST_SERVER_RPC_LISTENER_PROBE_H_

#include <sys/socket.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/rpc/accept_watch.h"

namespace shardcast::server {

// Where a probe connects: the listening address, with an unspecified host (0.0.0.0,
// [::]) replaced by the loopback address of its family.
struct ProbeTarget {
  sockaddr_storage address{};
  socklen_t length = 0;
  std::string text;  // for log lines
};

// The target for a server listening on `listen_address` (HOST:PORT or unix:PATH) whose
// bound port is `port`.
absl::StatusOr<ProbeTarget> ProbeTargetFor(const std::string& listen_address, int port);

class ListenerProbe {
 public:
  static constexpr int kFailuresBeforeDown = 2;

  // `on_change(verdict)` is called on the probe's thread when the listener is found
  // down (the last probe's failure: why nothing was accepted) and when it is found
  // accepting again (OK).
  ListenerProbe(ProbeTarget target, std::shared_ptr<AcceptWatch> watch, absl::Duration interval,
                std::function<void(const absl::Status& verdict)> on_change);
  ~ListenerProbe();  // Stop()
  ListenerProbe(const ListenerProbe&) = delete;
  ListenerProbe& operator=(const ListenerProbe&) = delete;

  void Start();
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // One probe: OK when a connection was accepted after this one connected, else why
  // not (refused, connect timed out, nothing accepted within `timeout`).
  absl::Status ProbeOnce(absl::Duration timeout);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const ProbeTarget target_;
  const std::shared_ptr<AcceptWatch> watch_;
  const absl::Duration interval_;
  const std::function<void(const absl::Status&)> on_change_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_RPC_LISTENER_PROBE_H_

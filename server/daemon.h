// The daemon as an object: a gRPC server (shardcast service, health, reflection when
// asked for) over a ServiceCore, listening first and indexing in the
// background, with a graceful drain for SIGTERM; TLS and bearer tokens per options;
// the Prometheus /metrics endpoint when asked for.
#ifndef SHARDCAST_SERVER_DAEMON_H_
#define SHARDCAST_SERVER_DAEMON_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/assembly/served_dataset.h"
#include "server/net/token_authenticator.h"
#include "server/rpc/accept_watch.h"
#include "server/rpc/grpc_adapter.h"
#include "server/rpc/listener_probe.h"
#include "server/rpc/server_credentials.h"
#include "server/serving/server_options.h"
#include "server/serving/service_core.h"
#include "server/status/metrics_http.h"
#include "server/status/status_history.h"

namespace shardcast::server {

class Daemon {
 public:
  // Full service name, as health checks and reflection know it.
  static constexpr char kServiceName[] = "shardcast.v1.Shardcast";
  // The exit status of a daemon whose listener stopped accepting (listener_failure):
  // EX_TEMPFAIL of sysexits.h, "try again later". Non-zero, so systemd's
  // Restart=on-failure and docker's --restart on-failure restart it; distinct from 1
  // (start or indexing failed) and 2 (usage), so logs and alerts tell them apart.
  static constexpr int kExitListenerLost = 75;

  explicit Daemon(ServerOptions options);
  ~Daemon();  // Shutdown()
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Binds options.listen_address and starts answering (health NOT_SERVING, requests
  // UNAVAILABLE "indexing") while the index is built on a background thread; then
  // SERVING (each dataset's health name as soon as it is indexed). Kept apart from the constructor
  // so a bind failure is a Status and the port chosen for port 0 is known when it returns. With
  // `dataset` given, that dataset is served and nothing is indexed.
  absl::Status Start(std::unique_ptr<ServedDataset> dataset = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  // The health service name of one dataset, e.g. "shardcast.v1.Shardcast/val":
  // SERVING once it is indexed (the server's own name waits for all of them).
  static std::string DatasetHealthName(const std::string& dataset);

  // The bound port (after Start); gRPC's placeholder 1 for a unix: address.
  int port() const { return port_; }
  // The bound port of --health-listen (after Start); 0 when it is off.
  int health_port() const { return health_port_; }
  // What clients connect to (after Start): HOST:PORT with the bound port, or the
  // unix:PATH address as given.
  std::string listening_address() const;
  // The bound /metrics port (after Start); 0 when options.metrics_listen_address is empty.
  int metrics_port() const { return metrics_ == nullptr ? 0 : metrics_->port(); }
  // HOST:PORT of /metrics with the bound port (after Start); empty without metrics.
  std::string metrics_address() const;

  // Blocks until indexing has finished; its result.
  absl::Status WaitUntilReady() ABSL_LOCKS_EXCLUDED(mu_);
  // Indexing result without blocking; nullopt while indexing.
  std::optional<absl::Status> ready_status() const ABSL_LOCKS_EXCLUDED(mu_);

  // Why the listener accepts no more connections, once the listener probe found so:
  // gRPC 1.51 stops its listener for good after a failed accept (EMFILE), so the
  // verdict stays even if a later probe gets through. nullopt while it accepts (or with
  // the probe off). The daemon drains and exits kExitListenerLost on it (main.cc): a
  // server that cannot accept is of no use, and its supervisor restarts it.
  std::optional<absl::Status> listener_failure() const ABSL_LOCKS_EXCLUDED(mu_);

  // Graceful stop: health NOT_SERVING, new registrations and streams refused
  // (UNAVAILABLE), open streams may finish for up to options.grace_period, then
  // the rest are cancelled and the server stops. Idempotent; blocks until stopped.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // Drain with no grace period.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // Re-reads options.auth_token_file (SIGHUP). On failure the old tokens stay in
  // force. FAILED_PRECONDITION when the server takes no tokens.
  absl::StatusOr<size_t> ReloadTokens();

  ServiceCore& impl() { return *impl_; }
  const ServerOptions& options() const { return options_; }

 private:
  // Health SERVING exactly when indexing succeeded, no drain began and the listener
  // accepts connections; NOT_SERVING otherwise.
  void UpdateHealth() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetServing(bool serving);
  // Start's steps, in order. The bearer tokens (--auth-token-file), read once.
  absl::Status LoadTokens();
  // The gRPC server on its listener, with its accept queue and socket permissions;
  // server_ stays null when it fails.
  absl::Status StartGrpc();
  // The --health-listen server (after StartGrpc).
  absl::Status StartHealthListener();
  // `set(health)` on the main server's health service and the --health-listen one's.
  void ForEachHealthService(const std::function<void(grpc::HealthCheckServiceInterface*)>& set);
  // Starts the listener probe (options.listener_probe_interval; after StartGrpc), after
  // one probe that must succeed: a listener whose accepts the socket mutator does not
  // see (a gRPC whose layout differs from grpc_socket_mutator_abi.h) fails Start.
  absl::Status StartListenerProbe();
  // The probe's verdict on the listener: OK when it accepts.
  void ListenerVerdict(const absl::Status& verdict) ABSL_LOCKS_EXCLUDED(mu_);
  // /metrics and the status page at / (options.metrics_listen_address), when asked for.
  absl::Status StartMetricsEndpoint();
  // Serves `dataset` at once, or indexes the options' datasets on a thread.
  void StartServing(std::unique_ptr<ServedDataset> dataset) ABSL_LOCKS_EXCLUDED(mu_);
  void SetDatasetServing(const std::string& dataset) ABSL_LOCKS_EXCLUDED(mu_);
  void StopServer(absl::Duration grace) ABSL_LOCKS_EXCLUDED(mu_);

  const ServerOptions options_;
  const std::unique_ptr<ServiceCore> impl_;
  const std::unique_ptr<TokenAuthenticator> tokens_;  // null without auth_token_file
  GrpcAdapter service_;                               // refers to impl_ and tokens_
  // Sees every accepted connection (counted, limited, probed); shared with the socket
  // mutator gRPC keeps.
  const std::shared_ptr<AcceptWatch> accept_watch_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ListenerProbe> listener_probe_;  // null when the interval is zero
  std::unique_ptr<MetricsHttpServer> metrics_;     // null without --metrics-listen
  // The status page's charts: sampled by the metrics listener's tick, on the core's clock.
  StatusHistory status_history_{options_.clock};
  int port_ = 0;
  // --health-listen: a plaintext server with only the health service.
  std::unique_ptr<grpc::Server> health_server_;
  int health_port_ = 0;
  std::thread indexer_;  // builds the index after Start()

  mutable absl::Mutex mu_;
  std::optional<absl::Status> ready_ ABSL_GUARDED_BY(mu_);  // indexing result
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool listener_accepting_ ABSL_GUARDED_BY(mu_) = true;  // the listener probe's verdict
  // The first verdict that the listener is down; kept (see listener_failure()).
  std::optional<absl::Status> listener_failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_DAEMON_H_

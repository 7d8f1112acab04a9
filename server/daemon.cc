// The gRPC daemon object (see daemon.h).
#include "server/daemon.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/base/log.h"
#include "server/net/unix_socket.h"
#include "server/rpc/listener_probe.h"
#include "server/status/metrics_text.h"
#include "server/status/status_page.h"

namespace shardcast::server {

namespace {
// Room above the largest batch for the message's other fields.
constexpr int64_t kSendSizeMargin = 1 << 20;
constexpr int kMaxConcurrentStreams = 256;
// How long the first listener probe at start waits for its connection to be accepted.
constexpr absl::Duration kFirstProbeTimeout = absl::Seconds(5);

// Takes gRPC's reflection plugin out of one server. Loading libgrpc++_reflection
// registers the plugin for every server of the process (a static initializer), so
// "reflection off" has to remove it from the builder rather than just not ask for it.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(
        std::remove_if(plugins->begin(), plugins->end(),
                       [](const std::unique_ptr<grpc::ServerBuilderPlugin>& plugin) {
                         return dynamic_cast<grpc::reflection::ProtoServerReflectionPlugin*>(
                                    plugin.get()) != nullptr;
                       }),
        plugins->end());
  }
};
}  // namespace

Daemon::Daemon(ServerOptions options)
    : options_(std::move(options)),
      impl_(std::make_unique<ServiceCore>(options_)),
      tokens_(options_.auth_token_file.empty()
                  ? nullptr
                  : std::make_unique<TokenAuthenticator>(options_.auth_token_file)),
      service_(impl_.get(), tokens_.get()),
      accept_watch_(std::make_shared<AcceptWatch>(options_.max_connections,
                                                  options_.max_connections_per_peer,
                                                  &impl_->stats(), options_.clock)) {}

absl::StatusOr<size_t> Daemon::ReloadTokens() {
  if (tokens_ == nullptr) {
    return absl::FailedPreconditionError("no --auth-token-file: the server takes no tokens");
  }
  return tokens_->Reload();
}

Daemon::~Daemon() {
  Shutdown();
  if (indexer_.joinable()) indexer_.join();
}

namespace {

// HOST:PORT as configured, with the port gRPC or the kernel bound (a configured 0 is
// replaced); the brackets of an IPv6 host are kept.
std::string WithBoundPort(const std::string& address, int port) {
  const size_t colon = address.rfind(':');
  return absl::StrCat(colon == std::string::npos ? address : address.substr(0, colon), ":", port);
}

}  // namespace

std::string Daemon::listening_address() const {
  if (UnixSocketPath(options_.listen_address).has_value()) return options_.listen_address;
  return WithBoundPort(options_.listen_address, port_);
}

std::string Daemon::metrics_address() const {
  if (metrics_ == nullptr) return "";
  return WithBoundPort(options_.metrics_listen_address, metrics_->port());
}

std::string Daemon::DatasetHealthName(const std::string& dataset) {
  return absl::StrCat(kServiceName, "/", dataset);
}

void Daemon::ForEachHealthService(
    const std::function<void(grpc::HealthCheckServiceInterface*)>& set) {
  for (grpc::Server* server : {server_.get(), health_server_.get()}) {
    if (server == nullptr) continue;
    if (grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService()) set(health);
  }
}

void Daemon::SetServing(bool serving) {
  const std::vector<DatasetRegistry::Entry> entries = impl_->datasets().Entries();
  ForEachHealthService([&](grpc::HealthCheckServiceInterface* health) {
    health->SetServingStatus("", serving);
    health->SetServingStatus(kServiceName, serving);
    for (const DatasetRegistry::Entry& entry : entries) {
      health->SetServingStatus(DatasetHealthName(entry.spec.name),
                               serving && entry.state == DatasetRegistry::State::kServing);
    }
  });
}

void Daemon::UpdateHealth() {
  SetServing(ready_.has_value() && ready_->ok() && !stopped_ && listener_accepting_);
}

absl::Status Daemon::StartListenerProbe() {
  if (options_.listener_probe_interval <= absl::ZeroDuration()) return absl::OkStatus();
  absl::StatusOr<ProbeTarget> target = ProbeTargetFor(options_.listen_address, port_);
  if (!target.ok()) return target.status();
  listener_probe_ = std::make_unique<ListenerProbe>(
      *std::move(target), accept_watch_, options_.listener_probe_interval,
      [this](const absl::Status& verdict) { ListenerVerdict(verdict); });
  // A fresh listener accepts: a first probe that fails means the socket mutator does
  // not see accepts, and every later probe would fail too, so the server would exit
  // kExitListenerLost after each restart. Said once, here, with its cause.
  if (absl::Status first = listener_probe_->ProbeOnce(kFirstProbeTimeout); !first.ok()) {
    listener_probe_.reset();
    return absl::InternalError(absl::StrCat(
        "listener self-check: the server's own connection to ", listening_address(),
        " was not seen accepted (", first.message(),
        "): either this host drops connections to itself, or the gRPC library does not call "
        "the socket mutator as server/rpc/grpc_socket_mutator_abi.h expects (docs/server.md, "
        "'gRPC version guard'); --listener-probe-interval 0 turns the probe off"));
  }
  listener_probe_->Start();
  return absl::OkStatus();
}

void Daemon::ListenerVerdict(const absl::Status& verdict) {
  impl_->stats().listener_accepting.store(verdict.ok());
  absl::MutexLock lock(&mu_);
  listener_accepting_ = verdict.ok();
  if (!verdict.ok() && !listener_failure_.has_value()) listener_failure_ = verdict;
  if (!stopped_) UpdateHealth();
}

std::optional<absl::Status> Daemon::listener_failure() const {
  absl::MutexLock lock(&mu_);
  return listener_failure_;
}

void Daemon::SetDatasetServing(const std::string& dataset) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  ForEachHealthService([&](grpc::HealthCheckServiceInterface* health) {
    health->SetServingStatus(DatasetHealthName(dataset), true);
  });
}

absl::Status Daemon::Start(std::unique_ptr<ServedDataset> dataset) {
  {
    absl::MutexLock lock(&mu_);
    if (started_) return absl::FailedPreconditionError("server already started");
    started_ = true;
  }
  if (absl::Status s = LoadTokens(); !s.ok()) return s;
  if (absl::Status s = StartGrpc(); !s.ok()) return s;
  if (absl::Status s = StartHealthListener(); !s.ok()) {
    server_->Shutdown();
    server_.reset();
    return s;
  }
  SetServing(false);
  // What watches the listener and serves /metrics: stopped again if either fails.
  absl::Status watchers = StartListenerProbe();
  if (watchers.ok()) watchers = StartMetricsEndpoint();
  if (!watchers.ok()) {
    metrics_.reset();
    listener_probe_.reset();
    server_->Shutdown();
    server_.reset();
    return watchers;
  }
  LogInfo("server",
          absl::StrFormat("listening on %s (%s%s, %d decode threads, prefetch %d)",
                          listening_address(), options_.tls_cert_file.empty() ? "plaintext" : "TLS",
                          options_.tls_client_ca_file.empty() ? "" : " + client certificates",
                          impl_->pool().threads(), options_.prefetch));
  StartServing(std::move(dataset));
  return absl::OkStatus();
}

absl::Status Daemon::LoadTokens() {
  if (tokens_ == nullptr) return absl::OkStatus();
  absl::StatusOr<size_t> loaded = tokens_->Reload();
  if (!loaded.ok()) return loaded.status();
  LogInfo("server",
          absl::StrFormat("bearer tokens required on shardcast.v1 calls (%d accepted)", *loaded));
  if (options_.tls_cert_file.empty()) {
    LogWarning("server",
               "--auth-token-file without --tls-cert: bearer tokens travel in plaintext and "
               "anyone on the network path can read and reuse them");
  }
  return absl::OkStatus();
}

absl::Status Daemon::StartGrpc() {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options_);
  if (!credentials.ok()) return credentials.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!options_.reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  const std::optional<std::string> socket_path = UnixSocketPath(options_.listen_address);
  if (socket_path.has_value()) {
    if (absl::Status s = PrepareUnixSocket(*socket_path); !s.ok()) return s;
  }
  builder.AddListeningPort(options_.listen_address, *credentials, &port_);
  builder.RegisterService(&service_);
  builder.SetOption(accept_watch_->BuilderOption());
  // Find dead peers (a trainer host that vanished without closing its connection) so
  // their streams are cancelled and their buffers freed, and accept the keepalive
  // pings that clients of long streams send.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60 * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10 * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // A connection holds at most this many calls at once (a client has one stream per
  // rank plus a few unary calls; beyond it a client queues its calls). It bounds what
  // one connection holds, not a rapid-reset flood: gRPC 1.51 has no setting for that
  // (docs/server.md, "HTTP/2 rapid reset").
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams);
  const int64_t send_limit = options_.max_message_bytes + kSendSizeMargin;
  builder.SetMaxSendMessageSize(send_limit > INT32_MAX ? INT32_MAX : static_cast<int>(send_limit));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    // Room for the longest "unix://PATH", so that a socket's path is shown whole.
    constexpr size_t kAddressLogBytes = sizeof("unix://") + kMaxUnixSocketPathBytes;
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on '", LogSafe(options_.listen_address, kAddressLogBytes), "'"));
  }
  absl::Status listener = absl::OkStatus();
  if (options_.accept_backlog > 0) {
    listener = accept_watch_->SetAcceptBacklog(static_cast<int>(options_.accept_backlog));
  }
  if (listener.ok() && socket_path.has_value()) listener = RestrictUnixSocket(*socket_path);
  if (!listener.ok()) {
    server_->Shutdown();
    server_.reset();
  }
  return listener;
}

absl::Status Daemon::StartHealthListener() {
  if (options_.health_listen_address.empty()) return absl::OkStatus();
  // The default health service (EnableDefaultHealthCheckService, set before the main
  // server was built) comes with every server; this one registers nothing else.
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.health_listen_address, grpc::InsecureServerCredentials(),
                           &health_port_);
  health_server_ = builder.BuildAndStart();
  if (health_server_ == nullptr || health_port_ == 0) {
    health_server_.reset();
    return absl::UnavailableError(absl::StrCat("--health-listen: cannot listen on '",
                                               LogSafe(options_.health_listen_address), "'"));
  }
  LogInfo("server",
          absl::StrCat("health on ", WithBoundPort(options_.health_listen_address, health_port_),
                       " (plaintext, grpc.health.v1 only)"));
  return absl::OkStatus();
}

absl::Status Daemon::StartMetricsEndpoint() {
  if (options_.metrics_listen_address.empty()) return absl::OkStatus();
  MetricsHttpServer::Limits limits;
  limits.max_connections = static_cast<int>(options_.metrics_max_connections);
  limits.max_connections_per_peer = static_cast<int>(options_.metrics_max_connections_per_peer);
  metrics_ = std::make_unique<MetricsHttpServer>(
      options_.metrics_listen_address, [this] { return RenderPrometheusText(impl_->Metrics()); },
      tokens_.get(), limits);
  metrics_->ServeStatusPage([this] {
    const v1::GetStatusResponse status = impl_->GetStatus();
    status_history_.Record(status);
    return RenderStatusPage(status, status_history_.Points(),
                            absl::ToDoubleSeconds(status_history_.span()));
  });
  metrics_->SetTick(StatusHistory::kDefaultInterval,
                    [this] { status_history_.Record(impl_->GetStatus()); });
  if (absl::Status s = metrics_->Start(); !s.ok()) return s;
  LogInfo("server", absl::StrFormat("metrics on http://%s/metrics, status page on http://%s/%s",
                                    metrics_address(), metrics_address(),
                                    tokens_ != nullptr ? ", bearer token required" : ""));
  if (!options_.tls_cert_file.empty()) {
    LogWarning("server",
               "--metrics-listen is plain HTTP although gRPC uses TLS: job ids and figures "
               "(and the bearer token, with --auth-token-file) cross the network in clear; "
               "bind it to loopback or a private scrape network");
  }
  return absl::OkStatus();
}

void Daemon::StartServing(std::unique_ptr<ServedDataset> dataset) {
  if (dataset != nullptr) {
    impl_->SetDataset(std::move(dataset));
    SetDatasetServing(kDefaultDatasetName);
    absl::MutexLock lock(&mu_);
    ready_ = absl::OkStatus();
    if (!stopped_) UpdateHealth();
    return;
  }
  indexer_ = std::thread([this] {
    absl::Status status =
        impl_->LoadDatasets([this](const std::string& name) { SetDatasetServing(name); });
    absl::MutexLock lock(&mu_);
    ready_ = status;
    if (status.ok() && !stopped_) {
      UpdateHealth();
      LogInfo("server", "serving");
    }
  });
}

absl::Status Daemon::WaitUntilReady() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::optional<absl::Status>* ready) { return ready->has_value(); }, &ready_));
  return *ready_;
}

std::optional<absl::Status> Daemon::ready_status() const {
  absl::MutexLock lock(&mu_);
  return ready_;
}

void Daemon::Drain() { StopServer(options_.grace_period); }

void Daemon::Shutdown() { StopServer(absl::ZeroDuration()); }

void Daemon::StopServer(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_ || server_ == nullptr) return;
    stopped_ = true;
  }
  // Refusing first: whoever sees NOT_SERVING finds new work refused as well.
  impl_->BeginDrain();
  {
    absl::MutexLock lock(&mu_);
    UpdateHealth();
  }
  if (listener_probe_ != nullptr) listener_probe_->Stop();
  const int64_t open = impl_->streams().open_streams();
  LogInfo("server", absl::StrFormat("draining: NOT_SERVING, %d open streams, grace %s", open,
                                    absl::FormatDuration(grace)));
  // Real time: the grace is a wait for real streams to end, bounded for SIGTERM.
  impl_->streams().AwaitNoOpenStreams(absl::Now() + grace);
  const int64_t left = impl_->streams().open_streams();
  if (left > 0) {
    LogWarning("server", absl::StrFormat("grace period over: cancelling %d open streams", left));
  }
  // Cancels whatever is still open, then waits for every call to finish.
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  if (health_server_ != nullptr) health_server_->Shutdown(std::chrono::system_clock::now());
  if (metrics_ != nullptr) metrics_->Stop();
  LogInfo("server", "stopped");
}

}  // namespace shardcast::server

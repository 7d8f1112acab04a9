// The /metrics HTTP endpoint over libmicrohttpd (see metrics_http.h).
#include "server/status/metrics_http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/log.h"
#include "server/net/host_port.h"

namespace shardcast::server {

namespace {

constexpr const char* kPlainText = "text/plain; charset=utf-8";
constexpr const char* kPrometheusText = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kHtml = "text/html; charset=utf-8";

HttpAnswer Answer(int status, std::string body, const char* content_type = kPlainText) {
  HttpAnswer answer;
  answer.status = status;
  answer.body = std::move(body);
  answer.content_type = content_type;
  return answer;
}

// The peer's address as bytes (IPv4 and IPv6 alike; no port): the per-peer key.
std::string PeerKey(const sockaddr* address) {
  if (address == nullptr) return "";
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    return std::string(reinterpret_cast<const char*>(&v4->sin_addr), sizeof(v4->sin_addr));
  }
  if (address->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
    return std::string(reinterpret_cast<const char*>(&v6->sin6_addr), sizeof(v6->sin6_addr));
  }
  return "";
}

// The peer's address as a log line writes it.
std::string PeerName(const std::string& key) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (key.size() == 4) ::inet_ntop(AF_INET, key.data(), text, sizeof(text));
  if (key.size() == 16) ::inet_ntop(AF_INET6, key.data(), text, sizeof(text));
  return text;
}

// True at most once per 10 s: a flood is worth one log line, not one per connection.
bool ShouldWarn(absl::Time now, absl::Time* last_warning) {
  if (now - *last_warning < absl::Seconds(10)) return false;
  *last_warning = now;
  return true;
}

// libmicrohttpd's own error messages (out of descriptors at accept, a connection it
// could not set up), at most one line per 10 s: they come once per event.
void LogLibraryMessage(void* /*cls*/, const char* format, va_list args) {
  static absl::Mutex mu;
  static absl::Time last ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  char text[512];
  std::vsnprintf(text, sizeof(text), format, args);
  absl::MutexLock lock(&mu);
  if (!ShouldWarn(absl::Now(), &last)) return;
  std::string line = text;
  while (!line.empty() && line.back() == '\n') line.pop_back();
  LogWarning("metrics", absl::StrCat("libmicrohttpd: ", line));
}

}  // namespace

// The C callbacks libmicrohttpd takes, each handing over to the server it was given.
struct MetricsHttpCallbacks {
  static MHD_Result Accept(void* cls, const sockaddr* address, socklen_t /*length*/) {
    return static_cast<MetricsHttpServer*>(cls)->AcceptPeer(PeerKey(address)) ? MHD_YES : MHD_NO;
  }
  static void Notify(void* cls, MHD_Connection* connection, void** /*socket_context*/,
                     MHD_ConnectionNotificationCode code) {
    auto* server = static_cast<MetricsHttpServer*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) server->ConnectionStarted(connection);
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) server->ConnectionClosed(connection);
  }
  static MHD_Result Request(void* cls, MHD_Connection* connection, const char* url,
                            const char* method, const char* /*version*/,
                            const char* /*upload_data*/, size_t* upload_data_size,
                            void** /*request_context*/) {
    // The head is complete at the first call; a body (none is expected) is discarded.
    *upload_data_size = 0;
    return static_cast<MetricsHttpServer*>(cls)->HandleRequest(connection, url, method) != 0
               ? MHD_YES
               : MHD_NO;
  }
};

HttpAnswer RespondToMetricsRequest(const HttpRequest& request, const TokenAuthenticator* tokens,
                                   const std::function<std::string()>& render,
                                   const std::function<std::string()>& render_page) {
  const bool is_page = request.path == "/" && render_page != nullptr;
  if (request.path != "/metrics" && !is_page) {
    return Answer(404, render_page != nullptr ? "shardcast-server serves / and /metrics here\n"
                                              : "shardcast-server serves only /metrics here\n");
  }
  const bool head_only = request.method == "HEAD";
  if (request.method != "GET" && !head_only) {
    HttpAnswer answer = Answer(405, absl::StrCat("GET ", request.path, "\n"));
    answer.headers["Allow"] = "GET, HEAD";
    return answer;
  }
  // The page shows the same job ids and figures as /metrics: the same token rule.
  if (tokens != nullptr) {
    if (absl::Status auth = tokens->Check(request.authorization); !auth.ok()) {
      HttpAnswer answer = Answer(401, absl::StrCat(auth.message(), "\n"));
      answer.headers["WWW-Authenticate"] = "Bearer";
      return answer;
    }
  }
  HttpAnswer answer =
      is_page ? Answer(200, render_page(), kHtml) : Answer(200, render(), kPrometheusText);
  answer.head_only = head_only;
  return answer;
}

void MetricsHttpServer::ServeStatusPage(std::function<std::string()> render_page) {
  render_page_ = std::move(render_page);
}

void MetricsHttpServer::SetTick(absl::Duration period, std::function<void()> tick) {
  tick_period_ = period;
  tick_ = std::move(tick);
}

MetricsHttpServer::MetricsHttpServer(std::string listen_address,
                                     std::function<std::string()> render,
                                     const TokenAuthenticator* tokens)
    : MetricsHttpServer(std::move(listen_address), std::move(render), tokens, Limits()) {}

MetricsHttpServer::MetricsHttpServer(std::string listen_address,
                                     std::function<std::string()> render,
                                     const TokenAuthenticator* tokens, Limits limits)
    : listen_address_(std::move(listen_address)),
      render_(std::move(render)),
      tokens_(tokens),
      limits_(limits) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::Status MetricsHttpServer::Start() {
  absl::StatusOr<HostPort> host_port = SplitHostPort(listen_address_);
  if (!host_port.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen: ", host_port.status().message()));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int resolved = ::getaddrinfo(host_port->host.empty() ? nullptr : host_port->host.c_str(),
                                     host_port->port.c_str(), &hints, &found);
  if (resolved != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics-listen '", LogSafe(listen_address_),
                                                   "': ", gai_strerror(resolved)));
  }
  // The socket is bound here rather than by libmicrohttpd so that HOST:PORT means what
  // it means for --listen (a name, [V6], every address) and a bind error is a Status.
  std::string error = "no address";
  for (addrinfo* ai = found; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    const int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, kListenBacklog) == 0) {
      listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("--metrics-listen: cannot listen on '",
                                               LogSafe(listen_address_), "': ", error));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);

  // One internal thread on epoll: rendering is short and needs no second thread, and
  // thread-per-connection would give a flood one thread per socket. The per-peer limit
  // is applied in the accept policy (AcceptPeer) rather than with
  // MHD_OPTION_PER_IP_CONNECTION_LIMIT, whose refusals nobody could count or log.
  const auto idle_seconds = static_cast<unsigned int>(std::max<int64_t>(
      1, absl::ToInt64Seconds(absl::Ceil(limits_.idle_timeout, absl::Seconds(1)))));
  daemon_ = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG, /*port=*/0,
      &MetricsHttpCallbacks::Accept, this, &MetricsHttpCallbacks::Request, this,
      // First, so that every message of the library goes through it.
      MHD_OPTION_EXTERNAL_LOGGER, &LogLibraryMessage, nullptr, MHD_OPTION_LISTEN_SOCKET, listen_fd_,
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned int>(std::max(1, limits_.max_connections)),
      MHD_OPTION_CONNECTION_TIMEOUT, idle_seconds,
      // The head's buffer: a head longer than this is answered 431.
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<size_t>(2 * kMaxHeadBytes),
      MHD_OPTION_NOTIFY_CONNECTION, &MetricsHttpCallbacks::Notify, this, MHD_OPTION_END);
  if (daemon_ == nullptr) {
    ::close(listen_fd_);
    listen_fd_ = -1;
    return absl::InternalError(absl::StrCat("--metrics-listen: libmicrohttpd did not start on '",
                                            LogSafe(listen_address_), "'"));
  }
  {
    absl::MutexLock lock(&mu_);
    stopping_ = false;
  }
  watch_thread_ = std::thread([this] { Watch(); });
  return absl::OkStatus();
}

void MetricsHttpServer::Stop() {
  if (daemon_ == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  watch_thread_.join();
  MHD_stop_daemon(daemon_);  // closes every connection and the listening socket
  daemon_ = nullptr;
  listen_fd_ = -1;
}

bool MetricsHttpServer::AcceptPeer(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  const auto held = per_peer_.find(peer);
  if (held == per_peer_.end() || held->second < limits_.max_connections_per_peer) return true;
  const int64_t refused = refused_connections_.fetch_add(1) + 1;
  if (ShouldWarn(absl::Now(), &last_refusal_warning_)) {
    LogWarning("metrics", absl::StrCat("peer ", PeerName(peer), " holds ", held->second,
                                       " connections (the most one peer may): closing more (",
                                       refused, " so far)"));
  }
  return false;
}

void MetricsHttpServer::ConnectionStarted(MHD_Connection* connection) {
  const MHD_ConnectionInfo* fd =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
  const MHD_ConnectionInfo* address =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  OpenConnection open;
  open.fd = fd != nullptr ? fd->connect_fd : -1;
  open.peer = PeerKey(address != nullptr ? address->client_addr : nullptr);
  open.deadline = absl::Now() + limits_.read_timeout;
  absl::MutexLock lock(&mu_);
  ++per_peer_[open.peer];
  open_[connection] = std::move(open);
}

void MetricsHttpServer::ConnectionClosed(MHD_Connection* connection) {
  // libmicrohttpd closes the socket after this returns, so while the watch holds mu_ an
  // fd in open_ is still this connection's (a shutdown never reaches another socket).
  absl::MutexLock lock(&mu_);
  const auto it = open_.find(connection);
  if (it == open_.end()) return;
  const auto held = per_peer_.find(it->second.peer);
  if (held != per_peer_.end() && --held->second <= 0) per_peer_.erase(held);
  open_.erase(it);
}

int MetricsHttpServer::HandleRequest(MHD_Connection* connection, const char* url,
                                     const char* method) {
  {
    absl::MutexLock lock(&mu_);
    const auto it = open_.find(connection);
    if (it != open_.end()) it->second.deadline = absl::Now() + limits_.write_timeout;
  }
  HttpRequest request;
  request.method = method != nullptr ? method : "";
  request.path = url != nullptr ? url : "";  // libmicrohttpd has cut the query string
  const char* authorization =
      MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (authorization != nullptr) request.authorization = authorization;
  const HttpAnswer answer = RespondToMetricsRequest(request, tokens_, render_, render_page_);
  MHD_Response* response = MHD_create_response_from_buffer(
      answer.body.size(), const_cast<char*>(answer.body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return 0;
  // HEAD: libmicrohttpd sends the head alone, with the body's Content-Length.
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, answer.content_type.c_str());
  for (const auto& [name, value] : answer.headers) {
    MHD_add_response_header(response, name.c_str(), value.c_str());
  }
  // One request per connection, as a scrape makes: nothing is kept open between them.
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
  const MHD_Result queued =
      MHD_queue_response(connection, static_cast<unsigned int>(answer.status), response);
  MHD_destroy_response(response);
  return queued == MHD_YES ? 1 : 0;
}

void MetricsHttpServer::Watch() {
  absl::Time next_tick = tick_ != nullptr ? absl::Now() : absl::InfiniteFuture();
  // A connection that starts after a wait began has a deadline at least this far after
  // it, so waking this often (at the latest) cuts every one in time.
  const absl::Duration shortest = std::min(limits_.read_timeout, limits_.write_timeout);
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    absl::Time now = absl::Now();
    if (now >= next_tick) {
      mu_.Unlock();
      tick_();
      mu_.Lock();
      next_tick = now + tick_period_;
      now = absl::Now();
    }
    absl::Time wake = std::min(next_tick, now + shortest);
    for (auto& [connection, open] : open_) {
      if (open.cut) continue;
      if (open.deadline <= now) {
        // A head (or answer) past its deadline, however it trickles: libmicrohttpd's
        // own timeout is for silence only. Its next read sees the end and closes it.
        ::shutdown(open.fd, SHUT_RDWR);
        open.cut = true;
      } else {
        wake = std::min(wake, open.deadline);
      }
    }
    mu_.AwaitWithDeadline(absl::Condition(&stopping_), wake);
  }
}

}  // namespace shardcast::server

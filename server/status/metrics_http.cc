// The /metrics HTTP endpoint (see metrics_http.h).
#include "server/status/metrics_http.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/base/log.h"
#include "server/net/host_port.h"

namespace shardcast::server {

namespace {

constexpr const char* kPlainText = "text/plain; charset=utf-8";
constexpr const char* kPrometheusText = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kHtml = "text/html; charset=utf-8";

std::string Response(const char* status_line, const std::string& body,
                     const std::string& extra_headers = "", bool head_only = false,
                     const char* content_type = kPlainText) {
  return absl::StrCat("HTTP/1.1 ", status_line, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\n", extra_headers,
                      "Connection: close\r\n\r\n", head_only ? "" : body);
}

// poll()'s timeout until `next`, rounded up so that the loop wakes after a deadline,
// never a millisecond before it (which would spin until it passes); -1 = none.
int PollTimeoutMs(absl::Time now, absl::Time next) {
  if (next == absl::InfiniteFuture()) return -1;
  if (next <= now) return 0;
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(next - now, absl::Milliseconds(1)));
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

// Closes a connection whose answer (if any) was sent. What the peer sent beyond its
// head is read away first: closing with unread input makes the kernel reset the
// connection, and a reset can discard the answer before the peer reads it.
void CloseConnection(int fd) {
  char discard[4096];
  for (int i = 0; i < 16; ++i) {  // bounded: a peer may keep sending
    if (::recv(fd, discard, sizeof(discard), MSG_DONTWAIT) <= 0) break;
  }
  ::close(fd);
}

// True at most once per 10 s: a flood of connections or an exhausted descriptor table
// is worth one log line, not one per event.
bool ShouldWarn(absl::Time now, absl::Time* last_warning) {
  if (now - *last_warning < absl::Seconds(10)) return false;
  *last_warning = now;
  return true;
}

// accept4() errors that concern only the connection being accepted (Linux reports a
// pending connection's network error there): the next one may be fine.
bool IsPerConnectionAcceptError(int error) {
  switch (error) {
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
    case EPERM:
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::StatusOr<HttpRequest> ParseHttpRequestHead(absl::string_view head) {
  const size_t line_end = head.find("\r\n");
  const absl::string_view request_line = head.substr(0, line_end);
  std::vector<absl::string_view> parts = absl::StrSplit(request_line, ' ');
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty() ||
      !absl::StartsWith(parts[2], "HTTP/1.")) {
    return absl::InvalidArgumentError("malformed request line");
  }
  HttpRequest request;
  request.method = std::string(parts[0]);
  absl::string_view path = parts[1];
  path = path.substr(0, path.find('?'));
  request.path = std::string(path);
  if (line_end == absl::string_view::npos) return request;
  for (absl::string_view line : absl::StrSplit(head.substr(line_end + 2), "\r\n")) {
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) return absl::InvalidArgumentError("malformed header");
    if (absl::EqualsIgnoreCase(line.substr(0, colon), "authorization")) {
      request.authorization = std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return request;
}

std::string RespondToMetricsRequest(const HttpRequest& request, const TokenAuthenticator* tokens,
                                    const std::function<std::string()>& render,
                                    const std::function<std::string()>& render_page) {
  const bool is_page = request.path == "/" && render_page != nullptr;
  if (request.path != "/metrics" && !is_page) {
    return Response("404 Not Found", render_page != nullptr
                                         ? "shardcast-server serves / and /metrics here\n"
                                         : "shardcast-server serves only /metrics here\n");
  }
  const bool head_only = request.method == "HEAD";
  if (request.method != "GET" && !head_only) {
    return Response("405 Method Not Allowed", absl::StrCat("GET ", request.path, "\n"),
                    "Allow: GET, HEAD\r\n");
  }
  // The page shows the same job ids and figures as /metrics: the same token rule.
  if (tokens != nullptr) {
    if (absl::Status auth = tokens->Check(request.authorization); !auth.ok()) {
      return Response("401 Unauthorized", absl::StrCat(auth.message(), "\n"),
                      "WWW-Authenticate: Bearer\r\n");
    }
  }
  if (is_page) return Response("200 OK", render_page(), "", head_only, kHtml);
  return Response("200 OK", render(), "", head_only, kPrometheusText);
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
  std::string error = "no address";
  for (addrinfo* ai = found; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    // Non-blocking: the loop accepts until EAGAIN, and a peer that gave up between
    // poll() and accept4() must not block it.
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
  if (::pipe2(stop_fds_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
    return absl::InternalError(absl::StrCat("metrics: pipe: ", std::strerror(errno)));
  }
  thread_ = std::thread([this] { EventLoop(); });
  return absl::OkStatus();
}

void MetricsHttpServer::Stop() {
  if (!thread_.joinable()) return;
  const char byte = 0;
  (void)!::write(stop_fds_[1], &byte, 1);
  thread_.join();
  ::close(listen_fd_);
  ::close(stop_fds_[0]);
  ::close(stop_fds_[1]);
  listen_fd_ = -1;
}

// One connection: its request head as it arrives, then the answer as the socket takes it.
struct MetricsHttpServer::Connection {
  int fd = -1;
  absl::Time deadline;  // for the whole head while reading, for the answer while writing
  bool writing = false;
  std::string data;  // the head so far, then the answer
  size_t written = 0;
};

void MetricsHttpServer::EventLoop() {
  std::vector<Connection> connections;
  std::vector<pollfd> fds;
  absl::Time next_tick = tick_ != nullptr ? absl::Now() : absl::InfiniteFuture();
  while (true) {
    // Real time: every time here is a poll() deadline on real sockets (the accept
    // backoff, a connection's head and answer), which a clock nobody moves would hang.
    absl::Time now = absl::Now();
    if (now >= next_tick) {
      tick_();
      next_tick = now + tick_period_;
      now = absl::Now();
    }
    absl::Time next = next_tick;
    fds.clear();
    fds.push_back({stop_fds_[0], POLLIN, 0});
    // A negative descriptor is ignored by poll(): not accepting while backing off.
    const bool accepting = now >= accept_paused_until_;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    if (!accepting) next = accept_paused_until_;
    for (const Connection& connection : connections) {
      fds.push_back({connection.fd, static_cast<short>(connection.writing ? POLLOUT : POLLIN), 0});
      next = std::min(next, connection.deadline);
    }
    if (::poll(fds.data(), fds.size(), PollTimeoutMs(now, next)) < 0) {
      if (errno == EINTR) continue;
      LogError("metrics", absl::StrCat("poll: ", std::strerror(errno)));
      break;
    }
    if (fds[0].revents != 0) break;
    const absl::Time polled = absl::Now();
    size_t kept = 0;
    for (size_t i = 0; i < connections.size(); ++i) {
      Connection& connection = connections[i];
      // A connection past its deadline is closed even if it just sent or took something:
      // the deadline bounds the whole head (or answer), not the silence between bytes.
      if (!Serve(&connection, fds[i + 2].revents, polled) || polled >= connection.deadline) {
        CloseConnection(connection.fd);
        continue;
      }
      if (kept != i) connections[kept] = std::move(connection);
      ++kept;
    }
    connections.resize(kept);
    if ((fds[1].revents & POLLIN) != 0) AcceptPending(polled, &connections);
  }
  for (const Connection& connection : connections) ::close(connection.fd);
}

void MetricsHttpServer::AcceptPending(absl::Time now, std::vector<Connection>* connections) {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // none left
      if (IsPerConnectionAcceptError(errno)) continue;
      // Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): the connection
      // stays queued, so poll() would report it again at once. Pause accepting briefly
      // and keep serving the open connections, whose closing frees descriptors.
      if (ShouldWarn(now, &last_accept_warning_)) {
        LogWarning("metrics", absl::StrCat("accept: ", std::strerror(errno), "; pausing for ",
                                           absl::FormatDuration(kAcceptBackoff)));
      }
      accept_paused_until_ = now + kAcceptBackoff;
      return;
    }
    if (static_cast<int>(connections->size()) >= limits_.max_connections) {
      Refuse(fd, now);
      continue;
    }
    Connection connection;
    connection.fd = fd;
    connection.deadline = now + limits_.read_timeout;
    connections->push_back(std::move(connection));
  }
}

void MetricsHttpServer::Refuse(int fd, absl::Time now) {
  const int64_t refused = refused_connections_.fetch_add(1) + 1;
  if (ShouldWarn(now, &last_refusal_warning_)) {
    LogWarning("metrics",
               absl::StrCat(limits_.max_connections, " connections open: refusing more with 503 (",
                            refused, " so far)"));
  }
  // Best effort and never blocking: a fresh socket's send buffer takes these few bytes.
  const std::string answer =
      Response("503 Service Unavailable", "too many connections\n", "Retry-After: 1\r\n");
  (void)!::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  CloseConnection(fd);
}

bool MetricsHttpServer::Serve(Connection* connection, short revents, absl::Time now) {
  if (revents == 0) return true;
  // POLLHUP and POLLERR are left to recv() and send() to report.
  return connection->writing ? WriteResponse(connection) : ReadHead(connection, now);
}

bool MetricsHttpServer::ReadHead(Connection* connection, absl::Time now) {
  char buffer[4096];
  while (true) {
    const ssize_t n = ::recv(connection->fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;  // the rest later
    if (n <= 0) return false;  // closed before its head was complete, or broken
    // Only the new bytes (and the three before them) can complete the blank line.
    const size_t from = connection->data.size() < 3 ? 0 : connection->data.size() - 3;
    connection->data.append(buffer, static_cast<size_t>(n));
    const size_t end = connection->data.find("\r\n\r\n", from);
    if (end != std::string::npos) {
      StartAnswer(connection, Answer(absl::string_view(connection->data).substr(0, end)), now);
      return WriteResponse(connection);
    }
    if (connection->data.size() > kMaxHeadBytes) {
      StartAnswer(connection,
                  Response("431 Request Header Fields Too Large", "request head too large\n"), now);
      return WriteResponse(connection);
    }
  }
}

std::string MetricsHttpServer::Answer(absl::string_view head) const {
  absl::StatusOr<HttpRequest> request = ParseHttpRequestHead(head);
  if (!request.ok()) {
    return Response("400 Bad Request", absl::StrCat(request.status().message(), "\n"));
  }
  return RespondToMetricsRequest(*request, tokens_, render_, render_page_);
}

void MetricsHttpServer::StartAnswer(Connection* connection, std::string answer, absl::Time now) {
  connection->writing = true;
  connection->data = std::move(answer);
  connection->written = 0;
  connection->deadline = now + limits_.write_timeout;
}

bool MetricsHttpServer::WriteResponse(Connection* connection) {
  while (connection->written < connection->data.size()) {
    const ssize_t n = ::send(connection->fd, connection->data.data() + connection->written,
                             connection->data.size() - connection->written, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;  // the rest later
    if (n <= 0) return false;                                             // the peer went away
    connection->written += static_cast<size_t>(n);
  }
  return false;  // all sent: Connection: close
}

}  // namespace shardcast::server

// The /metrics HTTP endpoint (see metrics_http.h).
#include "server/metrics_http.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/log.h"

namespace shardcast::server {

namespace {

std::string Response(const char* status_line, const std::string& body,
                     const std::string& extra_headers = "", bool head_only = false) {
  return absl::StrCat("HTTP/1.1 ", status_line, "\r\nContent-Type: ",
                      absl::StartsWith(status_line, "200")
                          ? "text/plain; version=0.0.4; charset=utf-8"
                          : "text/plain; charset=utf-8",
                      "\r\nContent-Length: ", body.size(), "\r\n", extra_headers,
                      "Connection: close\r\n\r\n", head_only ? "" : body);
}

// Writes all of `data`; false when the peer went away or timed out.
bool WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// HOST:PORT or [V6]:PORT -> (host, port); an empty or "*" host means every address.
absl::StatusOr<std::pair<std::string, std::string>> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen: expected HOST:PORT, got '", LogSafe(address), "'"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "*") host.clear();
  return std::make_pair(host, address.substr(colon + 1));
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
                                    const std::function<std::string()>& render) {
  if (request.path != "/metrics") {
    return Response("404 Not Found", "shardcast-server serves only /metrics here\n");
  }
  const bool head_only = request.method == "HEAD";
  if (request.method != "GET" && !head_only) {
    return Response("405 Method Not Allowed", "GET /metrics\n", "Allow: GET, HEAD\r\n");
  }
  if (tokens != nullptr) {
    if (absl::Status auth = tokens->Check(request.authorization); !auth.ok()) {
      return Response("401 Unauthorized", absl::StrCat(auth.message(), "\n"),
                      "WWW-Authenticate: Bearer\r\n");
    }
  }
  return Response("200 OK", render(), "", head_only);
}

MetricsHttpServer::MetricsHttpServer(std::string listen_address,
                                     std::function<std::string()> render,
                                     const TokenAuthenticator* tokens)
    : listen_address_(std::move(listen_address)), render_(std::move(render)), tokens_(tokens) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::Status MetricsHttpServer::Start() {
  absl::StatusOr<std::pair<std::string, std::string>> host_port = SplitHostPort(listen_address_);
  if (!host_port.ok()) return host_port.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int resolved = ::getaddrinfo(host_port->first.empty() ? nullptr : host_port->first.c_str(),
                                     host_port->second.c_str(), &hints, &found);
  if (resolved != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics-listen '", LogSafe(listen_address_),
                                                   "': ", gai_strerror(resolved)));
  }
  std::string error = "no address";
  for (addrinfo* ai = found; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
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
  thread_ = std::thread([this] { AcceptLoop(); });
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

void MetricsHttpServer::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fds_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LogError("metrics", absl::StrCat("poll: ", std::strerror(errno)));
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the peer gave up, or out of descriptors for a moment
    ServeConnection(fd);
    ::close(fd);
  }
}

void MetricsHttpServer::ServeConnection(int fd) {
  const timeval timeout = absl::ToTimeval(kIoTimeout);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  const absl::Time deadline = absl::Now() + kIoTimeout;
  std::string head;
  char buffer[2048];
  size_t end = std::string::npos;
  while ((end = head.find("\r\n\r\n")) == std::string::npos) {
    if (head.size() > kMaxHeadBytes) {
      WriteAll(fd, Response("431 Request Header Fields Too Large", "request head too large\n"));
      return;
    }
    if (absl::Now() > deadline) return;  // a trickling client
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // closed, or silent for kIoTimeout
    head.append(buffer, static_cast<size_t>(n));
  }
  absl::StatusOr<HttpRequest> request =
      ParseHttpRequestHead(absl::string_view(head).substr(0, end));
  if (!request.ok()) {
    WriteAll(fd, Response("400 Bad Request", absl::StrCat(request.status().message(), "\n")));
    return;
  }
  WriteAll(fd, RespondToMetricsRequest(*request, tokens_, render_));
}

}  // namespace shardcast::server

// The /metrics endpoint: a small HTTP/1.1 server (one thread, one connection at a
// time, Connection: close) that answers GET /metrics with the Prometheus text.
// Debian 12 has no prometheus-cpp package and the exposition is one GET of one page,
// so a few hundred lines over POSIX sockets beat a new dependency. When the server
// takes bearer tokens (--auth-token-file), /metrics requires one as well (Prometheus'
// `authorization` scrape setting); the listener itself is plaintext HTTP.
#ifndef SHARDCAST_SERVER_METRICS_HTTP_H_
#define SHARDCAST_SERVER_METRICS_HTTP_H_

#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/security.h"

namespace shardcast::server {

// What the endpoint needs of a request: its head (request line and headers) only.
struct HttpRequest {
  std::string method;         // "GET"
  std::string path;           // "/metrics" (query string cut)
  std::string authorization;  // the Authorization header's value; empty when absent
};

// Parses an HTTP/1.x request head (up to and without the blank line). INVALID_ARGUMENT
// says what is malformed; any bytes are safe to pass.
absl::StatusOr<HttpRequest> ParseHttpRequestHead(absl::string_view head);

// The whole HTTP response to `request`: 200 with `render()` for GET/HEAD /metrics
// (after the token check when `tokens` is not null), else 401, 404 or 405.
std::string RespondToMetricsRequest(const HttpRequest& request, const TokenAuthenticator* tokens,
                                    const std::function<std::string()>& render);

class MetricsHttpServer {
 public:
  // `render` produces the exposition text; it is called on the server's thread.
  // REQUIRES: `tokens` (null = no token check) outlives the server.
  MetricsHttpServer(std::string listen_address, std::function<std::string()> render,
                    const TokenAuthenticator* tokens);
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Binds HOST:PORT (port 0 = any free port; see port()) and starts the thread. Kept
  // apart from the constructor so a bind failure is a Status.
  absl::Status Start();
  int port() const { return port_; }
  // Closes the listener and joins the thread. Idempotent.
  void Stop();

  // A client that sends its request head slower than this is cut off, so one slow
  // peer holds the endpoint (never the gRPC service) for at most this long.
  static constexpr absl::Duration kIoTimeout = absl::Seconds(5);
  // Longest request head accepted (a scrape's is a few hundred bytes).
  static constexpr size_t kMaxHeadBytes = 8192;

 private:
  void AcceptLoop();
  void ServeConnection(int fd);

  const std::string listen_address_;
  const std::function<std::string()> render_;
  const TokenAuthenticator* const tokens_;
  int listen_fd_ = -1;
  int stop_fds_[2] = {-1, -1};  // a pipe: writing to it wakes the accept loop to stop
  int port_ = 0;
  std::thread thread_;
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_METRICS_HTTP_H_

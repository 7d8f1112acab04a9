// The /metrics endpoint: a small HTTP/1.1 server (Connection: close) that answers
// GET /metrics with the Prometheus text, and GET / with the status page when the daemon
// gives it one (ServeStatusPage). Debian 12 has no prometheus-cpp package and the
// exposition is one GET of one page, so a few hundred lines over POSIX sockets beat a
// new dependency. One thread runs a non-blocking poll() loop over the listener and
// every open connection, so an idle or trickling peer costs a descriptor until its own
// deadline, never a scrape's turn: each connection must send its request head soon after
// it is accepted and take its response soon after that, and only so many may be open at
// once (one more is answered 503 and closed), so a flood cannot exhaust the process's
// descriptors (MetricsHttpServer::Limits). When the server takes bearer tokens
// (--auth-token-file), /metrics requires one as well (Prometheus' `authorization`
// scrape setting); the listener itself is plaintext HTTP.
#ifndef SHARDCAST_SERVER_STATUS_METRICS_HTTP_H_
#define SHARDCAST_SERVER_STATUS_METRICS_HTTP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/net/token_authenticator.h"

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

// The whole HTTP response to `request`: 200 with `render()` for GET/HEAD /metrics, and
// with `render_page()` as text/html for GET/HEAD / when `render_page` is set (both after
// the token check when `tokens` is not null), else 401, 404 or 405.
std::string RespondToMetricsRequest(const HttpRequest& request, const TokenAuthenticator* tokens,
                                    const std::function<std::string()>& render,
                                    const std::function<std::string()>& render_page = nullptr);

class MetricsHttpServer {
 public:
  // How long a connection may take and how many may be open; tests shorten them.
  struct Limits {
    // A request head must arrive complete within this of the accept (a scrape's
    // arrives at once; a silent or trickling peer is closed).
    absl::Duration read_timeout = absl::Seconds(2);
    // The response must be taken within this of the head's arrival.
    absl::Duration write_timeout = absl::Seconds(5);
    // Open connections at most; one more is answered 503 and closed at once, so a
    // flood of idle peers holds this many descriptors, not all of the process's.
    int max_connections = 64;
  };

  // `render` produces the exposition text; it is called on the server's thread.
  // REQUIRES: `tokens` (null = no token check) outlives the server.
  MetricsHttpServer(std::string listen_address, std::function<std::string()> render,
                    const TokenAuthenticator* tokens);
  MetricsHttpServer(std::string listen_address, std::function<std::string()> render,
                    const TokenAuthenticator* tokens, Limits limits);
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Serves `render_page()` (HTML, status_page.h) at /, under the same token rule as
  // /metrics; called on the server's thread. REQUIRES: before Start().
  void ServeStatusPage(std::function<std::string()> render_page);
  // Calls `tick` on the server's thread at Start and then every `period` (the status
  // page's history samples the counters so, whether or not anyone looks).
  // REQUIRES: before Start(); period > 0.
  void SetTick(absl::Duration period, std::function<void()> tick);

  // Binds HOST:PORT (port 0 = any free port; see port()) and starts the thread. Kept
  // apart from the constructor so a bind failure is a Status.
  absl::Status Start();
  int port() const { return port_; }
  // Closes the listener and every connection and joins the thread. Idempotent.
  void Stop();

  // Connections answered 503 because kMaxConnections were open.
  int64_t refused_connections() const { return refused_connections_.load(); }

  // Longest request head accepted (a scrape's is a few hundred bytes).
  static constexpr size_t kMaxHeadBytes = 8192;
  // Pending connections the kernel queues while the loop is busy rendering.
  static constexpr int kListenBacklog = 128;
  // How long accepting pauses when the process is out of descriptors (EMFILE/ENFILE):
  // the pending connection stays queued and would wake poll() at once, in a busy loop.
  static constexpr absl::Duration kAcceptBackoff = absl::Milliseconds(100);

 private:
  struct Connection;

  void EventLoop();
  // Accepts every pending connection (up to the limit; the rest are refused).
  void AcceptPending(absl::Time now, std::vector<Connection>* connections);
  // Answers 503 and closes `fd`, counted.
  void Refuse(int fd, absl::Time now);
  // Reads or writes what the socket allows; false when the connection is done.
  bool Serve(Connection* connection, short revents, absl::Time now);
  bool ReadHead(Connection* connection, absl::Time now);
  // The answer to a complete request head (400 when it is malformed).
  std::string Answer(absl::string_view head) const;
  void StartAnswer(Connection* connection, std::string answer, absl::Time now);
  bool WriteResponse(Connection* connection);

  const std::string listen_address_;
  const std::function<std::string()> render_;
  std::function<std::string()> render_page_;  // null: / is 404
  absl::Duration tick_period_ = absl::InfiniteDuration();
  std::function<void()> tick_;  // null: no tick
  const TokenAuthenticator* const tokens_;
  const Limits limits_;
  int listen_fd_ = -1;
  int stop_fds_[2] = {-1, -1};  // a pipe: writing to it wakes the event loop to stop
  int port_ = 0;
  // The loop's thread only:
  absl::Time accept_paused_until_ = absl::InfinitePast();
  absl::Time last_accept_warning_ = absl::InfinitePast();
  absl::Time last_refusal_warning_ = absl::InfinitePast();
  std::atomic<int64_t> refused_connections_{0};
  std::thread thread_;
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_STATUS_METRICS_HTTP_H_

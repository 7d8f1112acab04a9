// The /metrics endpoint: an HTTP/1.1 listener (Connection: close) that answers GET
// /metrics with the Prometheus text, and GET / with the status page when the daemon
// gives it one (ServeStatusPage). GNU libmicrohttpd (Debian 12's libmicrohttpd12) parses
// the requests and runs the sockets on one internal epoll thread, so an idle or
// trickling peer costs a descriptor until its deadline, never a scrape's turn; this
// file adds what the endpoint decides: which peer may hold how many connections, how
// long a request head and its answer may take (MetricsHttpServer::Limits), and the
// answers themselves. When the server takes bearer tokens (--auth-token-file), /metrics
// and / require one as well (Prometheus' `authorization` scrape setting); the listener
// itself is plaintext HTTP.
#ifndef SHARDCAST_SERVER_STATUS_METRICS_HTTP_H_
#define SHARDCAST_SERVER_STATUS_METRICS_HTTP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/net/token_authenticator.h"

struct MHD_Daemon;      // microhttpd.h, kept out of the daemon's includes
struct MHD_Connection;  // microhttpd.h

namespace shardcast::server {

// What the endpoint needs of a request: its method, path and Authorization header.
struct HttpRequest {
  std::string method;         // "GET"
  std::string path;           // "/metrics" (query string cut)
  std::string authorization;  // the Authorization header's value; empty when absent
};

// The answer to one request, before it is written.
struct HttpAnswer {
  int status = 200;
  std::string content_type;
  std::string body;
  std::map<std::string, std::string> headers;  // besides Content-Type
  bool head_only = false;                      // HEAD: the body's length, not its bytes
};

// The answer to `request`: 200 with `render()` for GET/HEAD /metrics, and with
// `render_page()` as text/html for GET/HEAD / when `render_page` is set (both after the
// token check when `tokens` is not null), else 401, 404 or 405.
HttpAnswer RespondToMetricsRequest(const HttpRequest& request, const TokenAuthenticator* tokens,
                                   const std::function<std::string()>& render,
                                   const std::function<std::string()>& render_page = nullptr);

class MetricsHttpServer {
 public:
  // How long a connection may take and how many may be open; tests shorten them.
  struct Limits {
    // A request head must arrive complete within this of the accept (a scrape's
    // arrives at once; a silent or trickling peer is closed however it trickles).
    absl::Duration read_timeout = absl::Seconds(2);
    // The answer must be taken within this of the head's arrival.
    absl::Duration write_timeout = absl::Seconds(5);
    // A connection on which nothing moves either way is closed after this (whole
    // seconds, at least 1: libmicrohttpd's granularity).
    absl::Duration idle_timeout = absl::Seconds(2);
    // Open connections at most: a flood holds this many descriptors, not all of the
    // process's. Beyond it new connections wait in the kernel's accept queue.
    int max_connections = 64;
    // Open connections of one peer address at most; one more is closed at once,
    // counted and logged, so one host cannot take the places of the others.
    int max_connections_per_peer = 16;
  };

  // `render` produces the exposition text; it is called on the listener's thread.
  // REQUIRES: `tokens` (null = no token check) outlives the server.
  MetricsHttpServer(std::string listen_address, std::function<std::string()> render,
                    const TokenAuthenticator* tokens);
  MetricsHttpServer(std::string listen_address, std::function<std::string()> render,
                    const TokenAuthenticator* tokens, Limits limits);
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Serves `render_page()` (HTML, status_page.h) at /, under the same token rule as
  // /metrics; called on the listener's thread. REQUIRES: before Start().
  void ServeStatusPage(std::function<std::string()> render_page);
  // Calls `tick` on a thread of the server's own at Start and then every `period` (the
  // status page's history samples the counters so, whether or not anyone looks).
  // REQUIRES: before Start(); period > 0.
  void SetTick(absl::Duration period, std::function<void()> tick);

  // Binds HOST:PORT (port 0 = any free port; see port()) and starts the threads. Kept
  // apart from the constructor so a bind failure is a Status.
  absl::Status Start();
  int port() const { return port_; }
  // Closes the listener and every connection and joins the threads. Idempotent.
  void Stop();

  // Connections closed at once because their peer held max_connections_per_peer.
  int64_t refused_connections() const { return refused_connections_.load(); }

  // A scrape's request head is a few hundred bytes; libmicrohttpd gets a buffer of twice
  // this per connection (MHD_OPTION_CONNECTION_MEMORY_LIMIT), and answers a head that
  // does not fit in it (about 16 KiB) with 431.
  static constexpr size_t kMaxHeadBytes = 8192;
  // Pending connections the kernel queues while the listener is at max_connections or
  // busy rendering.
  static constexpr int kListenBacklog = 64;

 private:
  // What the deadline watch knows of one open connection.
  struct OpenConnection {
    int fd = -1;
    std::string peer;     // the peer's address bytes: the per-peer count's key
    absl::Time deadline;  // for the whole head while reading, for the answer after it
    bool cut = false;     // shut down at its deadline, not yet closed by libmicrohttpd
  };

  // libmicrohttpd's callbacks (static trampolines to these members live in the .cc).
  bool AcceptPeer(const std::string& peer);
  void ConnectionStarted(MHD_Connection* connection);
  void ConnectionClosed(MHD_Connection* connection);
  int HandleRequest(MHD_Connection* connection, const char* url, const char* method);
  friend struct MetricsHttpCallbacks;

  // The watch's thread: runs the tick and cuts connections past their deadline.
  void Watch();

  const std::string listen_address_;
  const std::function<std::string()> render_;
  std::function<std::string()> render_page_;  // null: / is 404
  absl::Duration tick_period_ = absl::InfiniteDuration();
  std::function<void()> tick_;  // null: no tick
  const TokenAuthenticator* const tokens_;
  const Limits limits_;
  int listen_fd_ = -1;  // bound here, served by libmicrohttpd, closed by Stop
  int port_ = 0;
  MHD_Daemon* daemon_ = nullptr;
  std::thread watch_thread_;

  mutable absl::Mutex mu_;
  // Every connection libmicrohttpd has open, by its MHD_Connection.
  std::map<const MHD_Connection*, OpenConnection> open_ ABSL_GUARDED_BY(mu_);
  // Open connections per peer address.
  std::map<std::string, int> per_peer_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_refusal_warning_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::atomic<int64_t> refused_connections_{0};
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_STATUS_METRICS_HTTP_H_

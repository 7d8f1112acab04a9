// MakeChannel gives a connection attempt the time a real handshake needs. gRPC takes
// the time one attempt may last from GRPC_ARG_MIN_RECONNECT_BACKOFF_MS; while that was
// the 100 ms initial backoff, a server whose HTTP/2 SETTINGS came later than the
// largest backoff (2 s) was never reached: every attempt was cut short ("connection
// attempt timed out before receiving SETTINGS frame"), as seen under load in the
// sanitizer runs. Here a real server sits behind a TCP relay that holds each new
// connection for 3 s before passing bytes on, as a slow network or host would.
#include "client/rpc/channel.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "shardcast/v1/shardcast.grpc.pb.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace shardcast::client {
namespace {

using Clock = std::chrono::steady_clock;

// Listens on 127.0.0.1; each accepted connection waits `delay`, then is joined to
// 127.0.0.1:`target_port` and relayed both ways until either side closes.
class SlowRelay {
 public:
  SlowRelay(int target_port, std::chrono::milliseconds delay)
      : target_port_(target_port), delay_(delay) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listener_, 16), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~SlowRelay() {
    stop_ = true;
    acceptor_.join();
    absl::MutexLock lock(&mu_);
    for (std::thread& t : relays_) t.join();
    ::close(listener_);
  }
  int port() const { return port_; }
  int connections() const { return connections_; }

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) continue;
      ++connections_;
      absl::MutexLock lock(&mu_);
      relays_.emplace_back([this, client] { Relay(client); });
    }
  }

  void Relay(int client) {
    const auto until = Clock::now() + delay_;
    while (!stop_ && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const int server = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (stop_ || ::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(server);
      ::close(client);
      return;
    }
    pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
    char buffer[1 << 16];
    while (!stop_) {
      if (::poll(fds, 2, 50) <= 0) continue;
      bool closed = false;
      for (int i = 0; i < 2 && !closed; ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
        closed = n <= 0;
        for (ssize_t sent = 0; !closed && sent < n;) {
          const ssize_t m = ::write(fds[1 - i].fd, buffer + sent, static_cast<size_t>(n - sent));
          closed = m <= 0;
          sent += m;
        }
      }
      if (closed) break;
    }
    ::close(server);
    ::close(client);
  }

  const int target_port_;
  const std::chrono::milliseconds delay_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<std::thread> relays_ ABSL_GUARDED_BY(mu_);
};

TEST(ChannelTest, ConnectsToAServerSlowerToAnswerThanTheLargestBackoff) {
  testing_util::TempDir dir;
  ASSERT_TRUE(testing_util::MakeSyntheticShards(dir.path() + "/shards", 8, 2, 32, 8).ok());
  testing_util::ServerProcess server(dir.path() + "/shards", dir.path());
  ASSERT_TRUE(server.Start().ok());
  SlowRelay relay(server.port(), std::chrono::milliseconds(3000));

  ChannelOptions options;  // the defaults every client uses: backoff 0.1 s .. 2 s
  options.target = absl::StrCat("127.0.0.1:", relay.port());
  ASSERT_LT(options.reconnect_backoff_max, absl::Seconds(3));
  auto stub = v1::Shardcast::NewStub(MakeChannel(options));
  grpc::ClientContext context;
  context.set_wait_for_ready(true);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
  v1::GetStatusResponse status;
  const auto start = Clock::now();
  const grpc::Status s = stub->GetStatus(&context, v1::GetStatusRequest(), &status);
  EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message() << " after "
                      << relay.connections() << " connection attempts";
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(3000));
  EXPECT_EQ(relay.connections(), 1);  // the first attempt waited for the handshake
}

}  // namespace
}  // namespace shardcast::client

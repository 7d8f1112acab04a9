// AcceptWatch on real sockets: counts connections until they close, shuts down those
// beyond the limit, and wakes the listener probe; on a real gRPC server, through the
// socket mutator, and the build's gRPC version guard (what guards
// grpc_socket_mutator_abi.h); the descriptor budget's arithmetic.
#include "server/rpc/accept_watch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/version_info.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "server/net/descriptor_limit.h"
#include "server/rpc/listener_probe.h"
#include "tests/support/child_process.h"
#include "tests/support/fake_clock.h"
#include "tests/support/temp_dir.h"

namespace shardcast::server {
namespace {

// A connected pair: `server` plays the accepted connection, `client` its peer.
struct Connection {
  Connection() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    server = fds[0];
    client = fds[1];
  }
  ~Connection() {
    if (server >= 0) ::close(server);
    ::close(client);
  }
  // True when the client reads the end of the connection (the server shut it down).
  bool ClientSeesEnd() const {
    char byte;
    return ::recv(client, &byte, 1, MSG_DONTWAIT) == 0;
  }
  int server = -1;
  int client = -1;
};

TEST(AcceptWatchTest, CountsOpenConnectionsAndRefusesBeyondTheLimit) {
  ServerStats stats(absl::Now());
  auto watch = std::make_shared<AcceptWatch>(/*max_connections=*/2, /*max_per_peer=*/0, &stats);
  Connection a, b, c;
  watch->OnAccepted(a.server);
  watch->OnAccepted(b.server);
  EXPECT_EQ(watch->CountOpen(), 2);
  EXPECT_FALSE(b.ClientSeesEnd());
  watch->OnAccepted(c.server);  // the third: shut down
  EXPECT_TRUE(c.ClientSeesEnd());
  EXPECT_EQ(stats.connections_refused.load(), 1);
  EXPECT_EQ(watch->CountOpen(), 2);
  // One closes (gRPC closed it): room for the next.
  ::close(a.server);
  a.server = -1;
  Connection d;
  watch->OnAccepted(d.server);
  EXPECT_FALSE(d.ClientSeesEnd());
  EXPECT_EQ(watch->CountOpen(), 2);
  EXPECT_EQ(stats.connections_refused.load(), 1);
  EXPECT_EQ(watch->accepted(), 4);
}

// Refusals are logged at most once per 10 s of the watch's clock, so that a flood of
// connections does not flood the log; a fake clock moves past the spacing at once.
TEST(AcceptWatchTest, RefusalsAreLoggedOncePerIntervalOfItsClock) {
  ServerStats stats(absl::Now());
  util_testing::FakeClock clock;
  auto watch =
      std::make_shared<AcceptWatch>(/*max_connections=*/1, /*max_per_peer=*/0, &stats, &clock);
  Connection open, first, second, third;
  watch->OnAccepted(open.server);
  auto logged_refusal = [&](const Connection& refused) {
    ::testing::internal::CaptureStderr();
    watch->OnAccepted(refused.server);
    return ::testing::internal::GetCapturedStderr().find("refusing connections") !=
           std::string::npos;
  };
  EXPECT_TRUE(logged_refusal(first));
  clock.Advance(absl::Seconds(9));
  EXPECT_FALSE(logged_refusal(second));  // within the interval: counted, not logged
  clock.Advance(absl::Seconds(1));
  EXPECT_TRUE(logged_refusal(third));
  EXPECT_EQ(stats.connections_refused.load(), 3);
}

TEST(AcceptWatchTest, ADescriptorReusedForAnotherFileIsNotCountedAsTheConnection) {
  ServerStats stats(absl::Now());
  auto watch = std::make_shared<AcceptWatch>(/*max_connections=*/1, /*max_per_peer=*/0, &stats);
  Connection a;
  const int number = a.server;
  watch->OnAccepted(a.server);
  ::close(a.server);
  a.server = -1;
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);  // takes the lowest numbers, `number` first
  EXPECT_EQ(pipe_fds[0], number);
  EXPECT_EQ(watch->CountOpen(), 0);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

// gRPC closed a counted connection and the kernel gave its number to the next one:
// the closed one no longer counts for its peer, whether or not a limit was reached.
TEST(AcceptWatchTest, ANumberReusedByTheNextConnectionCountsItsPeerOnce) {
  ServerStats stats(absl::Now());
  auto watch = std::make_shared<AcceptWatch>(/*max_connections=*/0, /*max_per_peer=*/2, &stats);
  for (int round = 0; round < 5; ++round) {
    Connection a;
    watch->OnAccepted(a.server);  // every round's `a` gets the same lowest free number
    EXPECT_FALSE(a.ClientSeesEnd()) << "round " << round;
  }
  Connection b, c, d;
  watch->OnAccepted(b.server);
  watch->OnAccepted(c.server);
  EXPECT_FALSE(c.ClientSeesEnd());  // two open: b and c (the rounds' are closed)
  watch->OnAccepted(d.server);
  EXPECT_TRUE(d.ClientSeesEnd());
  EXPECT_EQ(watch->CountOpen(), 2);
}

TEST(AcceptWatchTest, ZeroMeansNoLimit) {
  ServerStats stats(absl::Now());
  auto watch = std::make_shared<AcceptWatch>(/*max_connections=*/0, /*max_per_peer=*/0, &stats);
  std::vector<std::unique_ptr<Connection>> connections;
  for (int i = 0; i < 20; ++i) {
    connections.push_back(std::make_unique<Connection>());
    watch->OnAccepted(connections.back()->server);
    EXPECT_FALSE(connections.back()->ClientSeesEnd());
  }
  EXPECT_EQ(watch->CountOpen(), 20);
  EXPECT_EQ(stats.connections_refused.load(), 0);
}

TEST(AcceptWatchTest, AwaitAcceptedBeyondWakesOnTheNextAccept) {
  ServerStats stats(absl::Now());
  auto watch = std::make_shared<AcceptWatch>(0, 0, &stats);
  EXPECT_FALSE(watch->AwaitAcceptedBeyond(0, absl::Milliseconds(10)));
  Connection a;
  std::thread accepter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    watch->OnAccepted(a.server);
  });
  EXPECT_TRUE(watch->AwaitAcceptedBeyond(0, absl::Seconds(30)));
  accepter.join();
}

// Loopback connections from two source addresses: 127.0.0.2 may hold two, and its
// third is refused while 127.0.0.1 still gets in.
TEST(AcceptWatchTest, OnePeerHoldsAtMostItsShare) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(listener, 16), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ServerStats stats(absl::Now());
  auto watch = std::make_shared<AcceptWatch>(/*max_connections=*/10, /*max_per_peer=*/2, &stats);
  std::vector<int> fds;
  // Connects from `source`, accepts, hands the accepted side to the watch; true when
  // the client then reads the end of the connection (refused).
  auto refused = [&](const char* source) {
    const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &from.sin_addr);
    EXPECT_EQ(::bind(client, reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0);
    EXPECT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    const int accepted = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_EQ(PeerOf(accepted), absl::StrCat("ipv4:", source));
    watch->OnAccepted(accepted);
    fds.push_back(client);
    fds.push_back(accepted);
    char byte;
    return ::recv(client, &byte, 1, MSG_DONTWAIT) == 0;
  };
  EXPECT_FALSE(refused("127.0.0.2"));
  EXPECT_FALSE(refused("127.0.0.2"));
  EXPECT_TRUE(refused("127.0.0.2"));
  EXPECT_FALSE(refused("127.0.0.1"));
  EXPECT_EQ(watch->CountOpen(), 3);
  EXPECT_EQ(stats.connections_refused.load(), 1);
  for (int fd : fds) ::close(fd);
  ::close(listener);
  EXPECT_EQ(watch->CountOpen(), 0);
}

// A plain TCP connection to 127.0.0.1:`port`; -1 when it fails.
int ConnectToLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True when the peer ends connection `fd` within `timeout_ms`.
bool EndsWithin(int fd, int timeout_ms) {
  pollfd readable = {fd, POLLIN, 0};
  if (::poll(&readable, 1, timeout_ms) <= 0) return false;
  char byte;
  return ::recv(fd, &byte, 1, MSG_DONTWAIT) <= 0;
}

// The guard of grpc_socket_mutator_abi.h, which mirrors gRPC-internal declarations: on a
// real gRPC server of the gRPC this is built against, the mutator sees the listening
// socket and every accepted connection, with the accepted descriptor itself (shutting
// it down ends the client's connection), and the listener probe sees its connection
// accepted. With another layout or another listener, gRPC calls another slot or none:
// nothing is counted (or it crashes) and this fails, before a server in production
// finds its listener "dead" at every probe.
TEST(AcceptWatchTest, ARealGrpcServersAcceptsReachTheWatchThroughTheSocketMutator) {
  ServerStats stats(absl::Now());
  auto watch = std::make_shared<AcceptWatch>(/*max_connections=*/1, /*max_per_peer=*/0, &stats);
  grpc::CallbackGenericService unimplemented;  // gRPC serves nothing without a service
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(&unimplemented);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.SetOption(watch->BuilderOption());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);
  EXPECT_EQ(watch->listeners(), 1)
      << "gRPC " << GRPC_CPP_VERSION_STRING << ": the listening socket did not reach the mutator";
  EXPECT_TRUE(watch->SetAcceptBacklog(16).ok());

  // A gRPC client's connection (its own, not one shared with another channel).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), args);
  ASSERT_TRUE(
      channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));
  ASSERT_TRUE(watch->AwaitAcceptedBeyond(0, absl::Seconds(10)))
      << "gRPC " << GRPC_CPP_VERSION_STRING << ": an accepted connection did not reach the mutator";
  EXPECT_EQ(watch->accepted(), 1);
  EXPECT_EQ(watch->CountOpen(), 1);
  EXPECT_EQ(stats.connections_open.load(), 1);

  // One more, beyond --max-connections 1: the descriptor the mutator got is the
  // connection, so shutting it down there ends the client's side.
  const int refused = ConnectToLoopback(port);
  ASSERT_GE(refused, 0);
  ASSERT_TRUE(watch->AwaitAcceptedBeyond(1, absl::Seconds(10)));
  EXPECT_TRUE(EndsWithin(refused, 10000));
  ::close(refused);
  EXPECT_EQ(stats.connections_refused.load(), 1);

  // The listener probe, as the server runs it.
  absl::StatusOr<ProbeTarget> target = ProbeTargetFor("127.0.0.1:0", port);
  ASSERT_TRUE(target.ok()) << target.status();
  ListenerProbe probe(*std::move(target), watch, absl::Seconds(10), [](const absl::Status&) {});
  EXPECT_TRUE(probe.ProbeOnce(absl::Seconds(10)).ok());
  server->Shutdown(std::chrono::system_clock::now());
}

// A scratch CMake project that runs the configure step's guard
// (cmake/GrpcSocketMutatorAbi.cmake) as if find_package(gRPC) had found
// FAKE_GRPC_VERSION, then compiles grpc_socket_mutator_abi.h with that version's
// GRPC_CPP_VERSION_MAJOR/MINOR (the real <grpcpp/version_info.h> kept out by its include
// guard) and the definitions the guard left: "header compiles: 1" or "header compiles: ".
// SKIP_GUARD=ON compiles the header alone, as a build that bypasses CMake would.
class GrpcAbiGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_ / "CMakeLists.txt")
        << absl::StrReplaceAll(kProject, {{"@SOURCE_DIR@", SHARDCAST_SOURCE_DIR}});
  }

  static constexpr char kProject[] = R"cmake(cmake_minimum_required(VERSION 3.25)
project(grpc_abi_guard CXX)
set(gRPC_VERSION "${FAKE_GRPC_VERSION}")
set(gRPC_DIR /nowhere/grpc)
if(NOT SKIP_GUARD)
  include("@SOURCE_DIR@/cmake/GrpcSocketMutatorAbi.cmake")
  shardcast_check_grpc_socket_mutator_abi()
endif()
string(REGEX MATCH "^([0-9]+)[.]([0-9]+)" _ "${FAKE_GRPC_VERSION}")
get_directory_property(defs COMPILE_DEFINITIONS)
list(TRANSFORM defs PREPEND -D)
set(CMAKE_REQUIRED_DEFINITIONS ${defs} -DGRPCPP_VERSION_INFO_H
    -DGRPC_CPP_VERSION_MAJOR=${CMAKE_MATCH_1} -DGRPC_CPP_VERSION_MINOR=${CMAKE_MATCH_2})
set(CMAKE_REQUIRED_INCLUDES "@SOURCE_DIR@")
set(CMAKE_REQUIRED_QUIET ON)
unset(HEADER_COMPILES CACHE)
include(CheckCXXSourceCompiles)
check_cxx_source_compiles("#include \"server/rpc/grpc_socket_mutator_abi.h\"
int main() { return 0; }" HEADER_COMPILES)
message(STATUS "header compiles: ${HEADER_COMPILES}")
)cmake";

  // Configures the scratch project (one build folder: the compiler is found once).
  testing_util::CommandOutput Configure(const std::string& version, bool unchecked,
                                        bool skip_guard = false) {
    return testing_util::RunShellCapture(
        testing_util::ShellCommand(
            {"cmake", "-S", dir_.path(), "-B", dir_ / "build", "-DFAKE_GRPC_VERSION=" + version,
             std::string("-DSHARDCAST_GRPC_ABI_UNCHECKED=") + (unchecked ? "ON" : "OFF"),
             std::string("-DSKIP_GUARD=") + (skip_guard ? "ON" : "OFF")}) +
        " 2>&1");
  }

  testing_util::TempDir dir_;
};

TEST_F(GrpcAbiGuardTest, TheVerifiedGrpcBuilds) {
  const testing_util::CommandOutput configured = Configure(GRPC_CPP_VERSION_STRING, false);
  EXPECT_EQ(configured.exit_code, 0) << configured.out;
  EXPECT_THAT(configured.out,
              ::testing::HasSubstr("inside the socket mutator layout's verified range"));
  EXPECT_THAT(configured.out, ::testing::HasSubstr("header compiles: 1"));
}

// A new gRPC fails the build, not production: the configure step stops, naming the
// version found and the way out; a build that bypasses CMake stops at the header.
// SHARDCAST_GRPC_ABI_UNCHECKED=ON lets a developer try it, with a warning.
TEST_F(GrpcAbiGuardTest, AGrpcOutsideTheVerifiedRangeFailsTheBuildUnlessAskedFor) {
  for (const std::string version : {"1.52.0", "1.50.1", "2.0.0"}) {
    const testing_util::CommandOutput refused = Configure(version, false);
    EXPECT_NE(refused.exit_code, 0) << refused.out;
    EXPECT_THAT(refused.out, ::testing::HasSubstr("but this is gRPC " + version));
    EXPECT_THAT(refused.out, ::testing::HasSubstr("-DSHARDCAST_GRPC_ABI_UNCHECKED=ON"));
  }
  const testing_util::CommandOutput bypassed = Configure("1.60.1", false, /*skip_guard=*/true);
  EXPECT_EQ(bypassed.exit_code, 0) << bypassed.out;
  EXPECT_THAT(bypassed.out, ::testing::HasSubstr("header compiles: \n"));

  const testing_util::CommandOutput tried = Configure("1.60.1", true);
  EXPECT_EQ(tried.exit_code, 0) << tried.out;
  EXPECT_THAT(tried.out, ::testing::HasSubstr("UNVERIFIED gRPC"));
  EXPECT_THAT(tried.out, ::testing::HasSubstr("header compiles: 1"));
}

TEST(DescriptorLimitTest, PerPeerDefaultIsAQuarterAtLeastSixteen) {
  EXPECT_EQ(DefaultMaxConnectionsPerPeer(15840), 3960);
  EXPECT_EQ(DefaultMaxConnectionsPerPeer(16), 16);
  EXPECT_EQ(DefaultMaxConnectionsPerPeer(12), 12);  // never more than all of them
  EXPECT_EQ(DefaultMaxConnectionsPerPeer(0), 0);
}

TEST(DescriptorLimitTest, TheBudgetAtTypicalLimits) {
  const DescriptorShares big = DescriptorBudget(1048576, 4096);
  EXPECT_EQ(big.reserve, kDescriptorReserve);
  EXPECT_EQ(big.metrics_connections, kMaxMetricsConnections);
  EXPECT_EQ(big.accept_backlog, 4096);
  EXPECT_EQ(big.max_connections, 1048576 - 64 - 64 - 4096 - 1);
  const DescriptorShares usual = DescriptorBudget(1024, 4096);
  EXPECT_EQ(usual.accept_backlog, 224);
  EXPECT_EQ(usual.max_connections, 671);
  const DescriptorShares small = DescriptorBudget(256, 4096);
  EXPECT_EQ(small.reserve, 64);
  EXPECT_EQ(small.metrics_connections, 24);
  EXPECT_EQ(small.accept_backlog, 42);
  EXPECT_EQ(small.max_connections, 125);
  // Issue 44: at 100 the old floor of 64 queued connections beside 8 and a reserve of 64
  // was 136 descriptors, and a flood killed the listener with EMFILE.
  const DescriptorShares hundred = DescriptorBudget(100, 4096);
  EXPECT_EQ(hundred.reserve, 50);
  EXPECT_EQ(hundred.metrics_connections, 6);
  EXPECT_EQ(hundred.accept_backlog, 11);
  EXPECT_EQ(hundred.max_connections, 32);
  EXPECT_EQ(DescriptorBudget(100, 8).accept_backlog, 8);  // never above the kernel's
}

// The derivation's promise, for every limit from 64 to 100,000, a sample far beyond,
// and somaxconn from 1 to 65535: one full accept round (backlog + 1, refused
// connections included) on top of every connection allowed, a full /metrics listener
// and the reserve never passes the limit; every share is at least 1, the reserve at
// least 30 (the server's own descriptors at start: 13 on a 2-core machine, plus a
// shard per decode thread); and a higher limit never gives fewer connections.
TEST(DescriptorLimitTest, OneAcceptRoundNeverPassesAnyLimitFromSixtyFourUp) {
  std::vector<uint64_t> limits;
  for (uint64_t limit = kMinDescriptorLimit; limit <= 100000; ++limit) limits.push_back(limit);
  for (uint64_t limit = 100001; limit < (uint64_t{1} << 40); limit = limit * 3 / 2 + 7) {
    limits.push_back(limit);
  }
  limits.push_back(uint64_t{INT64_MAX} / 4);
  limits.push_back(UINT64_MAX);  // RLIM_INFINITY as it comes
  for (const int64_t somaxconn : {1, 16, 128, 4096, 65535}) {
    int64_t previous_connections = 0;
    for (const uint64_t limit : limits) {
      const DescriptorShares s = DescriptorBudget(limit, somaxconn);
      SCOPED_TRACE(::testing::Message() << "limit " << limit << ", somaxconn " << somaxconn);
      ASSERT_GE(s.reserve, 30);
      ASSERT_GE(s.metrics_connections, 1);
      ASSERT_GE(s.accept_backlog, 1);
      ASSERT_LE(s.accept_backlog, somaxconn);
      ASSERT_GE(s.max_connections, 16);
      const uint64_t used = static_cast<uint64_t>(s.reserve + s.max_connections + s.accept_backlog +
                                                  1 + s.metrics_connections);
      ASSERT_LE(used, limit);
      ASSERT_GE(s.max_connections, previous_connections);
      previous_connections = s.max_connections;
      const int64_t per_peer = DefaultMaxConnectionsPerPeer(s.max_connections);
      ASSERT_GE(per_peer, 1);
      ASSERT_LE(per_peer, s.max_connections);
    }
  }
}

TEST(DescriptorLimitTest, RaisesTheSoftLimitToTheHardOne) {
  absl::StatusOr<DescriptorLimit> limit = RaiseDescriptorLimit();
  ASSERT_TRUE(limit.ok()) << limit.status();
  EXPECT_EQ(limit->soft, limit->hard);
  EXPECT_GE(limit->soft, limit->soft_before);
  absl::StatusOr<DescriptorLimit> again = RaiseDescriptorLimit();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->soft_before, limit->soft);
}

}  // namespace
}  // namespace shardcast::server

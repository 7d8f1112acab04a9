// The torch-free protocol client against a real in-process server over loopback: a
// rank gets exactly n checked batches carrying the registered shape, the effective
// job config reads back from the registration, and a job whose config changed under
// the rank (another run re-registered the id on a restarted server) is refused on
// reconnect instead of resumed. Every wait ends at once on Close() from another thread
// or when the caller's interrupt check says so.
#include "client/stream/rank_stream.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "proto/job_config_proto.h"
#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

using ::testing::HasSubstr;

client::RankStreamOptions Options(const std::string& target, const std::string& job) {
  client::RankStreamOptions options;
  options.server = target;
  options.job = MakeRegister(job, /*rank=*/0, /*world=*/1, /*batch=*/6);
  options.prefetch = 2;
  options.reconnect_initial_seconds = 0.05;
  options.reconnect_deadline_seconds = 20;
  return options;
}

TEST(RankStreamTest, ExactlyNCheckedBatchesAndTheEffectiveConfig) {
  TempDir dir;
  MakeDataset(dir.path(), /*samples=*/40, /*per_shard=*/10);
  InProcessServer server(dir.path());
  absl::StatusOr<std::unique_ptr<client::RankStream>> stream =
      client::RankStream::Connect(Options(server.target(), "protocol"));
  ASSERT_TRUE(stream.ok()) << stream.status();
  const v1::RegisterResponse& registration = (*stream)->registration();
  EXPECT_EQ((*stream)->batches_per_epoch(), 40 / 6);
  EXPECT_EQ(registration.job_fingerprint().size(), 32u);
  absl::StatusOr<JobConfig> config = ResponseConfig(registration);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->plan.world_size, 1);
  EXPECT_EQ(config->plan.batch_size, 6);
  EXPECT_EQ(config->plan.split, Split::kSample);
  EXPECT_EQ(config->transform.crop, 40);

  ASSERT_TRUE((*stream)->StartEpoch(1, 2).ok());
  int64_t expected = 2;
  while (true) {
    absl::StatusOr<std::optional<client::ReceivedBatch>> next = (*stream)->Next();
    ASSERT_TRUE(next.ok()) << next.status();
    if (!next->has_value()) break;
    const v1::Batch& batch = (**next)->header();
    EXPECT_EQ(batch.epoch(), 1);
    EXPECT_EQ(batch.index(), expected++);
    EXPECT_EQ((**next)->image_bytes(), 6 * 3 * 40 * 40);
  }
  EXPECT_EQ(expected, (*stream)->batches_per_epoch());
  EXPECT_EQ((*stream)->reconnects(), 0);
}

TEST(RankStreamTest, AJobChangedUnderTheRankIsRefusedOnReconnect) {
  TempDir dir;
  MakeDataset(dir.path(), /*samples=*/400, /*per_shard=*/100);
  auto server = std::make_unique<InProcessServer>(dir.path());
  const int port = server->server().port();
  client::RankStreamOptions options = Options(server->target(), "taken");
  options.job.set_batch_size(2);
  // The other run must register first: this rank's reconnects (stream and channel) wait
  // 2 s, far longer than the restart and that registration take even under ASan (with
  // 50 ms the rank once re-registered its own job before the other run did).
  options.reconnect_initial_seconds = 2;
  absl::StatusOr<std::unique_ptr<client::RankStream>> stream = client::RankStream::Connect(options);
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->StartEpoch(0).ok());
  ASSERT_TRUE((*stream)->Next().ok());

  // The server restarts on the same port and another run registers the same job id
  // with another seed before this rank reconnects.
  server.reset();
  server::ServerOptions same_port;
  same_port.shards_dir = dir.path();
  same_port.listen_address = absl::StrCat("127.0.0.1:", port);
  same_port.decode_threads = 2;
  auto restarted = std::make_unique<server::Daemon>(same_port);
  ASSERT_TRUE(restarted->Start().ok());
  ASSERT_TRUE(restarted->WaitUntilReady().ok());
  v1::RegisterRequest other = options.job;
  other.set_seed(12345);
  v1::RegisterResponse response;
  auto stub = v1::Shardcast::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", port)));
  ASSERT_TRUE(Register(stub.get(), other, &response).ok());

  absl::Status error;
  for (int i = 0; i < 400 && error.ok(); ++i) {
    absl::StatusOr<std::optional<client::ReceivedBatch>> next = (*stream)->Next();
    if (!next.ok())
      error = next.status();
    else
      ASSERT_TRUE(next->has_value()) << "resumed onto the other run's job";
  }
  // The re-registration with the old seed conflicts with the new job's.
  EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition) << error;
  EXPECT_THAT(error.message(), HasSubstr("seed"));
}

// A stream whose server is gone: its epoch's Next() waits for the reconnect deadline.
std::unique_ptr<client::RankStream> StreamOfAServerThatIsGone(const std::string& job) {
  TempDir dir;
  MakeDataset(dir.path(), /*samples=*/40, /*per_shard=*/10);
  auto server = std::make_unique<InProcessServer>(dir.path());
  client::RankStreamOptions options = Options(server->target(), job);
  options.reconnect_deadline_seconds = 60;
  options.stream_timeout_seconds = 60;
  absl::StatusOr<std::unique_ptr<client::RankStream>> stream = client::RankStream::Connect(options);
  EXPECT_TRUE(stream.ok()) << stream.status();
  if (!stream.ok()) return nullptr;
  server.reset();
  EXPECT_TRUE((*stream)->StartEpoch(0).ok());
  return *std::move(stream);
}

// The bounds below tell a wait that was woken from one that ran out (60 s).
TEST(RankStreamTest, CloseFromAnotherThreadWakesAWaitingNext) {
  std::unique_ptr<client::RankStream> stream = StreamOfAServerThatIsGone("closed");
  ASSERT_NE(stream, nullptr);
  const absl::Time start = absl::Now();
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(300));
    stream->Close();
  });
  absl::StatusOr<std::optional<client::ReceivedBatch>> next = stream->Next();
  closer.join();
  EXPECT_TRUE(client::IsClosed(next.status())) << next.status();
  EXPECT_THAT(next.status().message(), HasSubstr("job 'closed' rank 0: the stream was closed"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  // Closed for good.
  EXPECT_TRUE(client::IsClosed(stream->Next().status()));
  EXPECT_TRUE(client::IsClosed(stream->StartEpoch(0)));
}

TEST(RankStreamTest, AnInterruptEndsAWaitingNext) {
  std::unique_ptr<client::RankStream> stream = StreamOfAServerThatIsGone("interrupted");
  ASSERT_NE(stream, nullptr);
  const absl::Time start = absl::Now();
  std::atomic<int> asked{0};
  absl::StatusOr<std::optional<client::ReceivedBatch>> next =
      stream->Next([&] { return absl::Now() - start > absl::Milliseconds(300) && ++asked > 0; });
  EXPECT_EQ(next.status().code(), absl::StatusCode::kCancelled) << next.status();
  EXPECT_FALSE(client::IsClosed(next.status()));
  EXPECT_EQ(asked.load(), 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

// A server that accepts connections and never says a word (the kernel completes them
// in the listen backlog): the registration waits for it until the deadline, unless the
// interrupt check ends the wait.
TEST(RankStreamTest, AnInterruptEndsARegistrationThatWaits) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 16), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  client::RankStreamOptions options =
      Options(absl::StrCat("127.0.0.1:", ntohs(addr.sin_port)), "mute");
  options.reconnect_deadline_seconds = 60;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<client::RankStream>> stream = client::RankStream::Connect(
      options, [&] { return absl::Now() - start > absl::Milliseconds(300); });
  close(listener);
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kCancelled) << stream.status();
  EXPECT_THAT(stream.status().message(), HasSubstr("interrupted"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

// A port nobody listens on refuses at once: the registration then waits its backoff
// (here a minute) on the retry policy's cancellable wait, which the interrupt ends.
TEST(RankStreamTest, AnInterruptEndsTheBackoffBetweenRegisterAttempts) {
  const int probe = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(probe, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(probe);  // the port is free again: connecting is refused
  client::RankStreamOptions options =
      Options(absl::StrCat("127.0.0.1:", ntohs(addr.sin_port)), "refused");
  options.reconnect_initial_seconds = 60;
  options.reconnect_max_seconds = 60;
  options.reconnect_deadline_seconds = 120;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<client::RankStream>> stream = client::RankStream::Connect(
      options, [&] { return absl::Now() - start > absl::Milliseconds(300); });
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kCancelled) << stream.status();
  EXPECT_THAT(stream.status().message(), HasSubstr("interrupted"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

}  // namespace
}  // namespace shardcast::server_testing

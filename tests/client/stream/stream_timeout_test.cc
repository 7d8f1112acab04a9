// The progress deadline (StreamSettings::stream_timeout_seconds) against a real
// shardcast-server process stalled with SIGSTOP: the connection stays open and nothing
// arrives, which without the deadline blocks Next() forever. A stalled server makes
// Next() fail within a bound, naming the timeout; a stall shorter than the timeout, or
// a consumer slower than it, is no stall; a server that comes back while the rank
// reconnects after a stall is resumed with no batch lost or repeated.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>

#include "client/stream/rank_stream.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace shardcast::client {
namespace {

using ::testing::HasSubstr;
using testing_util::MakeSyntheticShards;
using testing_util::ServerProcess;
using testing_util::TempDir;
using Clock = std::chrono::steady_clock;

constexpr int64_t kBatches = 60;

class StreamTimeoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 480 samples, B=8, crop 96: 60 batches of 216 KiB, far more than HTTP/2 flow
    // control lets the client buffer, so the stream is still open when the server stops.
    ASSERT_TRUE(MakeSyntheticShards(dir_.path() + "/shards", 480, 4, 32, 60).ok());
    server_ = std::make_unique<ServerProcess>(dir_.path() + "/shards", dir_.path());
    absl::Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }
  // A stopped server would ignore the SIGTERM that ends it.
  void TearDown() override {
    if (server_ != nullptr) ::kill(server_->pid(), SIGCONT);
  }

  RankStreamOptions Options(const std::string& job, double stream_timeout_seconds) const {
    RankStreamOptions options;
    options.server = server_->address();
    options.job.set_job_id(job);
    options.job.set_rank(0);
    options.job.set_world_size(1);
    options.job.set_batch_size(8);
    options.job.set_split(v1::SPLIT_SAMPLE);
    options.job.mutable_transform()->set_resize(96);
    options.job.mutable_transform()->set_crop(96);
    options.prefetch = 2;
    options.reconnect_initial_seconds = 0.05;
    options.reconnect_max_seconds = 0.5;
    // Far beyond the stream timeouts here: a failure must come from the stall rule.
    options.reconnect_deadline_seconds = 120;
    options.stream_timeout_seconds = stream_timeout_seconds;
    return options;
  }

  void Signal(int sig) { ASSERT_EQ(::kill(server_->pid(), sig), 0); }

  // Takes the rest of the epoch; every batch must come, in order (RankStream checks it).
  void ExpectRestOfEpoch(RankStream* stream, int64_t first) {
    int64_t index = first;
    while (true) {
      absl::StatusOr<std::optional<ReceivedBatch>> next = stream->Next();
      ASSERT_TRUE(next.ok()) << next.status();
      if (!next->has_value()) break;
      EXPECT_EQ((**next)->index(), index++);
    }
    EXPECT_EQ(index, kBatches);
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

// NextIsReady (what the Python binding takes a batch by without releasing the GIL):
// true while Next() would return at once, false while it would wait on the server.
TEST_F(StreamTimeoutTest, NextIsReadyTellsWhetherNextWouldWait) {
  absl::StatusOr<std::unique_ptr<RankStream>> stream = RankStream::Connect(Options("ready", 0));
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->StartEpoch(0).ok());
  ASSERT_TRUE((*stream)->Next().ok());
  Signal(SIGSTOP);
  // Take what had arrived until, for a while, nothing more is ready.
  int64_t taken = 1;
  for (bool idle = false; !idle;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    idle = !(*stream)->NextIsReady();
    while ((*stream)->NextIsReady()) {
      absl::StatusOr<std::optional<ReceivedBatch>> next = (*stream)->Next();
      ASSERT_TRUE(next.ok() && next->has_value()) << "a stopped server ended the epoch";
      ++taken;
    }
  }
  ASSERT_LT(taken, kBatches);
  Signal(SIGCONT);
  const auto resumed = Clock::now();
  while (!(*stream)->NextIsReady()) {
    ASSERT_LT(Clock::now() - resumed, std::chrono::seconds(30)) << "no batch after SIGCONT";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ExpectRestOfEpoch(stream->get(), taken);
  EXPECT_TRUE((*stream)->NextIsReady());  // the end of the epoch is ready too
  absl::StatusOr<std::optional<ReceivedBatch>> end = (*stream)->Next();
  ASSERT_TRUE(end.ok() && !end->has_value());
}

TEST_F(StreamTimeoutTest, AStalledServerFailsTheStreamNamingTheTimeout) {
  absl::StatusOr<std::unique_ptr<RankStream>> stream = RankStream::Connect(Options("stalled", 2));
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->StartEpoch(0).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*stream)->Next().ok());
  Signal(SIGSTOP);
  const auto stopped = Clock::now();
  absl::Status error;
  int64_t epoch = 0;
  // Batches already buffered may still come; should the epoch end, the next one's
  // request stalls as well.
  while (error.ok() && Clock::now() - stopped < std::chrono::seconds(60)) {
    absl::StatusOr<std::optional<ReceivedBatch>> next = (*stream)->Next();
    if (!next.ok()) {
      error = next.status();
    } else if (!next->has_value()) {
      ASSERT_TRUE((*stream)->StartEpoch(++epoch).ok());
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - stopped).count();
  // A stall of 2 s, then one more stream timeout for the reconnect: well within 30 s.
  EXPECT_LT(seconds, 30);
  EXPECT_EQ(error.code(), absl::StatusCode::kDeadlineExceeded) << error;
  for (const std::string& part :
       {std::string("job 'stalled' rank 0 epoch "), std::string(" batch "),
        "server " + server_->address(), std::string("for 2 s (the stream timeout)")}) {
    EXPECT_THAT(error.message(), HasSubstr(part));
  }
  // The error stays until the next StartEpoch.
  EXPECT_EQ((*stream)->Next().status(), error);
}

TEST_F(StreamTimeoutTest, APauseShorterThanTheTimeoutIsNoStall) {
  absl::StatusOr<std::unique_ptr<RankStream>> stream = RankStream::Connect(Options("paused", 8));
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->StartEpoch(0).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*stream)->Next().ok());
  Signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  Signal(SIGCONT);
  ExpectRestOfEpoch(stream->get(), 3);
  EXPECT_EQ((*stream)->reconnects(), 0);
}

TEST_F(StreamTimeoutTest, AConsumerSlowerThanTheTimeoutIsNoStall) {
  // The prefetch queue is full while the consumer is away: that time is not the
  // server's, so it never counts toward the timeout.
  absl::StatusOr<std::unique_ptr<RankStream>> stream = RankStream::Connect(Options("slow", 1));
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->StartEpoch(0).ok());
  ASSERT_TRUE((*stream)->Next().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  ExpectRestOfEpoch(stream->get(), 1);
  EXPECT_EQ((*stream)->reconnects(), 0);
}

TEST_F(StreamTimeoutTest, AServerBackWhileReconnectingAfterAStallIsResumed) {
  // Stopped for 6 s with a 4 s timeout: the stream is cut after about 4 s and the
  // re-registration waits until 8 s; the server answers it after 6 s.
  absl::StatusOr<std::unique_ptr<RankStream>> stream = RankStream::Connect(Options("resumed", 4));
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->StartEpoch(0).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*stream)->Next().ok());
  Signal(SIGSTOP);
  std::thread resume([this] {
    std::this_thread::sleep_for(std::chrono::seconds(6));
    ::kill(server_->pid(), SIGCONT);
  });
  ExpectRestOfEpoch(stream->get(), 3);
  resume.join();
  EXPECT_GE((*stream)->reconnects(), 1);
}

}  // namespace
}  // namespace shardcast::client

// A stream's resources over its life: a slow client holds the server to its window
// (backpressure), a disconnect mid-stream stops the work and frees the buffers, a
// drain lets streams finish or cancels them after the grace period.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

using ::testing::HasSubstr;

constexpr int kBatch = 16;
constexpr int kCrop = 64;
constexpr int64_t kBatchBytes = int64_t{kBatch} * 3 * kCrop * kCrop;  // 196608
constexpr int kPrefetch = 3;

server::ServerOptions Options() {
  server::ServerOptions options;
  options.prefetch = kPrefetch;
  options.grace_period = absl::Seconds(1);
  return options;
}

v1::StreamBatchesRequest StreamRequest(const std::string& job, int rank) {
  v1::StreamBatchesRequest request;
  request.set_job_id(job);
  request.set_rank(rank);
  return request;
}

// A client channel without BDP probing and a small flow-control window, so the
// transport cannot soak up a stream: what the client does not read stays unsent.
std::shared_ptr<grpc::Channel> SlowReaderChannel(const std::string& target) {
  return MakeChannel(target, /*stream_window_bytes=*/64 * 1024);
}

class StreamLifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeDataset(dir_.path(), /*samples=*/480, /*per_shard=*/160);  // n = 30 at B=16, W=1
    server_ = std::make_unique<InProcessServer>(dir_.path(), Options());
    ASSERT_TRUE(
        Register(stub(), MakeRegister("life", 0, 1, kBatch, v1::SPLIT_SAMPLE, 64, kCrop), &job_)
            .ok());
    ASSERT_EQ(job_.batches_per_epoch(), 30);
  }
  v1::Shardcast::Stub* stub() { return server_->stub(); }

  TempDir dir_;
  std::unique_ptr<InProcessServer> server_;
  v1::RegisterResponse job_;
};

TEST_F(StreamLifecycleTest, SlowClientHoldsTheServerToItsWindow) {
  auto channel = SlowReaderChannel(server_->target());
  auto slow_stub = v1::Shardcast::NewStub(channel);
  grpc::ClientContext context;
  auto reader = slow_stub->StreamBatches(&context, StreamRequest("life", 0));
  v1::Batch batch;
  ASSERT_TRUE(reader->Read(&batch));
  // The client stalls. The server fills its window and stops.
  auto stalled = WaitForStatus(stub(), [](const v1::GetStatusResponse& s) {
    return s.jobs_size() == 1 && s.jobs(0).ranks(0).window_depth() == kPrefetch &&
           s.queue_depth() == 0;
  });
  // A write the transport accepted just before the window filled may still be counted
  // after that snapshot (a loaded machine): settle until two readings 300 ms apart agree.
  for (int i = 0; i < 30; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const v1::GetStatusResponse now = GetStatus(stub());
    if (now.jobs(0).ranks(0).batches_sent() == stalled.jobs(0).ranks(0).batches_sent()) break;
    stalled = now;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto later = GetStatus(stub());
  const auto& rank = later.jobs(0).ranks(0);
  EXPECT_TRUE(rank.streaming());
  EXPECT_EQ(rank.window_depth(), kPrefetch);
  EXPECT_EQ(later.queue_depth(), 0);
  // Nothing more was sent or decoded while the client slept.
  EXPECT_EQ(rank.batches_sent(), stalled.jobs(0).ranks(0).batches_sent());
  EXPECT_LE(rank.batches_sent(), 4) << "the stream ran ahead of a stalled client";
  // Memory: the window plus the batches the transport holds (sent, not yet read).
  EXPECT_LE(later.memory_in_use_bytes(), (kPrefetch + rank.batches_sent()) * kBatchBytes);
  EXPECT_GE(later.memory_in_use_bytes(), kPrefetch * kBatchBytes);
  // The client resumes and gets the rest.
  int received = 1;
  while (reader->Read(&batch)) ++received;
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(received, 30);
}

TEST_F(StreamLifecycleTest, DisconnectMidStreamStopsWorkAndFreesBuffers) {
  {
    // A small client window: with gRPC's own, a fast server could put all 30 batches
    // (5.9 MB) in flight before the client cancels, and the stream would end complete.
    auto slow_stub = v1::Shardcast::NewStub(SlowReaderChannel(server_->target()));
    grpc::ClientContext context;
    auto reader = slow_stub->StreamBatches(&context, StreamRequest("life", 0));
    v1::Batch batch;
    ASSERT_TRUE(reader->Read(&batch));
    ASSERT_TRUE(reader->Read(&batch));
    EXPECT_EQ(GetStatus(stub()).open_streams(), 1);
    context.TryCancel();
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  auto status = WaitForStatus(stub(), [](const v1::GetStatusResponse& s) {
    return s.open_streams() == 0 && s.memory_in_use_bytes() == 0 && s.queue_depth() == 0;
  });
  EXPECT_EQ(status.open_streams(), 0);
  EXPECT_EQ(status.memory_in_use_bytes(), 0);
  EXPECT_EQ(status.queue_depth(), 0);
  ASSERT_EQ(status.jobs_size(), 1);
  EXPECT_FALSE(status.jobs(0).ranks(0).streaming());
  EXPECT_EQ(status.jobs(0).ranks(0).window_depth(), 0);
  EXPECT_LT(status.jobs(0).ranks(0).batches_sent(), 30);
  // The rank reconnects and resumes where it stopped.
  auto resumed = StreamAll(stub(), "life", 0, 0, 2);
  EXPECT_TRUE(resumed.status.ok());
  EXPECT_EQ(resumed.batches.size(), 28u);
  EXPECT_EQ(resumed.batches[0].index(), 2);
}

TEST_F(StreamLifecycleTest, ManyDisconnectsLeaveNothingBehind) {
  for (int i = 0; i < 20; ++i) {
    grpc::ClientContext context;
    auto reader = stub()->StreamBatches(&context, StreamRequest("life", 0));
    v1::Batch batch;
    if (i % 2 == 0) reader->Read(&batch);  // half of them before the first batch
    context.TryCancel();
    reader->Finish();
  }
  auto status = WaitForStatus(stub(), [](const v1::GetStatusResponse& s) {
    return s.open_streams() == 0 && s.memory_in_use_bytes() == 0 && s.queue_depth() == 0;
  });
  EXPECT_EQ(status.open_streams(), 0);
  EXPECT_EQ(status.memory_in_use_bytes(), 0);
}

TEST_F(StreamLifecycleTest, DrainLetsReadersFinishAndCancelsStalledStreams) {
  // A stalled stream (client reads one batch and stops), of another job: a second
  // stream of the same rank would replace it.
  v1::RegisterResponse stalled_job;
  ASSERT_TRUE(Register(stub(), MakeRegister("stalled", 0, 1, kBatch, v1::SPLIT_SAMPLE, 64, kCrop),
                       &stalled_job)
                  .ok());
  auto stalled_channel = SlowReaderChannel(server_->target());
  auto stalled_stub = v1::Shardcast::NewStub(stalled_channel);
  grpc::ClientContext stalled_context;
  auto stalled = stalled_stub->StreamBatches(&stalled_context, StreamRequest("stalled", 0));
  v1::Batch batch;
  ASSERT_TRUE(stalled->Read(&batch));
  // A reader that keeps reading, a little slowly, across the start of the drain.
  std::atomic<bool> reading{false};
  StreamResult reader_result;
  std::thread reader([&] {
    reader_result = StreamAll(stub(), "life", 0, 1, 20, [&](int) {
      reading = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    });
  });
  while (!reading) std::this_thread::yield();  // the stream is open before the drain

  std::thread drainer([&] { server_->server().Drain(); });
  // While draining: NOT_SERVING, and new work is refused.
  for (int i = 0;
       i < 500 && Health(server_->channel()) != grpc::health::v1::HealthCheckResponse::NOT_SERVING;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(Health(server_->channel()), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Health(server_->channel(), "shardcast.v1.Shardcast"),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  v1::RegisterResponse response;
  grpc::Status refused = Register(stub(), MakeRegister("late", 0, 1, 4), &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(), HasSubstr("draining"));

  reader.join();
  drainer.join();
  // The reading client got its whole stream; the stalled one was cancelled.
  EXPECT_TRUE(reader_result.status.ok()) << reader_result.status.error_message();
  EXPECT_EQ(reader_result.batches.size(), 10u);
  while (stalled->Read(&batch)) {
  }
  EXPECT_FALSE(stalled->Finish().ok());
}

// The idle timer counts what the client takes. A client that reads slowly but steadily
// (a batch every 0.4 s, for more than four 1 s timeouts) is never reclaimed, though its
// transport holds more than a timeout's worth of batches ahead of it; one that stops
// reading is reclaimed meanwhile.
TEST_F(StreamLifecycleTest, ASlowSteadyReaderIsNeverIdleAndAStoppedOneIs) {
  server::ServerOptions options = Options();
  options.stream_idle_timeout = absl::Seconds(1);
  server_ = std::make_unique<InProcessServer>(dir_.path(), options);
  for (int rank = 0; rank < 2; ++rank) {
    v1::RegisterResponse response;
    ASSERT_TRUE(Register(stub(), MakeRegister("pace", rank, 2, kBatch, v1::SPLIT_SAMPLE, 64, kCrop),
                         &response)
                    .ok());
    ASSERT_EQ(response.batches_per_epoch(), 15);
  }
  // Four batches in the steady client's transport: 1.6 s of its reading. gRPC's own
  // (BDP-grown) window would take the whole epoch at once, and no write would wait.
  auto steady_stub =
      v1::Shardcast::NewStub(MakeChannel(server_->target(), 4 * static_cast<int>(kBatchBytes)));
  auto stopped_stub = v1::Shardcast::NewStub(SlowReaderChannel(server_->target()));
  grpc::ClientContext steady_context;
  grpc::ClientContext stopped_context;
  auto steady = steady_stub->StreamBatches(&steady_context, StreamRequest("pace", 0));
  auto stopped = stopped_stub->StreamBatches(&stopped_context, StreamRequest("pace", 1));
  v1::Batch batch;
  ASSERT_TRUE(stopped->Read(&batch));  // rank 1 takes one batch, then stops
  int read = 0;
  while (read < 11 && steady->Read(&batch)) {
    ++read;
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
  }
  EXPECT_EQ(read, 11) << "the steady reader's stream ended early";
  // Meanwhile the stopped client's stream was reclaimed, and only it.
  const v1::GetStatusResponse status = GetStatus(stub());
  EXPECT_EQ(status.streams_reclaimed_idle(), 1);
  while (steady->Read(&batch)) ++read;
  const grpc::Status steady_status = steady->Finish();
  EXPECT_TRUE(steady_status.ok()) << steady_status.error_message();
  EXPECT_EQ(read, 15);
  while (stopped->Read(&batch)) {
  }
  EXPECT_EQ(stopped->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(GetStatus(stub()).streams_reclaimed_idle(), 1);
}

}  // namespace
}  // namespace shardcast::server_testing

// Admission to the batch memory budget waits off the gRPC threads (issue 28): streams
// that do not fit wait in a queue (StreamManager) while health and status keep
// answering, get in first come first served as memory comes back, give up after
// --admission-wait, leave the queue when their client goes, and are refused when the
// server drains. Before, each waiting stream slept in a poll loop on a gRPC callback
// thread, the threads that also answer health and GetStatus.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

using ::testing::HasSubstr;

constexpr int kBatch = 4;
constexpr int kCrop = 96;
// 110,592 bytes: more than the 64 KiB stream window of SlowReaderChannel, so a batch
// written to a client that does not read stays in the server's write, holding its memory.
constexpr int64_t kBatchBytes = int64_t{kBatch} * 3 * kCrop * kCrop;
constexpr int kWaiters = 64;

std::shared_ptr<grpc::Channel> SlowReaderChannel(const std::string& target) {
  return MakeChannel(target, /*stream_window_bytes=*/64 * 1024);
}

v1::RegisterRequest RegisterRequest(const std::string& job, int rank, int world) {
  return MakeRegister(job, rank, world, kBatch, v1::SPLIT_SAMPLE, kCrop, kCrop);
}

// Latencies of `calls` runs of `call`, in milliseconds, sorted.
std::vector<double> Latencies(int calls, const std::function<void()>& call) {
  std::vector<double> ms;
  for (int i = 0; i < calls; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms;
}

std::string Describe(const std::vector<double>& ms) {
  return absl::StrFormat("median %.2f ms, max %.2f ms", ms[ms.size() / 2], ms.back());
}

class AdmissionTest : public ::testing::Test {
 protected:
  // A budget of exactly one batch, taken by a "holder" stream whose client never reads.
  void Start(absl::Duration admission_wait) {
    // 256 samples: 64 ranks x 1 batch of 4; the holder's job (1 rank) has 64 batches.
    MakeDataset(dir_.path(), /*samples=*/kWaiters * kBatch, /*per_shard=*/64);
    server::ServerOptions options;
    options.max_batch_memory_bytes = kBatchBytes;
    options.admission_wait = admission_wait;
    options.prefetch = 1;
    options.stream_idle_timeout = absl::ZeroDuration();  // the holder holds until cancelled
    server_ = std::make_unique<InProcessServer>(dir_.path(), options);
    v1::RegisterResponse response;
    ASSERT_TRUE(Register(stub(), RegisterRequest("hold", 0, 1), &response).ok());
    holder_stub_ = v1::Shardcast::NewStub(SlowReaderChannel(server_->target()));
    v1::StreamBatchesRequest request;
    request.set_job_id("hold");
    holder_ = holder_stub_->StreamBatches(&holder_context_, request);
    const v1::GetStatusResponse held = WaitForStatus(stub(), [](const v1::GetStatusResponse& s) {
      return s.open_streams() == 1 && s.batch_memory_reserved_bytes() == kBatchBytes;
    });
    ASSERT_EQ(held.batch_memory_reserved_bytes(), kBatchBytes) << "the holder never held";
  }
  void ReleaseHolder() {
    holder_context_.TryCancel();
    holder_->Finish();
  }
  v1::Shardcast::Stub* stub() { return server_->stub(); }

  TempDir dir_;
  std::unique_ptr<InProcessServer> server_;
  std::unique_ptr<v1::Shardcast::Stub> holder_stub_;
  grpc::ClientContext holder_context_;
  std::unique_ptr<grpc::ClientReader<v1::Batch>> holder_;
};

TEST_F(AdmissionTest, SixtyFourWaitingStreamsLeaveHealthAndStatusAnswering) {
  Start(absl::Seconds(120));
  for (int rank = 0; rank < kWaiters; ++rank) {
    v1::RegisterResponse response;
    ASSERT_TRUE(Register(stub(), RegisterRequest("wait", rank, kWaiters), &response).ok());
    ASSERT_EQ(response.batches_per_epoch(), 1);
  }
  auto status_call = [&] {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetStatusResponse response;
    ASSERT_TRUE(stub()->GetStatus(&context, v1::GetStatusRequest(), &response).ok());
  };
  auto health_call = [&] {
    ASSERT_EQ(Health(server_->channel()), grpc::health::v1::HealthCheckResponse::SERVING);
  };
  const std::vector<double> status_before = Latencies(20, status_call);
  const std::vector<double> health_before = Latencies(20, health_call);

  std::vector<StreamResult> results(kWaiters);
  std::vector<std::thread> waiters;
  for (int rank = 0; rank < kWaiters; ++rank) {
    waiters.emplace_back([&, rank] { results[rank] = StreamAll(stub(), "wait", rank, 0, 0); });
  }
  const v1::GetStatusResponse queued = WaitForStatus(
      stub(), [](const v1::GetStatusResponse& s) { return s.streams_waiting_for_memory() == 64; },
      60);
  ASSERT_EQ(queued.streams_waiting_for_memory(), kWaiters);
  EXPECT_EQ(queued.open_streams(), 1);  // the holder; none of the waiters opened
  EXPECT_DOUBLE_EQ(queued.admission_wait_seconds(), 120);

  const std::vector<double> status_waiting = Latencies(20, status_call);
  const std::vector<double> health_waiting = Latencies(20, health_call);
  // Still all waiting: every call above was answered while 64 streams waited.
  EXPECT_EQ(GetStatus(stub()).streams_waiting_for_memory(), kWaiters);
  std::printf("GetStatus: %s idle, %s with %d streams waiting\nhealth:    %s idle, %s waiting\n",
              Describe(status_before).c_str(), Describe(status_waiting).c_str(), kWaiters,
              Describe(health_before).c_str(), Describe(health_waiting).c_str());

  // The holder goes: the waiters get in one at a time (the budget holds one batch),
  // each taking its rank's one batch, and the 64 ranks together read every sample once.
  ReleaseHolder();
  for (std::thread& waiter : waiters) waiter.join();
  std::multiset<std::string> keys;
  for (int rank = 0; rank < kWaiters; ++rank) {
    ASSERT_TRUE(results[rank].status.ok())
        << "rank " << rank << ": " << results[rank].status.error_message();
    ASSERT_EQ(results[rank].batches.size(), 1u) << "rank " << rank;
    for (const v1::SampleInfo& sample : results[rank].batches[0].samples()) {
      keys.insert(sample.key());
    }
  }
  EXPECT_EQ(keys.size(), static_cast<size_t>(kWaiters * kBatch));
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), keys.size());
  const v1::GetStatusResponse after = WaitForStatus(stub(), [](const v1::GetStatusResponse& s) {
    return s.open_streams() == 0 && s.batch_memory_reserved_bytes() == 0;
  });
  EXPECT_EQ(after.streams_waiting_for_memory(), 0);
  EXPECT_EQ(after.streams_refused_memory(), 0);
  EXPECT_LE(after.batch_memory_peak_reserved_bytes(), kBatchBytes);
}

TEST_F(AdmissionTest, AStreamThatWaitsTooLongIsRefusedNamingTheFlag) {
  Start(absl::Milliseconds(300));
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(stub(), RegisterRequest("late", 0, kWaiters), &response).ok());
  const StreamResult refused = StreamAll(stub(), "late", 0, 0, 0);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("--admission-wait"));
  EXPECT_THAT(refused.status.error_message(), HasSubstr("--max-batch-memory"));
  const v1::GetStatusResponse status = GetStatus(stub());
  EXPECT_EQ(status.streams_refused_memory(), 1);
  EXPECT_EQ(status.streams_waiting_for_memory(), 0);
  ReleaseHolder();
}

TEST_F(AdmissionTest, AClientThatGoesAwayWhileWaitingLeavesTheQueueAndNothingOpens) {
  Start(absl::Seconds(120));
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(stub(), RegisterRequest("gone", 0, kWaiters), &response).ok());
  {
    grpc::ClientContext context;
    v1::StreamBatchesRequest request;
    request.set_job_id("gone");
    auto reader = stub()->StreamBatches(&context, request);
    ASSERT_EQ(WaitForStatus(stub(),
                            [](const v1::GetStatusResponse& s) {
                              return s.streams_waiting_for_memory() == 1;
                            })
                  .streams_waiting_for_memory(),
              1);
    context.TryCancel();
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  const v1::GetStatusResponse left = WaitForStatus(
      stub(), [](const v1::GetStatusResponse& s) { return s.streams_waiting_for_memory() == 0; });
  EXPECT_EQ(left.streams_waiting_for_memory(), 0);
  // Memory that comes back now finds nobody waiting: no stream of "gone" opens.
  ReleaseHolder();
  const v1::GetStatusResponse after = WaitForStatus(stub(), [](const v1::GetStatusResponse& s) {
    return s.open_streams() == 0 && s.batch_memory_reserved_bytes() == 0;
  });
  EXPECT_EQ(after.open_streams(), 0);
  EXPECT_EQ(after.batch_memory_reserved_bytes(), 0);
  ASSERT_EQ(after.jobs_size(), 2);
  for (const v1::JobStatus& job : after.jobs()) {
    if (job.job_id() == "gone") {
      EXPECT_EQ(job.ranks(0).batches_sent(), 0);
    }
  }
}

TEST_F(AdmissionTest, DrainRefusesTheStreamsWaitingForMemory) {
  Start(absl::Seconds(120));
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(stub(), RegisterRequest("drained", 0, kWaiters), &response).ok());
  StreamResult waiting;
  std::thread waiter([&] { waiting = StreamAll(stub(), "drained", 0, 0, 0); });
  ASSERT_EQ(WaitForStatus(
                stub(),
                [](const v1::GetStatusResponse& s) { return s.streams_waiting_for_memory() == 1; })
                .streams_waiting_for_memory(),
            1);
  std::thread drainer([&] { server_->server().Drain(); });
  waiter.join();
  EXPECT_EQ(waiting.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(waiting.status.error_message(), HasSubstr("draining"));
  ReleaseHolder();
  drainer.join();
}

}  // namespace
}  // namespace shardcast::server_testing

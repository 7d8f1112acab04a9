// Resource governance over real gRPC: the batch memory budget holds against clients
// that open streams and never read, idle streams are reclaimed, a rank's newer stream
// replaces its old one, --max-jobs refuses one job more, and status replies are bounded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "absl/time/clock.h"
#include "tests/server/fake_clock.h"
#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr int kCrop = 64;
constexpr int64_t kSampleBytes = int64_t{3} * kCrop * kCrop;  // 12288

v1::StreamBatchesRequest StreamRequest(const std::string& job, int rank, int64_t start = 0) {
  v1::StreamBatchesRequest request;
  request.set_job_id(job);
  request.set_rank(rank);
  request.set_start_batch(start);
  return request;
}

// A client channel with a 64 KiB stream window: a batch larger than that stays in the
// server's write until the client reads, so a client that never reads is felt at once.
std::shared_ptr<grpc::Channel> SlowReaderChannel(const std::string& target) {
  return MakeChannel(target, /*stream_window_bytes=*/64 * 1024);
}

// A stream opened with the raw stub and never read (until Drain).
struct OpenCall {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::Batch>> reader;

  // Reads what is left and returns the call's status.
  grpc::Status Drain() {
    v1::Batch batch;
    while (reader->Read(&batch)) {
    }
    return reader->Finish();
  }
};

class GovernanceTest : public ::testing::Test {
 protected:
  void Start(server::ServerOptions options, int64_t samples = 480) {
    MakeDataset(dir_.path(), samples, /*per_shard=*/160);
    server_ = std::make_unique<InProcessServer>(dir_.path(), options);
  }
  v1::Shardcast::Stub* stub() { return server_->stub(); }
  v1::RegisterResponse RegisterOk(const std::string& job, int rank, int world, int batch) {
    v1::RegisterResponse response;
    grpc::Status status = Register(
        stub(), MakeRegister(job, rank, world, batch, v1::SPLIT_SAMPLE, kCrop, kCrop), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  TempDir dir_;
  std::unique_ptr<InProcessServer> server_;
};

TEST_F(GovernanceTest, NonReadingStreamsStayWithinTheBudgetAndAreReclaimed) {
  constexpr int kAttackers = 40;
  constexpr int kAttackBatch = 8;  // 96 KiB a batch, more than the 64 KiB stream window
  constexpr int64_t kAttackBatchBytes = kAttackBatch * kSampleBytes;
  constexpr int64_t kBudget = 8 * kAttackBatchBytes;  // 768 KiB
  server::ServerOptions options;
  options.prefetch = 3;
  options.max_batch_memory_bytes = kBudget;
  options.stream_idle_timeout = absl::Seconds(1);
  // Attackers beyond the budget are refused before the first idle ones are reclaimed.
  options.admission_wait = absl::Milliseconds(100);
  options.max_jobs = 0;
  Start(options, /*samples=*/1280);  // n = 4 for 40 ranks of 8
  for (int rank = 0; rank < kAttackers; ++rank)
    RegisterOk("attack", rank, kAttackers, kAttackBatch);

  // 40 streams that never read, on one slow-reader connection.
  auto channel = SlowReaderChannel(server_->target());
  auto attack_stub = v1::Shardcast::NewStub(channel);
  std::vector<std::unique_ptr<OpenCall>> calls;
  for (int rank = 0; rank < kAttackers; ++rank) {
    auto call = std::make_unique<OpenCall>();
    call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    call->reader = attack_stub->StreamBatches(&call->context, StreamRequest("attack", rank));
    calls.push_back(std::move(call));
  }

  // The server's own accounting never exceeds the budget while the attack runs, and the
  // live buffers never exceed the accounting; the idle streams are reclaimed.
  int64_t most_reserved = 0;
  v1::GetStatusResponse status;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int polls = 0;
  do {
    status = GetStatus(stub());
    ++polls;
    EXPECT_EQ(status.batch_memory_limit_bytes(), kBudget);
    EXPECT_LE(status.batch_memory_reserved_bytes(), kBudget);
    EXPECT_LE(status.memory_in_use_bytes(), kBudget);
    most_reserved = std::max(most_reserved, status.batch_memory_reserved_bytes());
    if (status.open_streams() == 0 && status.streams_reclaimed_idle() > 0 && polls > 20) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(status.open_streams(), 0);
  EXPECT_LE(status.batch_memory_peak_reserved_bytes(), kBudget);
  EXPECT_GT(most_reserved, 0) << "the attack never reached the server";

  // Every attacker was either refused (not even one batch fit) or reclaimed as idle.
  int refused = 0, reclaimed = 0;
  for (auto& call : calls) {
    grpc::Status ended = call->Drain();
    if (ended.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      EXPECT_THAT(ended.error_message(), HasSubstr("--max-batch-memory"));
      EXPECT_THAT(ended.error_message(), HasSubstr("fewer concurrent streams"));
    } else {
      ++reclaimed;
      EXPECT_EQ(ended.error_code(), grpc::StatusCode::CANCELLED) << ended.error_message();
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(reclaimed, 0);
  status = WaitForStatus(stub(), [](const v1::GetStatusResponse& s) {
    return s.memory_in_use_bytes() == 0 && s.batch_memory_reserved_bytes() == 0;
  });
  EXPECT_EQ(status.streams_reclaimed_idle(), reclaimed);
  EXPECT_EQ(status.streams_refused_memory(), refused);
  EXPECT_EQ(status.memory_in_use_bytes(), 0);
  EXPECT_EQ(status.batch_memory_reserved_bytes(), 0);

  // A well-behaved rank then gets its whole epoch.
  const v1::RegisterResponse good = RegisterOk("good", 0, 1, 16);
  StreamResult result = StreamAll(stub(), "good", 0, 0, 0);
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(static_cast<int64_t>(result.batches.size()), good.batches_per_epoch());
  for (size_t i = 0; i < result.batches.size(); ++i) EXPECT_EQ(result.batches[i].index(), i);
}

TEST_F(GovernanceTest, AWindowShrinksToOneBatchUnderATightBudgetAndStillDeliversEverything) {
  server::ServerOptions options;
  options.prefetch = 4;
  options.max_batch_memory_bytes = 16 * kSampleBytes;  // exactly one batch of 16
  Start(options);
  const v1::RegisterResponse job = RegisterOk("tight", 0, 1, 16);
  StreamResult result = StreamAll(stub(), "tight", 0, 0, 0);
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(static_cast<int64_t>(result.batches.size()), job.batches_per_epoch());
  const v1::GetStatusResponse status = GetStatus(stub());
  EXPECT_LE(status.batch_memory_peak_reserved_bytes(), 16 * kSampleBytes);
}

TEST_F(GovernanceTest, UnderPressureWindowsGiveBackPrefetchSoANewStreamIsAdmitted) {
  constexpr int64_t kBatchBytes = 16 * kSampleBytes;
  constexpr int64_t kBudget = 6 * kBatchBytes;
  server::ServerOptions options;
  options.prefetch = 4;
  options.max_batch_memory_bytes = kBudget;
  options.stream_idle_timeout = absl::ZeroDuration();
  Start(options);
  const v1::RegisterResponse hog_job = RegisterOk("hog", 0, 1, 16);
  RegisterOk("hog2", 0, 1, 16);
  const v1::RegisterResponse new_job = RegisterOk("new", 0, 1, 16);

  // A stalled stream with a full window: its guaranteed batch and 4 extras (one
  // being written, 4 ready), leaving room for one more batch.
  auto channel = SlowReaderChannel(server_->target());
  auto slow_stub = v1::Shardcast::NewStub(channel);
  OpenCall hog;
  hog.reader = slow_stub->StreamBatches(&hog.context, StreamRequest("hog", 0));
  std::vector<v1::Batch> hog_batches(1);
  ASSERT_TRUE(hog.reader->Read(&hog_batches[0]));
  WaitForStatus(stub(), [&](const v1::GetStatusResponse& s) {
    return s.batch_memory_reserved_bytes() == 5 * kBatchBytes && s.queue_depth() == 0 &&
           s.decode_tasks_running() == 0;
  });
  // A second stalled stream takes that last batch: the budget is full.
  OpenCall hog2;
  hog2.reader = slow_stub->StreamBatches(&hog2.context, StreamRequest("hog2", 0));
  // A window gives back only assembled batches, and an empty queue still leaves the
  // last tasks running on the pool's threads: on a loaded machine (CI runs this beside
  // the 64 huge PNGs) a new stream that came before they finished was refused. So the
  // wait is for no task waiting and none running.
  v1::GetStatusResponse status = WaitForStatus(stub(), [&](const v1::GetStatusResponse& s) {
    return s.batch_memory_reserved_bytes() == kBudget && s.queue_depth() == 0 &&
           s.decode_tasks_running() == 0;
  });
  ASSERT_EQ(status.batch_memory_reserved_bytes(), kBudget);

  // A new stream is admitted: the first window gives back its prefetch.
  StreamResult result = StreamAll(stub(), "new", 0, 0, 0);
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(static_cast<int64_t>(result.batches.size()), new_job.batches_per_epoch());
  status = GetStatus(stub());
  EXPECT_GE(status.batches_given_back(), 1);
  EXPECT_EQ(status.streams_refused_memory(), 0);
  EXPECT_LE(status.batch_memory_peak_reserved_bytes(), kBudget);

  // The stalled client reads again and gets every batch, the given-back ones
  // assembled again byte for byte.
  v1::Batch batch;
  while (hog.reader->Read(&batch)) hog_batches.push_back(batch);
  EXPECT_TRUE(hog.reader->Finish().ok());
  ASSERT_EQ(static_cast<int64_t>(hog_batches.size()), hog_job.batches_per_epoch());
  Reference reference(dir_.path());
  const std::vector<PlannedBatch> planned = reference.Plan(hog_job, 1, 0, 0);
  for (size_t i = 0; i < hog_batches.size(); ++i) {
    reference.ExpectBatch(hog_batches[i], planned[i], Reference::Spec(hog_job));
  }
  hog2.context.TryCancel();
  hog2.Drain();
}

TEST_F(GovernanceTest, ABatchLargerThanTheWholeBudgetIsRefusedSayingWhatToChange) {
  server::ServerOptions options;
  options.max_batch_memory_bytes = 4 * kSampleBytes;
  Start(options);
  RegisterOk("big", 0, 1, 16);
  StreamResult result = StreamAll(stub(), "big", 0, 0, 0);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(result.status.error_message(), HasSubstr("--max-batch-memory"));
  EXPECT_THAT(result.status.error_message(), HasSubstr("lower the batch size or crop"));
  EXPECT_TRUE(result.batches.empty());
}

TEST_F(GovernanceTest, ANewerStreamOfTheSameRankReplacesTheOldOne) {
  server::ServerOptions options;
  options.prefetch = 3;
  options.stream_idle_timeout = absl::ZeroDuration();  // only the replacement ends it
  Start(options);
  const v1::RegisterResponse job = RegisterOk("re", 0, 1, 16);  // n = 30

  // The old stream: its client read one batch and stopped (a write waits on it).
  auto channel = SlowReaderChannel(server_->target());
  auto old_stub = v1::Shardcast::NewStub(channel);
  OpenCall old;
  old.reader = old_stub->StreamBatches(&old.context, StreamRequest("re", 0));
  v1::Batch batch;
  ASSERT_TRUE(old.reader->Read(&batch));
  WaitForStatus(stub(), [](const v1::GetStatusResponse& s) {
    return s.jobs_size() == 1 && s.jobs(0).ranks(0).window_depth() == 3;
  });

  // The reconnect: the newer stream gets everything from where it asks.
  StreamResult result = StreamAll(stub(), "re", 0, 0, 1);
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(static_cast<int64_t>(result.batches.size()), job.batches_per_epoch() - 1);

  // The old call was ended by the server (cancelled: its write was waiting on the
  // client), counted, and its window freed.
  const grpc::Status ended = old.Drain();
  EXPECT_THAT(ended.error_code(), AnyOf(grpc::StatusCode::CANCELLED, grpc::StatusCode::ABORTED));
  if (ended.error_code() == grpc::StatusCode::ABORTED) {
    EXPECT_THAT(ended.error_message(), HasSubstr("replaced by a newer stream"));
  }
  const v1::GetStatusResponse status = WaitForStatus(stub(), [](const v1::GetStatusResponse& s) {
    return s.open_streams() == 0 && s.memory_in_use_bytes() == 0;
  });
  EXPECT_EQ(status.streams_replaced(), 1);
  EXPECT_EQ(status.open_streams(), 0);
  EXPECT_EQ(status.memory_in_use_bytes(), 0);
  EXPECT_EQ(status.batch_memory_reserved_bytes(), 0);
  EXPECT_EQ(status.jobs(0).ranks(0).next_batch(), job.batches_per_epoch());
}

TEST_F(GovernanceTest, TheOldStreamIsFreedAtOnceWhileTheNewOneRuns) {
  server::ServerOptions options;
  options.prefetch = 3;
  options.stream_idle_timeout = absl::ZeroDuration();
  Start(options);
  RegisterOk("re", 0, 1, 16);
  auto channel = SlowReaderChannel(server_->target());
  auto slow_stub = v1::Shardcast::NewStub(channel);
  OpenCall old;
  old.reader = slow_stub->StreamBatches(&old.context, StreamRequest("re", 0));
  v1::Batch batch;
  ASSERT_TRUE(old.reader->Read(&batch));
  WaitForStatus(stub(), [](const v1::GetStatusResponse& s) {
    return s.jobs_size() == 1 && s.jobs(0).ranks(0).window_depth() == 3;
  });
  // A second stalled stream for the same rank: while it stalls, only its own window
  // (3 batches + the one being written) may be held; the old one's is gone.
  OpenCall second;
  second.reader = slow_stub->StreamBatches(&second.context, StreamRequest("re", 0));
  ASSERT_TRUE(second.reader->Read(&batch));
  const v1::GetStatusResponse status = WaitForStatus(stub(), [](const v1::GetStatusResponse& s) {
    return s.open_streams() == 1 && s.streams_replaced() == 1 &&
           s.memory_in_use_bytes() <= 4 * 16 * kSampleBytes;
  });
  EXPECT_EQ(status.open_streams(), 1);
  EXPECT_EQ(status.streams_replaced(), 1);
  EXPECT_LE(status.memory_in_use_bytes(), 4 * 16 * kSampleBytes);
  EXPECT_FALSE(old.Drain().ok());
  second.context.TryCancel();
  second.Drain();
}

TEST_F(GovernanceTest, AnIdleStreamIsCancelledCountedAndItsMemoryFreed) {
  server::ServerOptions options;
  options.prefetch = 3;
  options.stream_idle_timeout = absl::Milliseconds(500);
  Start(options);
  const v1::RegisterResponse job = RegisterOk("idle", 0, 1, 16);
  auto channel = SlowReaderChannel(server_->target());
  auto slow_stub = v1::Shardcast::NewStub(channel);
  OpenCall call;
  call.reader = slow_stub->StreamBatches(&call.context, StreamRequest("idle", 0));
  v1::Batch batch;
  ASSERT_TRUE(call.reader->Read(&batch));
  // The client stops reading: the server cancels the stream and frees its buffers.
  const v1::GetStatusResponse status = WaitForStatus(
      stub(),
      [](const v1::GetStatusResponse& s) {
        return s.streams_reclaimed_idle() == 1 && s.open_streams() == 0 &&
               s.memory_in_use_bytes() == 0;
      },
      /*timeout_seconds=*/30);
  EXPECT_EQ(status.streams_reclaimed_idle(), 1);
  EXPECT_EQ(status.open_streams(), 0);
  EXPECT_EQ(status.memory_in_use_bytes(), 0);
  EXPECT_EQ(status.batch_memory_reserved_bytes(), 0);
  EXPECT_DOUBLE_EQ(status.stream_idle_timeout_seconds(), 0.5);
  EXPECT_EQ(call.Drain().error_code(), grpc::StatusCode::CANCELLED);
  // The rank comes back and resumes.
  StreamResult resumed = StreamAll(stub(), "idle", 0, 0, 1);
  EXPECT_TRUE(resumed.status.ok()) << resumed.status.error_message();
  EXPECT_EQ(static_cast<int64_t>(resumed.batches.size()), job.batches_per_epoch() - 1);
}

TEST_F(GovernanceTest, AReaderThatKeepsReadingIsNeverIdle) {
  server::ServerOptions options;
  options.prefetch = 2;
  options.stream_idle_timeout = absl::Seconds(2);
  Start(options);
  const v1::RegisterResponse job = RegisterOk("steady", 0, 1, 16);
  // A trainer step of 20 ms per batch, far below the timeout.
  StreamResult result = StreamAll(stub(), "steady", 0, 0, 0, [](int) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  EXPECT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(static_cast<int64_t>(result.batches.size()), job.batches_per_epoch());
  EXPECT_EQ(GetStatus(stub()).streams_reclaimed_idle(), 0);
}

TEST_F(GovernanceTest, MaxJobsRefusesOneJobMoreUntilAJobExpires) {
  FakeClock clock;
  server::ServerOptions options;
  options.max_jobs = 2;
  options.job_ttl = absl::Hours(1);
  options.clock = &clock;
  Start(options);
  RegisterOk("one", 0, 1, 16);
  RegisterOk("two", 0, 1, 16);
  v1::RegisterResponse response;
  grpc::Status refused =
      Register(stub(), MakeRegister("three", 0, 1, 16, v1::SPLIT_SAMPLE, kCrop, kCrop), &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("--max-jobs 2"));
  EXPECT_THAT(refused.error_message(), HasSubstr("'three'"));
  // The ranks of a job already there may still (re-)register.
  RegisterOk("one", 0, 1, 16);
  EXPECT_EQ(GetStatus(stub()).max_jobs(), 2);
  // Once the jobs expire (--job-ttl), their places are free.
  clock.Advance(absl::Hours(1) + absl::Seconds(1));
  RegisterOk("three", 0, 1, 16);
}

TEST_F(GovernanceTest, StatusListsABoundedNumberOfJobsAndSaysSo) {
  server::ServerOptions options;
  options.max_jobs = 0;
  options.max_unstreamed_jobs_per_peer = 0;  // all these jobs are one peer's, none streams
  Start(options);
  const int jobs = server::ServiceCore::kMaxListedJobs + 5;
  for (int i = 0; i < jobs; ++i) RegisterOk(absl::StrCat("job", i), 0, 1, 16);
  const v1::GetStatusResponse status = GetStatus(stub());
  EXPECT_EQ(status.jobs_size(), server::ServiceCore::kMaxListedJobs);
  EXPECT_EQ(status.max_listed_jobs(), server::ServiceCore::kMaxListedJobs);
  EXPECT_EQ(status.total_jobs(), jobs);
  EXPECT_TRUE(status.jobs_truncated());
  EXPECT_EQ(status.jobs(0).total_ranks(), 1);
  EXPECT_FALSE(status.jobs(0).ranks_truncated());
}

TEST_F(GovernanceTest, AJobIdWithControlBytesIsEscapedInTheReply) {
  Start(server::ServerOptions());
  StreamResult result = StreamAll(stub(), "evil\n2026-12-02T00:00:00.000Z E forged", 0, 0, 0);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(result.status.error_message(), HasSubstr("evil\\n2026"));
  EXPECT_EQ(result.status.error_message().find('\n'), std::string::npos);
}

}  // namespace
}  // namespace shardcast::server_testing

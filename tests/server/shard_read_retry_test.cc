// The serve path's retry of a shard read the host failed (BatchAssembler, --shard-read-
// retry) on a fake clock, through a MemberReader that fails on purpose: the backoff
// schedule, giving up after the retry window, and a cancel that ends a wait at once.
// Seconds of retries run in milliseconds of wall time; the same faults made on a real
// server process by chmod stay in host_faults_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/shards/member_reader.h"
#include "common/shards/shard_reader.h"
#include "gmock/gmock.h"
#include "server/assembly/batch_assembler.h"
#include "server/assembly/decode_pool.h"
#include "server/assembly/served_dataset.h"
#include "server/base/server_stats.h"
#include "tests/server/server_test_support.h"
#include "tests/support/fake_clock.h"

namespace shardcast::server_testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using util_testing::FakeClock;

// A local reader whose first `failures` reads (-1: every read) fail as the host's
// error (HostIoError, as EMFILE or a store's 503 would), then reads the real shard.
class FlakyReader final : public MemberReader {
 public:
  FlakyReader(const DatasetIndex& index, int failures) : real_(index), failures_(failures) {}

  absl::StatusOr<std::string> ReadMember(uint32_t shard, const MemberRef& member) override {
    ++reads_;
    if (failures_ < 0 || failures_.fetch_sub(1) > 0) {
      return AsHostIoError(absl::UnavailableError(
          absl::StrCat("shard ", shard, ": Too many open files (EMFILE, made by the test)")));
    }
    return real_.ReadMember(shard, member);
  }
  std::vector<ChangedShard> ChangedShards() const override { return {}; }
  std::vector<UnreadableShard> UnreadableShards() const override { return {}; }
  int reads() const { return reads_; }

 private:
  ShardReader real_;
  std::atomic<int> failures_;
  std::atomic<int> reads_{0};
};

class ShardReadRetryTest : public ::testing::Test {
 protected:
  // A dataset of real JPEGs in real tar shards, read through a FlakyReader.
  void Serve(int failures, absl::Duration retry_window) {
    MakeDataset(dir_.path(), /*samples=*/4, /*per_shard=*/4);
    auto loaded = server::ServedDataset::Load(dir_.path(), IndexOptions());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    dataset_ = std::make_unique<server::ServedDataset>(
        (*loaded)->index(), [this, failures](const DatasetIndex& index) {
          auto reader = std::make_unique<FlakyReader>(index, failures);
          reader_ = reader.get();
          return reader;
        });
    pool_ = std::make_unique<server::DecodePool>(1);
    server::DecodeLimits limits;
    limits.host_error_retry = retry_window;
    limits.clock = &clock_;
    assembler_ =
        std::make_unique<server::BatchAssembler>(dataset_.get(), pool_.get(), &stats_, limits);
  }
  void TearDown() override { pool_.reset(); }  // its tasks use the assembler

  struct Result {
    std::shared_ptr<server::AssembledBatch> batch;
    bool complete = false;
  };
  // Assembles a batch of one sample (shard 0, sample 0) and waits for it.
  Result AssembleOne() {
    PlannedBatch planned;
    planned.samples = {SampleRef{0, 0, 1}};
    auto content = std::make_shared<server::BatchContent>();
    content->transform.resize = 40;
    content->transform.crop = 32;
    auto prepared = assembler_->Prepare(planned, *content);
    EXPECT_TRUE(prepared.ok()) << prepared.status();
    Result result{*prepared};
    absl::Mutex mu;
    bool done = false;
    assembler_->Launch(result.batch, planned, content, cancelled_, [&](bool complete) {
      absl::MutexLock lock(&mu);
      result.complete = complete;
      done = true;
    });
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
    return result;
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<server::ServedDataset> dataset_;
  FlakyReader* reader_ = nullptr;
  server::ServerStats stats_{absl::Now()};
  std::unique_ptr<server::DecodePool> pool_;
  std::unique_ptr<server::BatchAssembler> assembler_;
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

TEST_F(ShardReadRetryTest, AHostErrorThatClearsIsRetriedWithBackoffAndTheSampleServedWhole) {
  Serve(/*failures=*/5, absl::Seconds(20));
  const Result result = AssembleOne();
  EXPECT_TRUE(result.complete);
  EXPECT_TRUE(result.batch->failure().ok()) << result.batch->failure();
  EXPECT_FALSE(result.batch->header().samples(0).substituted());
  EXPECT_EQ(reader_->reads(), 6);
  EXPECT_EQ(stats_.shard_read_retries.load(), 5);
  EXPECT_THAT(clock_.waits(),
              ElementsAre(absl::Milliseconds(10), absl::Milliseconds(20), absl::Milliseconds(40),
                          absl::Milliseconds(80), absl::Milliseconds(160)));
}

// 20 s of retries, at most a second apart, then the batch fails with UNAVAILABLE naming
// the shard and the flag, still marked a host error (never a substitute).
TEST_F(ShardReadRetryTest, AHostErrorThatLastsFailsTheBatchAfterTheRetryWindow) {
  const absl::Time start = clock_.Now();
  Serve(/*failures=*/-1, absl::Seconds(20));
  const Result result = AssembleOne();
  EXPECT_TRUE(result.complete);
  const absl::Status& failure = result.batch->failure();
  EXPECT_TRUE(absl::IsUnavailable(failure)) << failure;
  EXPECT_TRUE(IsHostIoError(failure)) << failure;
  EXPECT_THAT(failure.message(), HasSubstr("shard 0: Too many open files"));
  EXPECT_THAT(failure.message(), HasSubstr(" times for 20s (--shard-read-retry)"));
  const absl::Duration waited = clock_.Now() - start;
  EXPECT_GT(waited, absl::Seconds(18));
  EXPECT_LT(waited, absl::Seconds(20));  // no wait began that would end past the window
  for (absl::Duration wait : clock_.waits()) EXPECT_LE(wait, absl::Seconds(1));
  EXPECT_EQ(stats_.shard_read_retries.load(), static_cast<int64_t>(clock_.waits().size()));
}

// The stream is cancelled (its client went away, a drain, the server stopping) while a
// read waits for its next attempt: the wait ends at once, the clock does not move, and
// the batch finishes as cancelled instead of holding its decode thread for the window.
TEST_F(ShardReadRetryTest, ACancelDuringTheBackoffEndsItAtOnce) {
  Serve(/*failures=*/-1, absl::Hours(1));
  const absl::Time start = clock_.Now();
  clock_.set_on_wait([this](absl::Duration) { cancelled_->store(true); });
  const Result result = AssembleOne();
  EXPECT_FALSE(result.complete);
  EXPECT_EQ(clock_.waits().size(), 1u);
  EXPECT_EQ(clock_.Now(), start);
  EXPECT_EQ(reader_->reads(), 1);
}

}  // namespace
}  // namespace shardcast::server_testing

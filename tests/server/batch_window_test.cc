// The per-stream window without gRPC: batches come out in plan order and exactly
// `count` of them, the window never holds more than its depth, a stalled consumer
// stops the decode work, and Cancel releases everything.
#include "server/serving/batch_window.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/synchronization/mutex.h"
#include "server/serving/resend_window.h"
#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

using server::AssembledBatch;
using server::BatchWindow;

std::string Describe(const absl::StatusOr<BatchWindow::TakeResult>& result) {
  if (!result.ok()) return result.status().ToString();
  switch (*result) {
    case BatchWindow::TakeResult::kBatch:
      return "batch";
    case BatchWindow::TakeResult::kPending:
      return "pending";
    case BatchWindow::TakeResult::kEnd:
      return "end";
  }
  return "?";
}

class BatchWindowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeDataset(dir_.path(), /*samples=*/120, /*per_shard=*/40);
    auto dataset = server::ServedDataset::Load(dir_.path(), IndexOptions());
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    dataset_ = *std::move(dataset);
    pool_ = std::make_unique<server::DecodePool>(2);
    assembler_ = std::make_unique<server::BatchAssembler>(dataset_.get(), pool_.get(), &stats_);
    config_.batch_size = 6;
    config_.split = Split::kSample;
    config_.seed = 3;
    spec_.resize = 40;
    spec_.crop = 32;
  }

  // The pool stops first, as in ServiceCore: a test may end with a batch
  // still decoding, and its tasks use the assembler and the stats, which the default
  // member order would destroy before joining the pool's threads.
  void TearDown() override { pool_.reset(); }

  std::shared_ptr<BatchWindow> MakeWindow(int depth, int64_t start, int64_t count) {
    auto plan = EpochPlan::Create(dataset_->shard_sizes(), config_, /*epoch=*/2);
    EXPECT_TRUE(plan.ok());
    plan_ = *plan;
    BatchWindow::Options options;
    options.depth = depth;
    options.count = count;
    options.content =
        std::make_shared<const server::BatchContent>(server::BatchContent{true, spec_, {}});
    return BatchWindow::Create(assembler_.get(), plan_->Iterate(0, start), options);
  }

  // The benchmark-only window (resend_window.h) on the same plan.
  std::shared_ptr<BatchWindow> MakeResendWindow(int depth, int64_t start, int64_t count) {
    auto plan = EpochPlan::Create(dataset_->shard_sizes(), config_, /*epoch=*/2);
    EXPECT_TRUE(plan.ok());
    plan_ = *plan;
    BatchWindow::Options options;
    options.depth = depth;
    options.count = count;
    options.content =
        std::make_shared<const server::BatchContent>(server::BatchContent{true, spec_, {}});
    return server::ResendFirstBatchWindow::Create(assembler_.get(), plan_->Iterate(0, start),
                                                  options);
  }

  // Takes one batch, waiting for the ready callback when needed; "batch", "end", or
  // the error status as text.
  std::string TakeWaiting(BatchWindow* window, std::shared_ptr<AssembledBatch>* out) {
    for (;;) {
      absl::Mutex mu;
      bool ready = false;
      auto result = window->Take(out, [&] {
        absl::MutexLock lock(&mu);
        ready = true;
      });
      if (!result.ok() || *result != BatchWindow::TakeResult::kPending) return Describe(result);
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&ready));
    }
  }

  TempDir dir_;
  std::unique_ptr<server::ServedDataset> dataset_;
  server::ServerStats stats_{absl::Now()};
  std::unique_ptr<server::DecodePool> pool_;
  std::unique_ptr<server::BatchAssembler> assembler_;
  std::shared_ptr<const EpochPlan> plan_;
  PlanConfig config_;
  TransformSpec spec_;
};

TEST_F(BatchWindowTest, GivesTheSuffixInOrderThenEnds) {
  const int64_t n = 120 / 6;
  auto window = MakeWindow(/*depth=*/3, /*start=*/5, /*count=*/n - 5);
  window->Start();
  Reference reference(dir_.path());
  auto expected = plan_->Iterate(0, 5);
  PlannedBatch planned;
  for (int64_t i = 5; i < n; ++i) {
    std::shared_ptr<AssembledBatch> batch;
    ASSERT_EQ(TakeWaiting(window.get(), &batch), "batch");
    EXPECT_LE(window->depth(), 3);
    ASSERT_TRUE(expected->Next(&planned));
    EXPECT_EQ(batch->header().index(), i);
    const std::string pixels(reinterpret_cast<const char*>(batch->images()), batch->image_bytes());
    EXPECT_TRUE(pixels == reference.Images(planned, spec_)) << "batch " << i;
  }
  std::shared_ptr<AssembledBatch> none;
  EXPECT_EQ(Describe(window->Take(&none, [] {})), "end");
  EXPECT_EQ(window->taken(), n - 5);
}

TEST_F(BatchWindowTest, AStalledConsumerHoldsExactlyTheWindow) {
  const int64_t sample_bytes = 3 * 32 * 32;
  auto window = MakeWindow(/*depth=*/4, 0, 20);
  window->Start();
  // Nobody takes: the window fills to its depth and the pool goes idle. A window
  // launches only from Take and from its own tasks: once it is full and no task is
  // queued or running, nothing more can start.
  for (int i = 0;
       i < 2000 && (pool_->queue_depth() > 0 || pool_->running() > 0 || window->depth() < 4); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(window->depth(), 4);
  EXPECT_EQ(pool_->queue_depth(), 0);
  EXPECT_EQ(stats_.buffer_bytes.load(), 4 * 6 * sample_bytes);
  // Taking one launches exactly one more.
  std::shared_ptr<AssembledBatch> batch;
  ASSERT_EQ(TakeWaiting(window.get(), &batch), "batch");
  EXPECT_EQ(window->depth(), 4);
  EXPECT_EQ(stats_.buffer_bytes.load(), 5 * 6 * sample_bytes);  // 4 in the window + taken
  batch.reset();
  EXPECT_EQ(stats_.buffer_bytes.load(), 4 * 6 * sample_bytes);
}

TEST_F(BatchWindowTest, CancelReleasesBuffersAndSilencesCallbacks) {
  auto window = MakeWindow(/*depth=*/4, 0, 20);
  window->Start();
  std::atomic<int> calls{0};
  std::shared_ptr<AssembledBatch> batch;
  // Arm the callback (the first batch cannot be ready yet, or it is taken here).
  if (Describe(window->Take(&batch, [&] { ++calls; })) == "batch") batch.reset();
  window->Cancel();
  const int calls_at_cancel = calls.load();
  EXPECT_EQ(window->depth(), 0);
  // Queued tasks are skipped; once the pool drains, nothing is held.
  for (int i = 0; i < 500 && (pool_->queue_depth() > 0 || stats_.buffer_bytes.load() > 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(stats_.buffer_bytes.load(), 0);
  EXPECT_EQ(calls.load(), calls_at_cancel);
  EXPECT_EQ(Describe(window->Take(&batch, [] {})), "end");
}

TEST_F(BatchWindowTest, APlanShorterThanCountIsAnErrorNotAHang) {
  // Start at batch 18 of 20 but ask for 5 batches: the plan runs out after 2.
  auto window = MakeWindow(/*depth=*/2, 18, 5);
  window->Start();
  std::shared_ptr<AssembledBatch> batch;
  EXPECT_EQ(TakeWaiting(window.get(), &batch), "batch");
  EXPECT_EQ(TakeWaiting(window.get(), &batch), "batch");
  // The error comes in-band, with its status, after the batches launched before it.
  EXPECT_EQ(TakeWaiting(window.get(), &batch),
            "INTERNAL: the epoch plan ended after 2 of 5 batches");
  EXPECT_EQ(TakeWaiting(window.get(), &batch),
            "INTERNAL: the epoch plan ended after 2 of 5 batches");
}

TEST(AssembledBatchTest, ABufferThatCannotBeAllocatedIsAStatusNotAnException) {
  std::atomic<int64_t> gauge{0};
  // 65536 x 3 x 8192 x 8192 bytes (13 TiB): more than any machine maps.
  absl::StatusOr<std::shared_ptr<AssembledBatch>> huge =
      AssembledBatch::Create(65536, 8192, &gauge);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("batch of 65536 images of 3x8192x8192"), std::string::npos)
      << huge.status();
  EXPECT_EQ(gauge.load(), 0);
  absl::StatusOr<std::shared_ptr<AssembledBatch>> small = AssembledBatch::Create(2, 8, &gauge);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(gauge.load(), 2 * 3 * 8 * 8);
  small->reset();
  EXPECT_EQ(gauge.load(), 0);
}

// A freed buffer is reused by the next batch of its size (and counted live again), one
// of another size is not, and buffers over kMaxKeptBatchBufferBytes are never kept.
TEST(AssembledBatchTest, AFreedBufferServesTheNextBatchOfItsSize) {
  std::atomic<int64_t> gauge{0};
  std::shared_ptr<AssembledBatch> first = *AssembledBatch::Create(3, 24, &gauge);
  const uint8_t* first_images = first->images();
  first.reset();
  std::shared_ptr<AssembledBatch> other = *AssembledBatch::Create(3, 25, &gauge);
  EXPECT_NE(other->images(), first_images);
  std::shared_ptr<AssembledBatch> again = *AssembledBatch::Create(3, 24, &gauge);
  EXPECT_EQ(again->images(), first_images);
  EXPECT_EQ(gauge.load(), 3 * 3 * 24 * 24 + 3 * 3 * 25 * 25);
  again.reset();
  other.reset();
  EXPECT_EQ(gauge.load(), 0);
  // 2 x 3 x 3400 x 3400 bytes: 66 MiB, over the kept size.
  std::shared_ptr<AssembledBatch> big = *AssembledBatch::Create(2, 3400, &gauge);
  ASSERT_GT(big->image_bytes(), server::kMaxKeptBatchBufferBytes);
  big->images()[0] = 1;
  big.reset();
  std::shared_ptr<AssembledBatch> big_again = *AssembledBatch::Create(2, 3400, &gauge);
  EXPECT_EQ(big_again->images()[0], 0) << "a fresh mapping, not the freed one";
}

// BENCHMARK ONLY mode, out of BatchWindow (issue 36): the first batch is assembled once
// and sent `count` times, each stamped with the position it goes out at.
TEST_F(BatchWindowTest, ResendWindowSendsTheFirstBatchCountTimes) {
  auto window = MakeResendWindow(/*depth=*/3, /*start=*/5, /*count=*/4);
  window->Start();
  Reference reference(dir_.path());
  auto expected = plan_->Iterate(0, 5);
  PlannedBatch first;
  ASSERT_TRUE(expected->Next(&first));
  const std::string first_pixels = reference.Images(first, spec_);
  std::shared_ptr<AssembledBatch> sent_first;
  for (int64_t i = 5; i < 9; ++i) {
    std::shared_ptr<AssembledBatch> batch;
    ASSERT_EQ(TakeWaiting(window.get(), &batch), "batch");
    if (sent_first == nullptr) sent_first = batch;
    EXPECT_EQ(batch.get(), sent_first.get()) << "batch " << i << " is assembled again";
    EXPECT_EQ(batch->header().index(), i);
    const std::string pixels(reinterpret_cast<const char*>(batch->images()), batch->image_bytes());
    EXPECT_TRUE(pixels == first_pixels) << "batch " << i;
    EXPECT_LE(window->depth(), 1);
  }
  std::shared_ptr<AssembledBatch> none;
  EXPECT_EQ(Describe(window->Take(&none, [] {})), "end");
  EXPECT_EQ(window->taken(), 4);
  EXPECT_EQ(window->Shrink(), 0);
}

TEST_F(BatchWindowTest, ResendWindowEndsOnCancel) {
  auto window = MakeResendWindow(/*depth=*/3, /*start=*/0, /*count=*/10);
  window->Start();
  std::shared_ptr<AssembledBatch> batch;
  ASSERT_EQ(TakeWaiting(window.get(), &batch), "batch");
  window->Cancel();
  std::shared_ptr<AssembledBatch> none;
  EXPECT_EQ(Describe(window->Take(&none, [] {})), "end");
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(window->taken(), 1);
}

}  // namespace
}  // namespace shardcast::server_testing

// BatchStream against the real shardcast-server binary on loopback: batch counts and
// shapes, rank disjointness, pixels equal to the data plane's, normalization, resume.
#include "client/batch_stream.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "common/image/image_transform.h"
#include "common/plan/epoch_plan.h"
#include "common/shards/dataset_index.h"
#include "common/shards/shard_reader.h"
#include "tests/support/child_process.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace shardcast {
namespace {

using testing_util::MakeSyntheticShards;
using testing_util::ServerProcess;
using testing_util::TempDir;

constexpr int64_t kSamples = 300;
constexpr int kClasses = 5;
constexpr int kImageSize = 32;
constexpr int kResize = 28;
constexpr int kCrop = 24;
constexpr int kBatch = 16;

class BatchStreamTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new TempDir();
    ASSERT_FALSE(scratch_->path().empty());
    shards_ = scratch_->path() + "/shards";
    ASSERT_TRUE(MakeSyntheticShards(shards_, kSamples, kClasses, kImageSize, 50).ok());
    server_ = new ServerProcess(shards_, scratch_->path());
    absl::Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete scratch_;
    scratch_ = nullptr;
  }

  static BatchStreamOptions Options(const std::string& job, int rank, int world) {
    BatchStreamOptions options;
    options.server = server_->address();
    options.job.job_id = job;
    options.job.rank = rank;
    options.job.world_size = world;
    options.job.overrides.batch_size = kBatch;
    options.job.overrides.split = Split::kSample;
    options.job.overrides.remainder = Remainder::kDrop;
    options.job.overrides.seed = 11;
    options.job.overrides.transform_mode = TransformMode::kCenter;
    options.job.overrides.resize = kResize;
    options.job.overrides.crop = kCrop;
    options.prefetch = 3;
    options.reconnect_deadline_seconds = 20;
    return options;
  }

  static std::unique_ptr<BatchStream> MustConnect(const BatchStreamOptions& options) {
    absl::StatusOr<std::unique_ptr<BatchStream>> stream = BatchStream::Connect(options);
    EXPECT_TRUE(stream.ok()) << stream.status() << "\nserver stderr:\n" << server_->Stderr();
    return stream.ok() ? std::move(*stream) : nullptr;
  }

  // Every batch of an epoch from `start`, checking that Next() ends with nullopt.
  static std::vector<TrainingBatch> Drain(BatchStream& stream, int64_t epoch, int64_t start = 0) {
    std::vector<TrainingBatch> out;
    absl::Status started = stream.StartEpoch(epoch, start);
    EXPECT_TRUE(started.ok()) << started;
    while (true) {
      absl::StatusOr<std::optional<TrainingBatch>> next = stream.Next();
      EXPECT_TRUE(next.ok()) << next.status();
      if (!next.ok() || !next->has_value()) break;
      out.push_back(std::move(**next));
      if (static_cast<int64_t>(out.size()) > stream.batches_per_epoch()) break;
    }
    return out;
  }

  static TempDir* scratch_;
  static std::string shards_;
  static ServerProcess* server_;
};

TempDir* BatchStreamTest::scratch_ = nullptr;
std::string BatchStreamTest::shards_;
ServerProcess* BatchStreamTest::server_ = nullptr;

TEST_F(BatchStreamTest, ReceivesExactlyNBatchesOfTheRegisteredShape) {
  auto stream = MustConnect(Options("shape", 0, 1));
  ASSERT_NE(stream, nullptr);
  const int64_t n = kSamples / kBatch;
  EXPECT_EQ(stream->batches_per_epoch(), n);
  EXPECT_EQ(stream->registration().num_classes, kClasses);
  ASSERT_EQ(stream->registration().image_shape.size(), 3u);
  EXPECT_EQ(stream->registration().image_shape[1], kCrop);

  for (int64_t epoch : {0, 1}) {
    std::vector<TrainingBatch> batches = Drain(*stream, epoch);
    ASSERT_EQ(static_cast<int64_t>(batches.size()), n);
    for (int64_t i = 0; i < n; ++i) {
      const TrainingBatch& b = batches[i];
      EXPECT_EQ(b.epoch, epoch);
      EXPECT_EQ(b.index, i);
      EXPECT_EQ(b.ImagesUint8().sizes(), (std::vector<int64_t>{kBatch, 3, kCrop, kCrop}));
      EXPECT_EQ(b.ImagesUint8().dtype(), torch::kUInt8);
      EXPECT_EQ(b.images.sizes(), (std::vector<int64_t>{kBatch, 3, kCrop, kCrop}));
      EXPECT_EQ(b.images.dtype(), torch::kFloat32);
      EXPECT_EQ(b.labels.sizes(), (std::vector<int64_t>{kBatch}));
      EXPECT_EQ(b.labels.dtype(), torch::kInt64);
      EXPECT_TRUE(b.valid.all().item<bool>());
      EXPECT_GE(b.labels.min().item<int64_t>(), 0);
      EXPECT_LT(b.labels.max().item<int64_t>(), kClasses);
      ASSERT_EQ(b.samples.size(), static_cast<size_t>(kBatch));
    }
    // Past the end, Next() keeps saying "no more".
    absl::StatusOr<std::optional<TrainingBatch>> after = stream->Next();
    ASSERT_TRUE(after.ok());
    EXPECT_FALSE(after->has_value());
  }
}

TEST_F(BatchStreamTest, TwoRanksGetDisjointSamplesWithSampleSplit) {
  auto r0 = MustConnect(Options("disjoint", 0, 2));
  auto r1 = MustConnect(Options("disjoint", 1, 2));
  ASSERT_NE(r0, nullptr);
  ASSERT_NE(r1, nullptr);
  const int64_t n = kSamples / (kBatch * 2);
  EXPECT_EQ(r0->batches_per_epoch(), n);
  EXPECT_EQ(r1->batches_per_epoch(), n);
  EXPECT_EQ(r0->registration().job_fingerprint, r1->registration().job_fingerprint);

  // Both ranks stream at the same time, as trainers do.
  std::vector<TrainingBatch> b1;
  std::thread other([&] { b1 = Drain(*r1, 0); });
  std::vector<TrainingBatch> b0 = Drain(*r0, 0);
  other.join();
  ASSERT_EQ(static_cast<int64_t>(b0.size()), n);
  ASSERT_EQ(static_cast<int64_t>(b1.size()), n);
  std::set<std::string> keys0, keys1;
  for (const auto& b : b0)
    for (const auto& s : b.samples) EXPECT_TRUE(keys0.insert(s.key).second) << s.key;
  for (const auto& b : b1)
    for (const auto& s : b.samples) EXPECT_TRUE(keys1.insert(s.key).second) << s.key;
  EXPECT_EQ(static_cast<int64_t>(keys0.size()), n * kBatch);
  EXPECT_EQ(static_cast<int64_t>(keys1.size()), n * kBatch);
  for (const std::string& k : keys0) EXPECT_EQ(keys1.count(k), 0u) << "served to both: " << k;
}

TEST_F(BatchStreamTest, PixelsLabelsAndSamplesEqualTheDataPlaneAndPlan) {
  auto stream = MustConnect(Options("pixels", 1, 2));
  ASSERT_NE(stream, nullptr);
  const client::Registration& reg = stream->registration();

  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(shards_, IndexOptions{});
  ASSERT_TRUE(index.ok()) << index.status();
  ShardReader reader(*index);
  PlanConfig config;
  config.world_size = 2;
  config.batch_size = kBatch;
  config.split = Split::kSample;
  config.remainder = Remainder::kDrop;
  config.seed = reg.config.plan.seed;
  config.block_size = reg.config.plan.block_size;
  const int64_t epoch = 2;
  absl::StatusOr<std::shared_ptr<const EpochPlan>> plan =
      EpochPlan::Create(index->ShardSampleCounts(), config, epoch);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ((*plan)->batches_per_rank(), stream->batches_per_epoch());
  auto planned = (*plan)->Iterate(1, 0);

  TransformSpec spec;
  spec.mode = TransformMode::kCenter;
  spec.resize = kResize;
  spec.crop = kCrop;
  const size_t chw = 3 * kCrop * kCrop;
  std::vector<uint8_t> expected(chw);

  std::vector<TrainingBatch> batches = Drain(*stream, epoch);
  ASSERT_EQ(static_cast<int64_t>(batches.size()), stream->batches_per_epoch());
  for (const TrainingBatch& b : batches) {
    PlannedBatch pb;
    ASSERT_TRUE(planned->Next(&pb));
    ASSERT_EQ(pb.samples.size(), b.samples.size());
    torch::Tensor images = b.ImagesUint8().contiguous();
    const uint8_t* got = images.data_ptr<uint8_t>();
    for (size_t i = 0; i < b.samples.size(); ++i) {
      const SampleMeta& meta = b.samples[i];
      ASSERT_EQ(meta.shard, pb.samples[i].shard) << "batch " << b.index << " sample " << i;
      ASSERT_EQ(meta.index_in_shard, pb.samples[i].index) << "batch " << b.index;
      const SampleEntry& entry = index->shards[meta.shard].samples[meta.index_in_shard];
      EXPECT_EQ(meta.key, entry.key);
      EXPECT_EQ(b.labels[i].item<int64_t>(), entry.label) << entry.key;
      EXPECT_FALSE(meta.substituted);
      absl::StatusOr<std::string> bytes =
          reader.ReadMember(meta.shard, entry.members[entry.image_member]);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      ASSERT_TRUE(
          DecodeAndTransform(*bytes, spec, pb.samples[i].augment_seed, expected.data()).ok());
      EXPECT_EQ(0, memcmp(got + i * chw, expected.data(), chw))
          << "pixels of " << entry.key << " differ from the data plane's";
    }
  }
  PlannedBatch extra;
  EXPECT_FALSE(planned->Next(&extra));
}

TEST_F(BatchStreamTest, NormalizesWithConfiguredMeanAndStd) {
  BatchStreamOptions options = Options("norm", 0, 1);
  options.mean = {0.25, 0.5, 0.75};
  options.std = {0.5, 0.25, 0.125};
  auto stream = MustConnect(options);
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->StartEpoch(0).ok());
  absl::StatusOr<std::optional<TrainingBatch>> next = stream->Next();
  ASSERT_TRUE(next.ok() && next->has_value()) << next.status();
  const TrainingBatch& b = **next;
  // Check element by element in double precision against the formula.
  torch::Tensor u8 = b.ImagesUint8().to(torch::kDouble);
  for (int c = 0; c < 3; ++c) {
    torch::Tensor want = (u8.select(1, c) / 255.0 - options.mean[c]) / options.std[c];
    torch::Tensor got = b.images.select(1, c).to(torch::kDouble);
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << "channel " << c;
  }
  // The CPU path looks normalized values up in a table made by the same float ops the
  // device path runs: the very same floats as those ops on the received bytes.
  torch::Tensor mean = torch::tensor(std::vector<float>{0.25f, 0.5f, 0.75f}).view({1, 3, 1, 1});
  torch::Tensor std = torch::tensor(std::vector<float>{0.5f, 0.25f, 0.125f}).view({1, 3, 1, 1});
  torch::Tensor ops = b.ImagesUint8().to(torch::kFloat32).div_(255.0f).sub_(mean).div_(std);
  EXPECT_TRUE(torch::equal(b.images, ops));
  // The image bytes are not constant (a real check, not 0 == 0).
  EXPECT_GT(b.ImagesUint8().max().item<uint8_t>(), b.ImagesUint8().min().item<uint8_t>());
}

TEST_F(BatchStreamTest, StartEpochAtKEqualsTheSuffixAndRestartsCleanly) {
  auto stream = MustConnect(Options("suffix", 0, 1));
  ASSERT_NE(stream, nullptr);
  const int64_t n = stream->batches_per_epoch();
  std::vector<TrainingBatch> full = Drain(*stream, 3);
  ASSERT_EQ(static_cast<int64_t>(full.size()), n);

  // Abandon an epoch part-way (the open stream is cancelled), then resume at k.
  ASSERT_TRUE(stream->StartEpoch(4).ok());
  ASSERT_TRUE(stream->Next().ok());
  const int64_t k = 7;
  std::vector<TrainingBatch> suffix = Drain(*stream, 3, k);
  ASSERT_EQ(static_cast<int64_t>(suffix.size()), n - k);
  for (int64_t i = k; i < n; ++i) {
    const TrainingBatch& a = full[i];
    const TrainingBatch& b = suffix[i - k];
    EXPECT_EQ(b.index, i);
    ASSERT_EQ(a.samples.size(), b.samples.size());
    for (size_t s = 0; s < a.samples.size(); ++s) EXPECT_EQ(a.samples[s].key, b.samples[s].key);
    EXPECT_TRUE(torch::equal(a.ImagesUint8(), b.ImagesUint8())) << "batch " << i;
    EXPECT_TRUE(torch::equal(a.labels, b.labels)) << "batch " << i;
  }
  // start_batch == n: an empty epoch.
  EXPECT_TRUE(Drain(*stream, 3, n).empty());
}

TEST_F(BatchStreamTest, ImageTensorOutlivesTheStream) {
  torch::Tensor kept;
  torch::Tensor copy;
  {
    auto stream = MustConnect(Options("alias", 0, 1));
    ASSERT_NE(stream, nullptr);
    ASSERT_TRUE(stream->StartEpoch(0).ok());
    absl::StatusOr<std::optional<TrainingBatch>> next = stream->Next();
    ASSERT_TRUE(next.ok() && next->has_value());
    kept = (*next)->ImagesUint8();
    copy = kept.clone();
    // One received piece is aliased, not copied; several are copied into one tensor.
    const auto& chunks = (*next)->received.image_chunks();
    EXPECT_EQ(kept.data_ptr() == static_cast<const void*>(chunks[0].data()), chunks.size() == 1);
  }  // stream, its thread and queue are gone; `kept` holds what it needs alive
  EXPECT_TRUE(torch::equal(kept, copy));
}

TEST_F(BatchStreamTest, BadCallsAndRefusedJobsAreErrors) {
  BatchStreamOptions bad_rank = Options("bad", 2, 2);
  absl::StatusOr<std::unique_ptr<BatchStream>> refused = BatchStream::Connect(bad_rank);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();

  BatchStreamOptions bad_norm = Options("bad", 0, 1);
  bad_norm.mean = {0.5};
  EXPECT_EQ(BatchStream::Connect(bad_norm).status().code(), absl::StatusCode::kInvalidArgument);

  if (!torch::cuda::is_available()) {
    BatchStreamOptions no_gpu = Options("bad", 0, 1);
    no_gpu.device = torch::Device(torch::kCUDA, 0);
    EXPECT_EQ(BatchStream::Connect(no_gpu).status().code(), absl::StatusCode::kInvalidArgument);
  }

  auto stream = MustConnect(Options("calls", 0, 1));
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(stream->Next().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(stream->StartEpoch(0, stream->batches_per_epoch() + 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(stream->StartEpoch(-1).code(), absl::StatusCode::kInvalidArgument);

  // A second rank of the same job with another batch size conflicts.
  BatchStreamOptions conflicting = Options("calls", 0, 1);
  conflicting.job.overrides.batch_size = kBatch * 2;
  EXPECT_EQ(BatchStream::Connect(conflicting).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(BatchStreamNoServerTest, ConnectGivesUpAfterTheDeadline) {
  BatchStreamOptions options;
  options.server = "127.0.0.1:1";  // a privileged port nobody listens on here
  options.job.job_id = "nobody";
  options.job.world_size = 1;
  options.reconnect_deadline_seconds = 1.0;
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<BatchStream>> stream = BatchStream::Connect(options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kUnavailable) << stream.status();
  EXPECT_GE(seconds, 0.5);
  EXPECT_LT(seconds, 10.0);
}

}  // namespace
}  // namespace shardcast

// Fault tests: the server is SIGKILLed mid-epoch (or between epochs) and restarted on
// the same port; BatchStream reconnects and resumes with no batch lost or repeated.
// A server that never comes back ends the epoch with an error after the deadline.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "client/batch_stream.h"
#include "tests/support/child_process.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace shardcast {
namespace {

using testing_util::MakeSyntheticShards;
using testing_util::ServerProcess;
using testing_util::TempDir;

constexpr int kBatch = 8;

// What identifies a batch's content: index, sample keys and the image bytes.
struct BatchRecord {
  int64_t index = 0;
  std::vector<std::string> keys;
  torch::Tensor images;
  bool operator==(const BatchRecord& o) const {
    return index == o.index && keys == o.keys && torch::equal(images, o.images);
  }
};

BatchRecord Record(const TrainingBatch& b) {
  BatchRecord r;
  r.index = b.index;
  for (const SampleMeta& s : b.samples) r.keys.push_back(s.key);
  r.images = b.ImagesUint8().clone();
  return r;
}

class ServerRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(scratch_.path().empty());
    shards_ = scratch_.path() + "/shards";
    // 480 samples, B=8, W=1: n = 60 batches of 216 KiB (crop 96), 12.7 MiB in all: far
    // more than the HTTP/2 flow-control window lets the client buffer, so the stream
    // is still open when the server is killed.
    ASSERT_TRUE(MakeSyntheticShards(shards_, 480, 4, 32, 60).ok());
    server_ = std::make_unique<ServerProcess>(shards_, scratch_.path());
    absl::Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }

  BatchStreamOptions Options(const std::string& job) const {
    BatchStreamOptions options;
    options.server = server_->address();
    options.job.job_id = job;
    options.job.overrides.batch_size = kBatch;
    options.job.overrides.split = Split::kSample;
    options.job.overrides.seed = 5;
    options.job.overrides.resize = 96;
    options.job.overrides.crop = 96;
    options.prefetch = 2;
    options.reconnect_initial_seconds = 0.05;
    options.reconnect_max_seconds = 0.5;
    options.reconnect_deadline_seconds = 30;
    return options;
  }

  std::vector<BatchRecord> Uninterrupted(const std::string& job, int64_t epoch) {
    absl::StatusOr<std::unique_ptr<BatchStream>> stream = BatchStream::Connect(Options(job));
    EXPECT_TRUE(stream.ok()) << stream.status();
    std::vector<BatchRecord> out;
    if (!stream.ok()) return out;
    EXPECT_TRUE((*stream)->StartEpoch(epoch).ok());
    while (true) {
      absl::StatusOr<std::optional<TrainingBatch>> next = (*stream)->Next();
      EXPECT_TRUE(next.ok()) << next.status();
      if (!next.ok() || !next->has_value()) break;
      out.push_back(Record(**next));
    }
    return out;
  }

  // Restarts the killed server on the port it had, after `down` of downtime.
  void RestartAfter(std::chrono::milliseconds down) {
    const int port = server_->port();
    std::this_thread::sleep_for(down);
    absl::Status started = server_->Start(port);
    ASSERT_TRUE(started.ok()) << started;
    ASSERT_EQ(server_->port(), port);
  }

  TempDir scratch_;
  std::string shards_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(ServerRestartTest, KilledMidEpochAndRestartedOnSamePortResumesExactly) {
  const int64_t epoch = 1;
  std::vector<BatchRecord> reference = Uninterrupted("reference", epoch);
  ASSERT_EQ(reference.size(), 60u);

  absl::StatusOr<std::unique_ptr<BatchStream>> stream = BatchStream::Connect(Options("faulty"));
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->StartEpoch(epoch).ok());
  std::vector<BatchRecord> got;
  bool killed = false;
  while (true) {
    absl::StatusOr<std::optional<TrainingBatch>> next = (*stream)->Next();
    ASSERT_TRUE(next.ok()) << next.status();
    if (!next->has_value()) break;
    got.push_back(Record(**next));
    if (got.size() == 10 && !killed) {
      // The stream is open (50 batches to go, 2 prefetched): kill it hard.
      server_->Kill(SIGKILL);
      killed = true;
      RestartAfter(std::chrono::milliseconds(700));
    }
  }
  ASSERT_TRUE(killed);
  EXPECT_GE((*stream)->reconnects(), 1);
  ASSERT_EQ(got.size(), reference.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].index, static_cast<int64_t>(i));
    EXPECT_TRUE(got[i] == reference[i]) << "batch " << i << " differs from the uninterrupted run";
  }
}

TEST_F(ServerRestartTest, RestartBetweenEpochsReRegistersTheForgottenJob) {
  absl::StatusOr<std::unique_ptr<BatchStream>> stream = BatchStream::Connect(Options("between"));
  ASSERT_TRUE(stream.ok()) << stream.status();
  const int64_t n = (*stream)->batches_per_epoch();
  ASSERT_TRUE((*stream)->StartEpoch(0, n - 1).ok());
  ASSERT_TRUE((*stream)->Next().ok());
  server_->Kill(SIGKILL);
  RestartAfter(std::chrono::milliseconds(0));
  // The new server has never heard of job "between".
  ASSERT_TRUE((*stream)->StartEpoch(1, n - 3).ok());
  int64_t count = 0;
  while (true) {
    absl::StatusOr<std::optional<TrainingBatch>> next = (*stream)->Next();
    ASSERT_TRUE(next.ok()) << next.status();
    if (!next->has_value()) break;
    EXPECT_EQ((*next)->index, n - 3 + count);
    ++count;
  }
  EXPECT_EQ(count, 3);
}

// The job fingerprint covers the transform: a server restarted with another default
// resize would serve other pixels under the same plan, and the rank must be told
// rather than resumed (before, only the plan settings were compared and the rank
// resumed silently onto different bytes).
TEST_F(ServerRestartTest, RestartWithAnotherDefaultTransformIsRefusedNotResumed) {
  BatchStreamOptions options = Options("transform");
  options.job.overrides.resize.reset();  // the server's default: 96
  server_->Kill(SIGKILL);
  ASSERT_TRUE(server_->Start(server_->port(), {"--resize", "96", "--crop", "96"}).ok());
  absl::StatusOr<std::unique_ptr<BatchStream>> stream = BatchStream::Connect(options);
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_EQ((*stream)->registration().config.transform.resize, 96);
  ASSERT_TRUE((*stream)->StartEpoch(0).ok());
  ASSERT_TRUE((*stream)->Next().ok());
  const int port = server_->port();
  server_->Kill(SIGKILL);
  ASSERT_TRUE(server_->Start(port, {"--resize", "112", "--crop", "96"}).ok());
  absl::Status error;
  for (int i = 0; i < 100 && error.ok(); ++i) {
    absl::StatusOr<std::optional<TrainingBatch>> next = (*stream)->Next();
    if (!next.ok())
      error = next.status();
    else
      ASSERT_TRUE(next->has_value()) << "the epoch ended on the changed server";
  }
  EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition) << error;
  EXPECT_NE(error.message().find("job fingerprint"), std::string::npos) << error;
}

TEST_F(ServerRestartTest, ServerThatNeverComesBackIsAnErrorAfterTheDeadline) {
  BatchStreamOptions options = Options("orphan");
  options.reconnect_deadline_seconds = 1.5;
  absl::StatusOr<std::unique_ptr<BatchStream>> stream = BatchStream::Connect(options);
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->StartEpoch(0).ok());
  ASSERT_TRUE((*stream)->Next().ok());
  server_->Kill(SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  int64_t expected_index = 1;
  absl::Status error;
  while (true) {
    absl::StatusOr<std::optional<TrainingBatch>> next = (*stream)->Next();
    if (!next.ok()) {
      error = next.status();
      break;
    }
    ASSERT_TRUE(next->has_value()) << "epoch ended normally without a server";
    // What was already received still comes out, in order, before the error.
    EXPECT_EQ((*next)->index, expected_index++);
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_EQ(error.code(), absl::StatusCode::kUnavailable) << error;
  EXPECT_NE(error.message().find("orphan"), std::string::npos) << error;
  EXPECT_GE(waited, 1.0);
  EXPECT_LT(waited, 15.0);
  // The error sticks until the next StartEpoch.
  EXPECT_EQ((*stream)->Next().status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace shardcast

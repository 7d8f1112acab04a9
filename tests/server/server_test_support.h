// Shared pieces of the server integration tests: small synthetic datasets in temp
// dirs, an in-process server on port 0, the shardcast-server binary as a child
// process (both on tests/support), gRPC clients, and the data plane's own answer for a
// planned batch.
#ifndef SHARDCAST_TESTS_SERVER_SERVER_TEST_SUPPORT_H_
#define SHARDCAST_TESTS_SERVER_SERVER_TEST_SUPPORT_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/rpc/channel.h"
#include "common/image/image_transform.h"
#include "common/plan/epoch_plan.h"
#include "common/shards/dataset_index.h"
#include "common/shards/shard_reader.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/daemon.h"
#include "shardcast/v1/shardcast.grpc.pb.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace shardcast::server_testing {

namespace v1 = ::shardcast::v1;
namespace fs = std::filesystem;

using testing_util::TempDir;

// Writes a small synthetic dataset (64x64 JPEGs by default, 5 classes) into `dir`.
inline void MakeDataset(const std::string& dir, int64_t samples, int64_t per_shard, int size = 64) {
  absl::Status made =
      testing_util::MakeSyntheticShards(dir, samples, /*num_classes=*/5, size, per_shard);
  ASSERT_TRUE(made.ok()) << made;
}

// A client channel as every shardcast client makes it; `stream_window_bytes` > 0 makes
// a slow reader (see client::ChannelOptions).
inline std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                                  int stream_window_bytes = 0) {
  client::ChannelOptions options;
  options.target = target;
  options.stream_window_bytes = stream_window_bytes;
  return client::MakeChannel(options);
}

inline v1::RegisterRequest MakeRegister(const std::string& job, int rank, int world, int batch,
                                        v1::Split split = v1::SPLIT_SAMPLE, int resize = 48,
                                        int crop = 40) {
  v1::RegisterRequest request;
  request.set_job_id(job);
  request.set_rank(rank);
  request.set_world_size(world);
  request.set_batch_size(batch);
  request.set_split(split);
  request.mutable_transform()->set_mode(v1::TRANSFORM_MODE_CENTER);
  request.mutable_transform()->set_resize(resize);
  request.mutable_transform()->set_crop(crop);
  request.set_seed(11);
  return request;
}

inline grpc::Status Register(v1::Shardcast::Stub* stub, const v1::RegisterRequest& request,
                             v1::RegisterResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return stub->Register(&context, request, response);
}

struct StreamResult {
  grpc::Status status;
  std::vector<v1::Batch> batches;
};

// Reads a whole stream. `after_each(i)` runs after batch i is received.
inline StreamResult StreamAll(v1::Shardcast::Stub* stub, const v1::StreamBatchesRequest& request,
                              const std::function<void(int)>& after_each = nullptr) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = stub->StreamBatches(&context, request);
  StreamResult result;
  v1::Batch batch;
  while (reader->Read(&batch)) {
    result.batches.push_back(batch);
    if (after_each) after_each(static_cast<int>(result.batches.size()) - 1);
  }
  result.status = reader->Finish();
  return result;
}

inline StreamResult StreamAll(v1::Shardcast::Stub* stub, const std::string& job, int rank,
                              int64_t epoch, int64_t start_batch,
                              const std::function<void(int)>& after_each = nullptr) {
  v1::StreamBatchesRequest request;
  request.set_job_id(job);
  request.set_rank(rank);
  request.set_epoch(epoch);
  request.set_start_batch(start_batch);
  return StreamAll(stub, request, after_each);
}

inline v1::GetStatusResponse GetStatus(v1::Shardcast::Stub* stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetStatusResponse response;
  grpc::Status status = stub->GetStatus(&context, v1::GetStatusRequest(), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

// Polls GetStatus until `done(status)` or the timeout; returns the last status.
inline v1::GetStatusResponse WaitForStatus(
    v1::Shardcast::Stub* stub, const std::function<bool(const v1::GetStatusResponse&)>& done,
    double timeout_seconds = 10) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(timeout_seconds * 1000));
  v1::GetStatusResponse status = GetStatus(stub);
  while (!done(status) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    status = GetStatus(stub);
  }
  return status;
}

// grpc.health.v1 status of `service`; UNKNOWN on an RPC error.
inline grpc::health::v1::HealthCheckResponse::ServingStatus Health(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& service = "") {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  if (!stub->Check(&context, request, &response).ok()) {
    return grpc::health::v1::HealthCheckResponse::UNKNOWN;
  }
  return response.status();
}

// The data plane's own answer, computed without the server: plans and decodes with
// the common/ library exactly as the documentation says a batch is made.
class Reference {
 public:
  explicit Reference(const std::string& dir) {
    auto index = BuildDatasetIndex(dir, IndexOptions());
    EXPECT_TRUE(index.ok()) << index.status();
    index_ = *std::move(index);
    reader_ = std::make_unique<ShardReader>(index_);
  }
  const DatasetIndex& index() const { return index_; }

  // The planned batches of `rank` for the job config a RegisterResponse reports.
  std::vector<PlannedBatch> Plan(const v1::RegisterResponse& job, int world, int rank,
                                 int64_t epoch) const {
    PlanConfig config;
    config.world_size = world;
    config.batch_size = job.batch_size();
    config.split = job.split() == v1::SPLIT_SHARD ? Split::kShard : Split::kSample;
    config.remainder = job.remainder() == v1::REMAINDER_PAD ? Remainder::kPad : Remainder::kDrop;
    config.workers = job.workers();
    config.seed = job.seed();
    config.shuffle_shards = job.shuffle_shards();
    config.shuffle_buffer = job.shuffle_buffer();
    config.block_size = job.block_size();
    auto plan = EpochPlan::Create(index_.ShardSampleCounts(), config, epoch);
    EXPECT_TRUE(plan.ok()) << plan.status();
    std::vector<PlannedBatch> batches;
    auto it = (*plan)->Iterate(rank, 0);
    PlannedBatch batch;
    while (it->Next(&batch)) batches.push_back(batch);
    return batches;
  }

  static TransformSpec Spec(const v1::RegisterResponse& job) {
    TransformSpec spec;
    spec.mode = job.transform().mode() == v1::TRANSFORM_MODE_RANDOM ? TransformMode::kRandom
                                                                    : TransformMode::kCenter;
    spec.resize = job.transform().resize();
    spec.crop = job.transform().crop();
    return spec;
  }

  // Pixels of `planned` (zeros for padding). With `failures`, undecodable samples
  // are counted there instead of failing the test.
  std::string Images(const PlannedBatch& planned, const TransformSpec& spec,
                     int* failures = nullptr) const {
    const size_t sample = 3ull * spec.crop * spec.crop;
    std::string images(planned.samples.size() * sample, '\0');
    for (size_t i = 0; i < planned.samples.size(); ++i) {
      const SampleRef& ref = planned.samples[i];
      if (!ref.valid()) continue;
      const SampleEntry& entry = index_.shards[ref.shard].samples[ref.index];
      auto encoded = reader_->ReadMember(ref.shard, entry.members[entry.image_member]);
      EXPECT_TRUE(encoded.ok()) << encoded.status();
      absl::Status status = DecodeAndTransform(
          *encoded, spec, ref.augment_seed, reinterpret_cast<uint8_t*>(images.data() + i * sample));
      if (failures != nullptr) {
        *failures += status.ok() ? 0 : 1;
      } else {
        EXPECT_TRUE(status.ok()) << status;
      }
    }
    return images;
  }

  // Checks everything in a received batch against the plan's batch.
  void ExpectBatch(const v1::Batch& got, const PlannedBatch& planned,
                   const TransformSpec& spec) const {
    ASSERT_EQ(got.index(), planned.index);
    ASSERT_EQ(got.epoch(), planned.epoch);
    ASSERT_EQ(got.samples_size(), static_cast<int>(planned.samples.size()));
    ASSERT_EQ(got.labels_size(), static_cast<int>(planned.samples.size()));
    ASSERT_EQ(got.shape_size(), 4);
    EXPECT_EQ(got.shape(0), static_cast<int64_t>(planned.samples.size()));
    EXPECT_EQ(got.shape(1), 3);
    EXPECT_EQ(got.shape(2), spec.crop);
    EXPECT_EQ(got.shape(3), spec.crop);
    for (size_t i = 0; i < planned.samples.size(); ++i) {
      const SampleRef& ref = planned.samples[i];
      const v1::SampleInfo& info = got.samples(static_cast<int>(i));
      EXPECT_EQ(info.shard(), ref.shard);
      EXPECT_EQ(info.index_in_shard(), ref.index);
      EXPECT_EQ(info.valid(), ref.valid());
      EXPECT_FALSE(info.substituted());
      if (ref.valid()) {
        const SampleEntry& entry = index_.shards[ref.shard].samples[ref.index];
        EXPECT_EQ(info.key(), entry.key);
        EXPECT_EQ(got.labels(static_cast<int>(i)), entry.label);
      } else {
        EXPECT_EQ(got.labels(static_cast<int>(i)), -1);
      }
    }
    const std::string expected = Images(planned, spec);
    ASSERT_EQ(got.images().size(), expected.size());
    EXPECT_TRUE(got.images() == expected)
        << "pixels of epoch " << planned.epoch << " batch " << planned.index << " differ";
  }

 private:
  DatasetIndex index_;
  std::unique_ptr<ShardReader> reader_;
};

// An in-process server on 127.0.0.1:0 over `dir`, ready (indexed) on return.
class InProcessServer {
 public:
  explicit InProcessServer(const std::string& dir, server::ServerOptions options = {}) {
    options.shards_dir = dir;
    options.listen_address = "127.0.0.1:0";
    if (options.decode_threads == 0) options.decode_threads = 2;
    server_ = std::make_unique<server::Daemon>(options);
    absl::Status started = server_->Start();
    EXPECT_TRUE(started.ok()) << started;
    absl::Status ready = server_->WaitUntilReady();
    EXPECT_TRUE(ready.ok()) << ready;
    target_ = absl::StrCat("127.0.0.1:", server_->port());
    channel_ = MakeChannel(target_);
    stub_ = v1::Shardcast::NewStub(channel_);
  }
  server::Daemon& server() { return *server_; }
  v1::Shardcast::Stub* stub() { return stub_.get(); }
  const std::string& target() const { return target_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }

 private:
  std::unique_ptr<server::Daemon> server_;
  std::string target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Shardcast::Stub> stub_;
};

// shardcast-server as a child process (tests/support), started by the constructor; its
// stderr goes to `log_path`, its stdout to `log_path`.out. Killed (SIGKILL) if still
// running at scope exit.
class ChildServer {
 public:
  // `launcher`: a command the server is run under (testing_util::ServerChild).
  ChildServer(std::vector<std::string> args, const std::string& log_path,
              std::vector<std::string> launcher = {})
      : server_(std::move(launcher)) {
    // A server that does not come up shows as port() 0 and its first_line().
    (void)server_.Start(std::move(args), log_path + ".out", log_path);
  }
  ~ChildServer() { server_.Kill(SIGKILL); }
  int port() const { return server_.port(); }
  pid_t pid() const { return server_.pid(); }
  const std::string& first_line() const { return server_.first_line(); }
  std::string target() const { return server_.target(); }

  // Waits up to `timeout_seconds` for exit; returns the exit code, or -1 (killed by a
  // signal or still running).
  int WaitExit(double timeout_seconds) {
    const std::optional<int> status =
        server_.WaitFor(std::chrono::milliseconds(static_cast<int>(timeout_seconds * 1000)));
    return status.has_value() && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  }

 private:
  testing_util::ServerChild server_;
};

// A stream of `job_id` that read its first batch and reads no more, as a stalled rank
// does: its 64 KiB client window keeps the transport from taking the rest, so the
// server still holds the stream open when a drain begins.
class StalledStream {
 public:
  StalledStream(const std::string& target, const std::string& job_id)
      : stub_(v1::Shardcast::NewStub(MakeChannel(target, /*stream_window_bytes=*/64 * 1024))) {
    v1::StreamBatchesRequest request;
    request.set_job_id(job_id);
    reader_ = stub_->StreamBatches(&context_, request);
    v1::Batch batch;
    read_first_batch_ = reader_->Read(&batch);
  }

  bool read_first_batch() const { return read_first_batch_; }

  // Reads what the server still sends; the status the stream ended with.
  grpc::Status Finish() {
    v1::Batch batch;
    while (reader_->Read(&batch)) {
    }
    return reader_->Finish();
  }

 private:
  std::unique_ptr<v1::Shardcast::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::Batch>> reader_;
  bool read_first_batch_ = false;
};

using testing_util::ReadWholeFile;

}  // namespace shardcast::server_testing

#endif  // SHARDCAST_TESTS_SERVER_SERVER_TEST_SUPPORT_H_

// The torch-free protocol client against a real in-process server over loopback: a
// rank gets exactly n checked batches carrying the registered shape, the effective
// job config reads back from the registration, and a job whose config changed under
// the rank (another run re-registered the id on a restarted server) is refused on
// reconnect instead of resumed.
#include "client/protocol/rank_stream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
  auto restarted = std::make_unique<server::ShardcastServer>(same_port);
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

}  // namespace
}  // namespace shardcast::server_testing

// The status reply as its own module (serving/status_reply.h): built from the serving
// core's parts, without gRPC. The wire-level checks of the reply are governance_test's
// and metrics_test's; here, the module's own rules.
#include "server/serving/status_reply.h"

#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "server/serving/service_core.h"
#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

using server::DatasetRegistry;
using server::IndexStateName;

TEST(StatusReplyTest, IndexStateNames) {
  EXPECT_EQ(IndexStateName(DatasetRegistry::State::kIndexing, false), "indexing");
  EXPECT_EQ(IndexStateName(DatasetRegistry::State::kServing, false), "serving");
  EXPECT_EQ(IndexStateName(DatasetRegistry::State::kFailed, false), "failed");
  EXPECT_EQ(IndexStateName(DatasetRegistry::State::kServing, true), "draining");
}

TEST(StatusReplyTest, DescribesTheDatasetAndStopsServingOnDrain) {
  TempDir dir;
  MakeDataset(dir.path(), /*samples=*/60, /*per_shard=*/20);
  auto dataset = server::ServedDataset::Load(dir.path(), IndexOptions());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  server::ServiceCore service{server::ServerOptions{}};
  service.SetDataset(*std::move(dataset));

  v1::GetStatusResponse status = service.GetStatus();
  EXPECT_TRUE(status.serving());
  EXPECT_EQ(status.index_state(), "serving");
  ASSERT_EQ(status.datasets_size(), 1);
  EXPECT_EQ(status.datasets(0).name(), server::kDefaultDatasetName);
  EXPECT_EQ(status.datasets(0).num_samples(), 60);
  EXPECT_EQ(status.datasets(0).num_shards(), 3);
  EXPECT_EQ(status.num_samples(), 60);
  EXPECT_EQ(status.max_listed_jobs(), server::kMaxListedJobs);
  EXPECT_EQ(status.max_listed_ranks(), server::kMaxListedRanks);
  EXPECT_EQ(status.max_listed_shard_problems(), server::kMaxListedShardProblems);

  service.BeginDrain();
  status = service.GetStatus();
  EXPECT_FALSE(status.serving());
  EXPECT_EQ(status.index_state(), "draining");
}

}  // namespace
}  // namespace shardcast::server_testing

// The seek indexes of remote .tar.gz shards are held to --gzip-index-memory as a local
// dataset's are (issue 35: each remote shard kept its whole index, up to 64 of them,
// whatever the budget). Real .tar.gz shards (written by gzip) served by nginx, read by
// the RemoteReader over the real fetcher; every member equals the local read.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/remote/dataset_url.h"
#include "common/remote/http_fetcher.h"
#include "common/remote/http_store.h"
#include "common/remote/object_store.h"
#include "common/remote/remote_index.h"
#include "common/remote/remote_reader.h"
#include "common/shards/dataset_index.h"
#include "common/shards/gzip_index.h"
#include "common/shards/shard_reader.h"
#include "tests/support/object_servers.h"
#include "tests/support/synthetic_shards.h"
#include "tests/support/temp_dir.h"

namespace shardcast::remote {
namespace {

namespace fs = std::filesystem;
using testing_util::NginxServer;
using testing_util::TempDir;

constexpr int kShards = 4;

class RemoteGzipIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 40 samples of 320x320 JPEGs a shard: a few access points (256 KiB apart) each,
    // so an index holds some 32 KiB windows.
    ASSERT_TRUE(testing_util::MakeSyntheticShards(dir_.path(), 40 * kShards, 5, 320, 40).ok());
    fs::remove(dir_.path() + "/shardcast-index.bin");
    ASSERT_EQ(std::system(absl::StrCat("gzip -6 '", dir_.path(), "'/*.tar").c_str()), 0);
    absl::StatusOr<DatasetIndex> local = BuildDatasetIndex(dir_.path(), IndexOptions());
    ASSERT_TRUE(local.ok()) << local.status();
    local_ = *std::move(local);
    ASSERT_EQ(local_.shards.size(), static_cast<size_t>(kShards));
    for (const ShardInfo& shard : local_.shards) {
      ASSERT_TRUE(shard.compressed) << shard.path;
      const int fd = ::open((dir_.path() + "/" + shard.path).c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      absl::StatusOr<GzipIndex> index = GzipIndex::Build(fd);
      ::close(fd);
      ASSERT_TRUE(index.ok()) << index.status();
      largest_index_ = std::max(largest_index_, index->memory_bytes());
    }
    ASSERT_GT(largest_index_, size_t{64} << 10) << "shards too small to show a budget";
  }

  TempDir dir_;
  DatasetIndex local_;
  size_t largest_index_ = 0;
};

TEST_F(RemoteGzipIndexTest, RemoteSeekIndexesStayWithinTheBudgetAsLocalOnesDo) {
  auto nginx = NginxServer::Start(dir_.path());
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  absl::StatusOr<DatasetUrl> url =
      ParseDatasetUrl(absl::StrCat((*nginx)->url(), "/shard-{000000..000003}.tar.gz"));
  ASSERT_TRUE(url.ok()) << url.status();
  absl::StatusOr<std::unique_ptr<HttpFetcher>> fetcher = HttpFetcher::Create(FetchOptions());
  ASSERT_TRUE(fetcher.ok());
  absl::StatusOr<std::unique_ptr<ObjectStore>> store = OpenHttpStore(*url, fetcher->get());
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<DatasetIndex> index = BuildRemoteDatasetIndex(**store, IndexOptions());
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->shards.size(), local_.shards.size());

  // Room for one index and a half: never two.
  const size_t budget = largest_index_ + largest_index_ / 2;
  RemoteReadOptions options;
  options.read_ahead_threads = 1;
  options.max_gzip_index_bytes = budget;
  RemoteReader remote(*index, *std::move(store), /*cache=*/nullptr, options);
  ShardReader local(local_, budget);

  int64_t most_held = 0;
  // Every shard, then back again: each switch drops the other shard's index.
  for (const int s : {0, 1, 2, 3, 2, 1, 0, 3}) {
    const uint32_t shard = static_cast<uint32_t>(s);
    ASSERT_EQ(index->shards[shard].path, local_.shards[shard].path);
    for (const SampleEntry& sample : index->shards[shard].samples) {
      for (const MemberRef& member : sample.members) {
        absl::StatusOr<std::string> got = remote.ReadMember(shard, member);
        ASSERT_TRUE(got.ok()) << got.status();
        absl::StatusOr<std::string> want = local.ReadMember(shard, member);
        ASSERT_TRUE(want.ok()) << want.status();
        ASSERT_EQ(*got, *want) << sample.key << "." << member.ext;
        most_held = std::max(most_held, remote.counters().gzip_index_bytes.load());
      }
    }
  }
  EXPECT_GT(most_held, 0);
  EXPECT_LE(most_held, static_cast<int64_t>(budget))
      << "remote seek indexes are held to --gzip-index-memory";
}

}  // namespace
}  // namespace shardcast::remote

// A remote .tar.gz dataset under a --gzip-index-memory far below one seek index (issue
// 35): the server drops and rebuilds its shards' indexes as it does a local dataset's,
// and serves the same batches as the same server reading the same shards from a
// directory. Its --cache-dir, small enough to evict, holds files of the operator's:
// they survive the start, the evictions and the restart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/server/server_test_support.h"
#include "tests/support/object_servers.h"

namespace shardcast::server_testing {
namespace {

using testing_util::NginxServer;

// Both ranks' batches of epochs 0 and 1: keys, labels and image bytes.
std::vector<std::string> TwoEpochs(InProcessServer& server) {
  for (int rank = 0; rank < 2; ++rank) {
    v1::RegisterResponse response;
    const grpc::Status status = Register(server.stub(), MakeRegister("job", rank, 2, 8), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  std::vector<std::string> out;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int rank = 0; rank < 2; ++rank) {
      const StreamResult result = StreamAll(server.stub(), "job", rank, epoch, 0);
      EXPECT_TRUE(result.status.ok()) << result.status.error_message();
      for (const v1::Batch& batch : result.batches) {
        std::vector<std::string> keys;
        for (const v1::SampleInfo& sample : batch.samples()) keys.push_back(sample.key());
        out.push_back(absl::StrCat(epoch, " ", rank, " ", batch.index(), " ",
                                   absl::StrJoin(keys, ","), " ",
                                   absl::StrJoin(batch.labels(), ","), " ", batch.images()));
      }
    }
  }
  return out;
}

TEST(RemoteGzipServingTest, ASmallGzipIndexMemoryAndCacheServeTheLocalBatchesSparingForeignFiles) {
  TempDir dir;
  MakeDataset(dir.path(), 160, 40);
  std::filesystem::remove(dir.path() + "/shardcast-index.bin");  // it names the .tar files
  ASSERT_EQ(std::system(absl::StrCat("gzip -6 '", dir.path(), "'/*.tar").c_str()), 0);
  server::ServerOptions options;
  options.gzip_index_memory_bytes = 1;  // below any index: every shard switch rebuilds
  InProcessServer local(dir.path(), options);
  const std::vector<std::string> want = TwoEpochs(local);
  ASSERT_EQ(want.size(), 40u);

  auto nginx = NginxServer::Start(dir.path());
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  TempDir cache;
  const std::map<std::string, std::string> foreign = {
      {"weights.bin", std::string(1 << 20, 'w')},
      {"tmp-1-0", "a user's file named like a temporary"},
      {"0123456789abcdef0123456789abcdef.bin", "named like an entry"}};
  for (const auto& [name, text] : foreign) std::ofstream(cache.path() + "/" + name) << text;
  options.remote.cache_dir = cache.path();
  options.remote.cache_size_bytes = 64 << 10;  // below two shards: evictions
  InProcessServer remote(absl::StrCat((*nginx)->url(), "/shard-{000000..000003}.tar.gz"), options);
  EXPECT_EQ(TwoEpochs(remote), want);
  const v1::GetStatusResponse status = GetStatus(remote.stub());
  EXPECT_EQ(status.remote_failures(), 0);
  EXPECT_EQ(status.datasets(0).index_fingerprint(),
            GetStatus(local.stub()).datasets(0).index_fingerprint());
  EXPECT_GT(status.cache_evictions(), 0);
  {
    InProcessServer restarted(absl::StrCat((*nginx)->url(), "/shard-{000000..000003}.tar.gz"),
                              options);
    EXPECT_EQ(TwoEpochs(restarted), want);
  }
  for (const auto& [name, text] : foreign) {
    std::ifstream in(cache.path() + "/" + name, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), text) << name;
  }
}

}  // namespace
}  // namespace shardcast::server_testing

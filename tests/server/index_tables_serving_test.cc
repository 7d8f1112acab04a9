// The server with its samples released to the index cache (issue 46): with
// --index-cache-dir, a dataset keeps only per-shard counts in memory and reads each
// shard's table back through a cache bounded by --index-memory. In-process servers on
// loopback, real tars: an epoch served with a bound below one table is the reference's,
// pixels, keys and labels included, as it is from a cache read at the next start; a job
// with fields is selected from the tables; a cache file written over in place while
// the server runs fails the stream (a host error), never serves another key.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

class IndexTablesServingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeDataset(data_.path(), /*samples=*/300, /*per_shard=*/75);  // 4 shards
    reference_ = std::make_unique<Reference>(data_.path());
  }

  server::ServerOptions Options(int64_t index_memory_bytes) const {
    server::ServerOptions options;
    options.index_cache_dir = cache_.path();
    options.index_memory_bytes = index_memory_bytes;
    options.shard_read_retry = absl::Milliseconds(200);
    return options;
  }

  std::string CacheFile() const {
    return std::filesystem::directory_iterator(cache_.path())->path().string();
  }

  // Two ranks of a job stream epoch `epoch`; every batch is the reference's.
  void ServeEpochAndCompare(InProcessServer& server, const std::string& job, int64_t epoch) {
    std::vector<v1::RegisterResponse> responses(2);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(Register(server.stub(), MakeRegister(job, r, 2, 8), &responses[r]).ok());
    }
    std::vector<StreamResult> results(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] { results[r] = StreamAll(server.stub(), job, r, epoch, 0); });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE(absl::StrCat("rank ", r));
      ASSERT_TRUE(results[r].status.ok()) << results[r].status.error_message();
      const auto planned = reference_->Plan(responses[r], 2, r, epoch);
      ASSERT_EQ(results[r].batches.size(), planned.size());
      for (size_t b = 0; b < planned.size(); ++b) {
        reference_->ExpectBatch(results[r].batches[b], planned[b], Reference::Spec(responses[r]));
      }
    }
  }

  TempDir data_;
  TempDir cache_;
  std::unique_ptr<Reference> reference_;
};

TEST_F(IndexTablesServingTest, AnEpochUnderATinyBoundIsTheReferencesAndSoFromTheCache) {
  for (const bool from_cache : {false, true}) {
    SCOPED_TRACE(from_cache ? "started from the cache" : "indexed");
    InProcessServer server(data_.path(), Options(/*index_memory_bytes=*/1));
    const v1::GetStatusResponse before = GetStatus(server.stub());
    EXPECT_EQ(before.index_memory_limit_bytes(), 1);
    EXPECT_EQ(before.index_fingerprint(), reference_->index().fingerprint);
    EXPECT_EQ(before.num_samples(), 300);
    ServeEpochAndCompare(server, "job", /*epoch=*/1);
    const v1::GetStatusResponse after = GetStatus(server.stub());
    // Below one table, every shard change reads its table again: many loads, and at
    // most the last table held. A batch's lookups, sorted by shard, take each of its
    // shards' tables once: 2 ranks x 18 batches of at most 4 shards.
    EXPECT_GE(after.index_table_loads(), 4);
    EXPECT_GT(after.index_table_misses() + after.index_table_hits(), 0);
    EXPECT_LE(after.index_table_misses() + after.index_table_hits(), 2 * 18 * 4);
    EXPECT_EQ(after.index_table_load_failures(), 0);
    EXPECT_LT(after.index_memory_bytes(), 75 * 64);  // one table of 75 samples, at most
  }
}

TEST_F(IndexTablesServingTest, AJobWithFieldsIsSelectedFromTheTables) {
  InProcessServer server(data_.path(), Options(int64_t{64} << 20));
  v1::RegisterRequest request = MakeRegister("fields", 0, 1, 10);
  request.add_fields("cls");
  request.add_fields("txt?");  // no sample has one: optional, never present
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(server.stub(), request, &response).ok());
  EXPECT_EQ(response.num_samples(), 300);
  const StreamResult result = StreamAll(server.stub(), "fields", 0, 0, 0);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_EQ(result.batches.size(), 30u);
  ShardReader reader(reference_->index());
  for (const v1::Batch& batch : result.batches) {
    for (const v1::SampleInfo& info : batch.samples()) {
      const SampleEntry& entry =
          reference_->index().shards[info.shard()].samples[info.index_in_shard()];
      EXPECT_EQ(info.key(), entry.key);
      ASSERT_EQ(info.fields_size(), 2);
      ASSERT_TRUE(info.fields(0).present());
      const auto cls = std::find_if(entry.members.begin(), entry.members.end(),
                                    [](const MemberRef& m) { return m.ext == "cls"; });
      ASSERT_NE(cls, entry.members.end());
      absl::StatusOr<std::string> bytes = reader.ReadMember(info.shard(), *cls);
      ASSERT_TRUE(bytes.ok());
      EXPECT_EQ(info.fields(0).data(), *bytes);
      EXPECT_FALSE(info.fields(1).present());
    }
  }
  // A required field no sample has is refused with what the samples hold (the counts
  // kept in memory).
  v1::RegisterRequest missing = MakeRegister("missing", 0, 1, 10);
  missing.add_fields("txt");
  grpc::Status refused = Register(server.stub(), missing, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "jpg (300 samples)"))
      << refused.error_message();
}

TEST_F(IndexTablesServingTest, ACacheFileWrittenOverWhileServingFailsTheStreamNeverAnotherKey) {
  InProcessServer server(data_.path(), Options(/*index_memory_bytes=*/1));
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(server.stub(), MakeRegister("job", 0, 1, 8), &response).ok());
  // Written over in place (the descriptor the server holds sees it): its tables no
  // longer pass their checksums.
  const std::string file = CacheFile();
  std::string bytes = ReadWholeFile(file);
  for (size_t i = bytes.size() / 2; i < bytes.size(); ++i) bytes[i] = 'x';
  std::ofstream(file, std::ios::binary | std::ios::in | std::ios::out) << bytes;
  const StreamResult result = StreamAll(server.stub(), "job", 0, 0, 0);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << result.status.error_message();
  EXPECT_TRUE(absl::StrContains(result.status.error_message(), "shard table"))
      << result.status.error_message();
  // What came before the failure is the reference's.
  const auto planned = reference_->Plan(response, 1, 0, 0);
  ASSERT_LE(result.batches.size(), planned.size());
  for (size_t b = 0; b < result.batches.size(); ++b) {
    reference_->ExpectBatch(result.batches[b], planned[b], Reference::Spec(response));
  }
  EXPECT_GT(GetStatus(server.stub()).index_table_load_failures(), 0);
}

}  // namespace
}  // namespace shardcast::server_testing

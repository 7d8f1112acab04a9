// Indexing a dataset in object storage against stores that misbehave (issue 35):
// tools/hostile_s3.py for listings that never end or repeat a key, GETs that fail,
// trickles and ETags that are not MD5s; s3rver for a real store's ETags. What the
// index trusts from a store or from the index file next to the shards is checked, and
// a store's failure is never remembered as a skipped shard.
#include "common/remote/remote_index.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/remote/dataset_url.h"
#include "common/remote/http_fetcher.h"
#include "common/remote/object_store.h"
#include "common/remote/object_store_internal.h"
#include "common/remote/s3_store.h"
#include "common/shards/dataset_index.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/child_process.h"
#include "tests/support/hostile_store.h"
#include "tests/support/object_servers.h"
#include "tests/support/synthetic_shards.h"
#include "tests/support/temp_dir.h"

namespace shardcast::remote {
namespace {

using ::shardcast::testing_util::HostileStore;
using ::shardcast::testing_util::ReadWholeFile;
using ::shardcast::testing_util::S3rverServer;
using ::shardcast::testing_util::TempDir;
using ::testing::HasSubstr;

constexpr char kBucket[] = "bucket";
constexpr char kUrl[] = "s3://bucket/data/";

bool HasWarning(const DatasetIndex& index, absl::string_view needle) {
  return std::any_of(index.warnings.begin(), index.warnings.end(),
                     [&](const std::string& w) { return absl::StrContains(w, needle); });
}

// Labels by sample key: what a trainer would be told.
std::vector<std::pair<std::string, int64_t>> Labels(const DatasetIndex& index) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const ShardInfo& shard : index.shards) {
    for (const SampleEntry& e : shard.samples) out.emplace_back(e.key, e.label);
  }
  return out;
}

// Rewrites the first .cls member of `shard` (a path) in place, same size: its label
// digit becomes `digit`. The file's size and every offset stay.
void RewriteFirstLabel(const std::string& shard, char digit) {
  absl::StatusOr<DatasetIndex> index =
      BuildDatasetIndex(std::filesystem::path(shard).parent_path().string(), {});
  ASSERT_TRUE(index.ok()) << index.status();
  const std::string name = std::filesystem::path(shard).filename().string();
  for (const ShardInfo& info : index->shards) {
    if (info.path != name) continue;
    for (const MemberRef& m : info.samples[0].members) {
      if (m.ext != "cls") continue;
      std::string bytes = ReadWholeFile(shard);
      ASSERT_NE(bytes[m.offset], digit);
      bytes[m.offset] = digit;
      std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;
      return;
    }
  }
  FAIL() << "no .cls in " << shard;
}

// Three shards of real JPEGs under data/ of a directory that a store serves.
class RemoteIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = tmp_ / "objects/data";
    ASSERT_TRUE(testing_util::MakeSyntheticShards(data_, 60, 4, 96, 20).ok());
    std::filesystem::remove(data_ + "/" + kIndexFileName);  // each test puts its own
    FetchOptions options;
    options.request_deadline = absl::Seconds(3);
    options.first_backoff = absl::Milliseconds(10);
    options.max_backoff = absl::Milliseconds(100);
    absl::StatusOr<std::unique_ptr<HttpFetcher>> fetcher = HttpFetcher::Create(options);
    ASSERT_TRUE(fetcher.ok()) << fetcher.status();
    fetcher_ = *std::move(fetcher);
    cache_dir_ = tmp_ / "cache";
  }

  void StartHostile() {
    absl::StatusOr<std::unique_ptr<HostileStore>> store =
        HostileStore::Start(tmp_ / "objects", kBucket);
    ASSERT_TRUE(store.ok()) << store.status();
    hostile_ = *std::move(store);
  }

  std::unique_ptr<ObjectStore> Open(const std::string& endpoint,
                                    internal::ObjectStoreTuning tuning = {}) {
    absl::StatusOr<DatasetUrl> url = ParseDatasetUrl(kUrl);
    EXPECT_TRUE(url.ok()) << url.status();
    S3Settings s3;
    s3.endpoint = endpoint;
    s3.path_style = true;
    s3.region = "us-east-1";
    absl::StatusOr<std::unique_ptr<ObjectStore>> store =
        OpenS3Store(*url, s3, fetcher_.get(), tuning);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  absl::StatusOr<DatasetIndex> Index(const std::string& endpoint,
                                     internal::ObjectStoreTuning tuning = {}) {
    std::unique_ptr<ObjectStore> store = Open(endpoint, tuning);
    if (store == nullptr) return absl::InternalError("no store");
    IndexOptions options;
    options.cache_dir = cache_dir_;
    return BuildRemoteDatasetIndex(*store, options);
  }

  TempDir tmp_;
  std::string data_;
  std::string cache_dir_;
  std::unique_ptr<HttpFetcher> fetcher_;
  std::unique_ptr<HostileStore> hostile_;
};

// A store that answers every page "truncated" with the same token: the listing once
// never ended (memory grew); now the second page names the token and stops.
TEST_F(RemoteIndexTest, ListingThatRepeatsItsTokenEndsWithAnError) {
  StartHostile();
  hostile_->SetFaults(R"({"list_loop": true})");
  std::unique_ptr<ObjectStore> store = Open(hostile_->endpoint());
  auto listed = std::async(std::launch::async, [&] { return store->ListShards(); });
  if (listed.wait_for(std::chrono::seconds(15)) != std::future_status::ready) {
    ADD_FAILURE() << "the listing did not end in 15 s";
    hostile_->Stop();  // its requests fail now: the loop ends within a deadline
  }
  absl::StatusOr<std::vector<RemoteObject>> shards = listed.get();
  EXPECT_EQ(shards.status().code(), absl::StatusCode::kDataLoss) << shards.status();
  EXPECT_THAT(shards.status().message(), HasSubstr("the-same-token"));
  EXPECT_THAT(shards.status().message(), HasSubstr("does not end"));
}

// The same key on two pages: once indexed twice, its samples served twice an epoch.
TEST_F(RemoteIndexTest, KeyListedOnTwoPagesIsAnError) {
  StartHostile();
  hostile_->SetFaults(R"({"list_duplicate": true})");
  internal::ObjectStoreTuning pages_of_two;
  pages_of_two.list_page_size = 2;
  std::unique_ptr<ObjectStore> store = Open(hostile_->endpoint(), pages_of_two);
  absl::StatusOr<std::vector<RemoteObject>> shards = store->ListShards();
  EXPECT_EQ(shards.status().code(), absl::StatusCode::kDataLoss) << shards.status();
  EXPECT_THAT(shards.status().message(), HasSubstr("listed twice (pages 1 and 2)"));
  absl::StatusOr<DatasetIndex> index = Index(hostile_->endpoint(), pages_of_two);
  EXPECT_FALSE(index.ok()) << index->num_samples << " samples indexed";
}

// A store failing a shard's GET while indexing: indexing fails naming the object and
// the status (the server does not start with a shard silently missing), nothing is
// cached, and the next start against a healthy store indexes every shard. Once the
// skip was cached and the shard never asked for again.
TEST_F(RemoteIndexTest, StoreErrorWhileIndexingIsRetriedNotRemembered) {
  StartHostile();
  for (const int status : {503, 403}) {
    SCOPED_TRACE(status);
    hostile_->SetFaults(absl::StrCat(R"({"fail": {"shard-000001": )", status, "}}"));
    absl::StatusOr<DatasetIndex> failed = Index(hostile_->endpoint());
    ASSERT_FALSE(failed.ok()) << "indexed " << failed->shards.size() << " shards, skipped "
                              << failed->skipped_shards.size();
    EXPECT_THAT(failed.status().message(), HasSubstr("shard-000001.tar"));
    EXPECT_THAT(failed.status().message(), HasSubstr(absl::StrCat(status)));
  }
  hostile_->SetFaults("{}");
  absl::StatusOr<DatasetIndex> healthy = Index(hostile_->endpoint());
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  EXPECT_FALSE(healthy->loaded_from_cache);
  EXPECT_EQ(healthy->shards.size(), 3u);
  EXPECT_TRUE(healthy->skipped_shards.empty());
  EXPECT_EQ(healthy->num_samples, 60);
  absl::StatusOr<DatasetIndex> local = BuildDatasetIndex(data_, {});
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(healthy->fingerprint, local->fingerprint);
}

// A .cls rewritten in place with the same size, under an index file made before: the
// store's ETag (the new bytes' MD5) no longer vouches for the file's record, so that
// shard is scanned and serves the new label; the others come from the file. Once the
// file was trusted on names and sizes and the old label served.
TEST_F(RemoteIndexTest, ShardRewrittenUnderTheIndexFileIsScannedAgain) {
  absl::StatusOr<DatasetIndex> before = BuildDatasetIndex(data_, {});
  ASSERT_TRUE(before.ok()) << before.status();
  std::ofstream(data_ + "/" + kIndexFileName, std::ios::binary)
      << SerializeIndexFile(*before, {}).value();
  RewriteFirstLabel(data_ + "/shard-000001.tar", '3');
  absl::StatusOr<DatasetIndex> after = BuildDatasetIndex(data_, {});
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_NE(Labels(*after), Labels(*before));

  // The hostile store's ETags are MD5s, as S3's for single-part uploads.
  StartHostile();
  absl::StatusOr<DatasetIndex> hostile = Index(hostile_->endpoint());
  ASSERT_TRUE(hostile.ok()) << hostile.status();
  EXPECT_TRUE(hostile->loaded_from_index_file);
  EXPECT_TRUE(HasWarning(*hostile, "shard-000001.tar")) << "no warning names the shard";
  EXPECT_EQ(Labels(*hostile), Labels(*after));
  EXPECT_EQ(hostile->fingerprint, after->fingerprint);

  // And s3rver, a store of its own: the same.
  absl::StatusOr<std::unique_ptr<S3rverServer>> s3 = S3rverServer::Start();
  ASSERT_TRUE(s3.ok()) << s3.status();
  ASSERT_TRUE((*s3)->CreateBucket(kBucket).ok());
  ASSERT_TRUE((*s3)->PutDirectory(kBucket, "data/", data_).ok());
  std::filesystem::remove_all(cache_dir_);
  absl::StatusOr<DatasetIndex> real = Index((*s3)->endpoint());
  ASSERT_TRUE(real.ok()) << real.status();
  EXPECT_TRUE(real->loaded_from_index_file);
  EXPECT_EQ(Labels(*real), Labels(*after));
  EXPECT_EQ(real->fingerprint, after->fingerprint);
}

// A store whose ETags are not MD5s (nginx's, a multipart upload's): an index file made
// from the shards' bytes is vouched for by none (every shard is scanned); one made
// from the store (shardcast-ctl index URL) records the ETags it saw, and is used with
// no shard read, until a shard's ETag changes.
TEST_F(RemoteIndexTest, EtagsRecordedByAnIndexOfTheStoreVouchForIt) {
  StartHostile();
  hostile_->SetFaults(R"({"etag": "other"})");
  absl::StatusOr<DatasetIndex> local = BuildDatasetIndex(data_, {});
  ASSERT_TRUE(local.ok());
  std::ofstream(data_ + "/" + kIndexFileName, std::ios::binary)
      << SerializeIndexFile(*local, {}).value();
  absl::StatusOr<DatasetIndex> scanned = Index(hostile_->endpoint());
  ASSERT_TRUE(scanned.ok()) << scanned.status();
  EXPECT_FALSE(scanned->loaded_from_index_file);
  EXPECT_EQ(scanned->fingerprint, local->fingerprint);

  std::ofstream(data_ + "/" + kIndexFileName, std::ios::binary | std::ios::trunc)
      << SerializeIndexFile(*scanned, {}).value();
  std::filesystem::remove_all(cache_dir_);
  const int64_t bytes_before = fetcher_->counters().bytes.load();
  absl::StatusOr<DatasetIndex> from_file = Index(hostile_->endpoint());
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_TRUE(from_file->loaded_from_index_file);
  EXPECT_EQ(from_file->fingerprint, local->fingerprint);
  const uint64_t one_shard = local->shards[0].file_size;
  EXPECT_LT(fetcher_->counters().bytes.load() - bytes_before, static_cast<int64_t>(one_shard))
      << "shards were downloaded although the file's ETags vouched for them";
}

// An index file far larger than an index of the listed shards can be is refused as it
// arrives (once: read whole, up to 1 GiB, and parsed: a 128 MiB one made the server
// allocate 1.3 GB), with a warning, and the shards are scanned.
TEST_F(RemoteIndexTest, HugeIndexFileIsRefusedAsItArrives) {
  {
    std::ofstream out(data_ + "/" + kIndexFileName, std::ios::binary);
    const std::string mib(size_t{1} << 20, 'x');
    for (int i = 0; i < 64; ++i) out << mib;
  }
  StartHostile();
  const int64_t bytes_before = fetcher_->counters().bytes.load();
  absl::StatusOr<DatasetIndex> index = Index(hostile_->endpoint());
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_FALSE(index->loaded_from_index_file);
  EXPECT_TRUE(HasWarning(*index, "bytes allowed")) << index->warnings.size() << " warnings";
  EXPECT_LT(fetcher_->counters().bytes.load() - bytes_before, int64_t{16} << 20);
  EXPECT_EQ(index->num_samples, 60);
}

// A shard that downloads slower than one --remote-timeout is downloaded in pieces,
// each a request with its own deadline: it is indexed (once the server exited).
TEST_F(RemoteIndexTest, ShardSlowerThanOneDeadlineIsIndexed) {
  absl::StatusOr<DatasetIndex> local = BuildDatasetIndex(data_, {});
  ASSERT_TRUE(local.ok());
  const uint64_t size = local->shards[0].file_size;
  StartHostile();
  // Whole, the shard takes twice the 3 s deadline, at a steady rate: the deadline is on
  // progress, not on the whole download.
  const uint64_t rate = size / 6;
  hostile_->SetFaults(absl::StrCat(R"({"trickle": {"shard-000000": )", rate, "}}"));
  absl::StatusOr<DatasetIndex> index = Index(hostile_->endpoint(), {});
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->fingerprint, local->fingerprint);
}

}  // namespace
}  // namespace shardcast::remote

// The file:// store against real files in a temporary directory: its listing (shards
// only, sub-directories left out, sizes and ETags from stat), ranged and whole reads
// through its fetcher, the index file, a file rewritten under it, and a dataset indexed
// through it equal to the same directory indexed as a local dataset.
#include "common/remote/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/remote/dataset_url.h"
#include "common/remote/http_fetcher.h"
#include "common/remote/object_store.h"
#include "common/remote/store_table.h"
#include "common/shards/dataset_index.h"
#include "common/shards/shard_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/synthetic_shards.h"
#include "tests/support/temp_dir.h"

namespace shardcast::remote {
namespace {

using ::shardcast::testing_util::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::unique_ptr<ObjectStore> Open(const std::string& dir) {
  absl::StatusOr<DatasetUrl> url = ParseDatasetUrl("file://" + dir);
  EXPECT_TRUE(url.ok()) << url.status();
  if (!url.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<ObjectStore>> store = OpenFileStore(*url);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

std::vector<std::string> Names(const std::vector<RemoteObject>& objects) {
  std::vector<std::string> names;
  for (const RemoteObject& object : objects) names.push_back(object.name);
  std::sort(names.begin(), names.end());
  return names;
}

TEST(FileStoreTest, ListsTheShardsDirectlyInTheDirectoryWithSizeAndETag) {
  TempDir dir;
  Write(dir / "b.tar", "0123456789");
  Write(dir / "a.tar.gz", "abc");
  Write(dir / "c.tgz", "");
  Write(dir / "readme.txt", "not a shard");
  std::filesystem::create_directory(dir / "sub.tar");  // a directory named like a shard
  Write(dir / "sub.tar/x.tar", "inside");
  std::unique_ptr<ObjectStore> store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->root(), "file://" + dir.path() + "/");
  absl::StatusOr<std::vector<RemoteObject>> shards = store->ListShards();
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_THAT(Names(*shards), ElementsAre("a.tar.gz", "b.tar", "c.tgz"));
  for (const RemoteObject& shard : *shards) {
    struct stat st;
    ASSERT_EQ(::stat((dir / shard.name).c_str(), &st), 0);
    EXPECT_EQ(shard.size, static_cast<uint64_t>(st.st_size)) << shard.name;
    EXPECT_EQ(shard.etag, FileETag(st)) << shard.name;
    EXPECT_EQ(shard.url, store->root() + shard.name);
  }
}

TEST(FileStoreTest, AnEmptyOrMissingDirectoryIsNotFoundNamingIt) {
  TempDir dir;
  Write(dir / "notes.txt", "x");
  std::unique_ptr<ObjectStore> store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->ListShards().status().code(), absl::StatusCode::kNotFound);
  store = Open(dir.path() + "/nothing-here");
  ASSERT_NE(store, nullptr);
  absl::Status missing = store->ListShards().status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("nothing-here"));
}

TEST(FileStoreTest, RangesAndWholeObjectsAreTheFilesBytes) {
  TempDir dir;
  std::string bytes;
  for (int i = 0; i < (3 << 20) + 17; ++i) bytes.push_back(static_cast<char>(i * 7));
  Write(dir / "s.tar", bytes);
  std::unique_ptr<ObjectStore> store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<RemoteObject>> shards = store->ListShards();
  ASSERT_TRUE(shards.ok()) << shards.status();
  const RemoteObject object = store->Object("s.tar", (*shards)[0].size, (*shards)[0].etag);
  absl::StatusOr<std::string> range = store->fetcher().Get(store->Request(object, 1000, 5000));
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(*range, bytes.substr(1000, 5000));
  EXPECT_TRUE(store->fetcher().Get(store->Request(object, 5, 0))->empty());
  // Whole, in more than one chunk, as DownloadObject and the disk cache read it.
  RangeRequest whole = store->Request(object, 0, 0);
  whole.to_end = true;
  std::string streamed;
  int chunks = 0;
  ASSERT_TRUE(store->fetcher()
                  .GetStreaming(whole,
                                [&](absl::string_view chunk) {
                                  ++chunks;
                                  streamed.append(chunk.data(), chunk.size());
                                  return absl::OkStatus();
                                })
                  .ok());
  EXPECT_EQ(streamed, bytes);
  EXPECT_GT(chunks, 1);
  // Past the end: the store's error (as a 416), never short bytes.
  absl::Status past = store->fetcher().Get(store->Request(object, bytes.size() - 2, 10)).status();
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(IsHostIoError(past));
  EXPECT_GT(store->fetcher().counters().bytes.load(), 0);
}

TEST(FileStoreTest, AFileRewrittenAfterIndexingFailsItsReadsAsChanged) {
  TempDir dir;
  Write(dir / "s.tar", "first version");
  std::unique_ptr<ObjectStore> store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<RemoteObject>> shards = store->ListShards();
  ASSERT_TRUE(shards.ok()) << shards.status();
  const RemoteObject pinned = (*shards)[0];
  ASSERT_TRUE(store->fetcher().Get(store->Request(pinned, 0, 5)).ok());

  // Same size, another mtime: only the ETag tells.
  Write(dir / "s.tar", "other version");
  struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir / "s.tar").c_str(), times, 0), 0);
  absl::Status changed = store->fetcher().Get(store->Request(pinned, 0, 5)).status();
  EXPECT_TRUE(IsShardChanged(changed)) << changed;
  EXPECT_THAT(changed.message(), HasSubstr("ETag"));

  Write(dir / "s.tar", "a longer version than before");
  changed = store->fetcher().Get(store->Request(pinned, 0, 5)).status();
  EXPECT_TRUE(IsShardChanged(changed)) << changed;
  EXPECT_THAT(changed.message(), HasSubstr("size"));

  std::filesystem::remove(dir / "s.tar");
  absl::Status gone = store->fetcher().Get(store->Request(pinned, 0, 5)).status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(IsHostIoError(gone)) << "a shard gone under a job is the store's fault";
}

TEST(FileStoreTest, GetFileIsTheFileOrNothingAndBounded) {
  TempDir dir;
  Write(dir / "shardcast-index.bin", "index bytes");
  std::unique_ptr<ObjectStore> store = Open(dir.path());
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::optional<std::string>> file = store->GetFile("shardcast-index.bin", 100);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->value_or(""), "index bytes");
  file = store->GetFile("absent.bin", 100);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_FALSE(file->has_value());
  EXPECT_EQ(store->GetFile("shardcast-index.bin", 4).status().code(),
            absl::StatusCode::kResourceExhausted);
}

// Through the table, as the server and shardcast-ctl index open it: the same shards,
// samples and content fingerprint as the directory indexed as a local dataset.
TEST(FileStoreTest, ADatasetOpenedByItsFileUrlIndexesAsTheLocalDirectory) {
  TempDir dir;
  ASSERT_TRUE(testing_util::MakeSyntheticShards(dir.path(), 60, 3, 16, 25).ok());
  std::filesystem::remove(dir / "shardcast-index.bin");
  absl::StatusOr<DatasetIndex> local = BuildDatasetIndex(dir.path(), IndexOptions());
  ASSERT_TRUE(local.ok()) << local.status();

  absl::StatusOr<DatasetUrl> url = ParseDatasetUrl("file://" + dir.path());
  ASSERT_TRUE(url.ok()) << url.status();
  absl::StatusOr<std::unique_ptr<HttpFetcher>> fetcher = HttpFetcher::Create(FetchOptions());
  ASSERT_TRUE(fetcher.ok()) << fetcher.status();
  absl::StatusOr<RemoteDataset> remote =
      OpenRemoteDataset(*url, StoreFlags(), fetcher->get(), IndexOptions());
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ(remote->index.fingerprint, local->fingerprint);
  EXPECT_EQ(remote->index.num_samples, local->num_samples);
  ASSERT_EQ(remote->index.shards.size(), local->shards.size());
  for (size_t i = 0; i < local->shards.size(); ++i) {
    EXPECT_EQ(remote->index.shards[i].path, local->shards[i].path);
    EXPECT_EQ(remote->index.shards[i].samples.size(), local->shards[i].samples.size());
  }
  EXPECT_EQ((*fetcher)->counters().requests.load(), 0) << "file:// reads without libcurl";
}

}  // namespace
}  // namespace shardcast::remote

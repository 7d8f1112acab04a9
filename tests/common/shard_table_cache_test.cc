// ShardTableCache over a real index cache file (tars written by GNU tar, indexed by
// BuildDatasetIndex): every shard's table reads back as the index's samples; the bound
// on memory evicts the least recently used; a cache file changed, truncated or replaced
// under the reader is a host error, never a crash or another shard's samples.
#include "common/shards/shard_table_cache.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/shards/dataset_index.h"
#include "common/shards/index_cache_format.h"
#include "common/shards/shard_reader.h"
#include "gtest/gtest.h"
#include "tests/common/shard_test_util.h"

namespace shardcast {
namespace {

using shard_testing::FileSpec;
using shard_testing::MakeTar;
using shard_testing::Payload;
using shard_testing::ReadWholeFile;
using shard_testing::ScopedTempDir;
using shard_testing::TarWriter;

class ShardTableCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(tmp_ / "data");
    // Four shards of 40 samples (jpg + cls + txt), keys sharing long prefixes.
    for (int s = 0; s < 4; ++s) {
      std::vector<FileSpec> files;
      for (int i = 0; i < 40; ++i) {
        const std::string key = absl::StrCat("laion/part-", s, "/sample-", 1000 + i);
        files.push_back({key + ".jpg", Payload(key, 100 + i * 7)});
        files.push_back({key + ".cls", absl::StrCat(i % 5, "\n")});
        files.push_back({key + ".txt", absl::StrCat("caption ", s, " ", i)});
      }
      MakeTar(tmp_.path(), files, TarWriter::kGnuTarPax,
              absl::StrCat(tmp_ / "data", "/s-", s, ".tar"));
    }
    options_.cache_dir = tmp_ / "cache";
    absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(tmp_ / "data", options_);
    ASSERT_TRUE(index.ok()) << index.status();
    index_ = *std::move(index);
    cache_file_ = std::filesystem::directory_iterator(options_.cache_dir)->path().string();
    tables_ = TablesOf(ReadWholeFile(cache_file_));
    ASSERT_NE(tables_, nullptr);
  }

  // The tables of the index cache `bytes` (as of the index's listing), at cache_file_.
  std::shared_ptr<IndexTables> TablesOf(const std::string& bytes) {
    absl::StatusOr<std::optional<ScanOutcome>> scan =
        ParseScanOutcome(bytes, index_.root, options_, index_.shards, IndexRecordKind::kCache);
    if (!scan.ok() || !scan->has_value()) {
      ADD_FAILURE() << scan.status();
      return nullptr;
    }
    auto tables = std::make_shared<IndexTables>();
    if (absl::Status opened = tables->Open(cache_file_, bytes.size()); !opened.ok()) {
      ADD_FAILURE() << opened;
      return nullptr;
    }
    tables->shards = (*scan)->tables;
    tables->exts = (*scan)->exts;
    return tables;
  }

  void ExpectShardServed(ShardTableCache& cache, uint32_t s) {
    absl::StatusOr<std::shared_ptr<const LoadedShardTable>> table = cache.Get(s);
    ASSERT_TRUE(table.ok()) << table.status();
    const std::vector<SampleEntry>& want = index_.shards[s].samples;
    ASSERT_EQ((*table)->table().size(), want.size());
    for (uint32_t j = 0; j < want.size(); ++j) {
      absl::StatusOr<SampleEntry> got = (*table)->table().Lookup(j);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->key, want[j].key);
      EXPECT_EQ(got->label, want[j].label);
      EXPECT_EQ(got->image_member, want[j].image_member);
      ASSERT_EQ(got->members.size(), want[j].members.size());
      for (size_t m = 0; m < want[j].members.size(); ++m) {
        EXPECT_EQ(got->members[m].ext, want[j].members[m].ext);
        EXPECT_EQ(got->members[m].offset, want[j].members[m].offset);
        EXPECT_EQ(got->members[m].size, want[j].members[m].size);
      }
    }
  }

  void ExpectHostError(ShardTableCache& cache, uint32_t s, const std::string& why) {
    absl::StatusOr<std::shared_ptr<const LoadedShardTable>> table = cache.Get(s);
    ASSERT_FALSE(table.ok()) << why;
    EXPECT_TRUE(IsHostIoError(table.status())) << table.status();
    EXPECT_TRUE(absl::StrContains(table.status().message(), cache_file_)) << table.status();
  }

  ScopedTempDir tmp_;
  IndexOptions options_;
  DatasetIndex index_;
  std::string cache_file_;
  std::shared_ptr<IndexTables> tables_;
};

TEST_F(ShardTableCacheTest, EveryShardReadsBackAsTheIndexAndIsHeldOnce) {
  ASSERT_EQ(tables_->shards.size(), 4u);
  ShardTableCache cache(tables_, int64_t{64} << 20);
  for (uint32_t s = 0; s < 4; ++s) ExpectShardServed(cache, s);
  for (uint32_t s = 0; s < 4; ++s) ExpectShardServed(cache, s);
  const ShardTableCacheStats stats = cache.stats();
  EXPECT_EQ(stats.misses, 4);
  EXPECT_EQ(stats.loads, 4);
  EXPECT_EQ(stats.hits, 4);
  EXPECT_EQ(stats.load_failures, 0);
  EXPECT_GT(stats.memory_bytes, 0);
  EXPECT_EQ(stats.limit_bytes, int64_t{64} << 20);
  // 40 samples of three members: a compact table is far below SampleEntry's ~230 bytes
  // a sample.
  EXPECT_LT(stats.memory_bytes, 4 * 40 * 40);
  EXPECT_EQ(cache.Get(4).status().code(), absl::StatusCode::kOutOfRange);
}

TEST_F(ShardTableCacheTest, TheBoundEvictsTheLeastRecentlyUsed) {
  ShardTableCache probe(tables_, int64_t{64} << 20);
  ASSERT_TRUE(probe.Get(0).ok());
  const int64_t one = probe.stats().memory_bytes;
  // Room for two tables, not three.
  ShardTableCache cache(tables_, 2 * one + one / 2);
  ExpectShardServed(cache, 0);
  ExpectShardServed(cache, 1);
  ExpectShardServed(cache, 0);  // 0 is now the most recent: 1 goes first
  ExpectShardServed(cache, 2);
  EXPECT_LE(cache.stats().memory_bytes, cache.stats().limit_bytes);
  ExpectShardServed(cache, 0);  // still held
  EXPECT_EQ(cache.stats().hits, 2);
  ExpectShardServed(cache, 1);  // read again
  EXPECT_EQ(cache.stats().misses, 4);
  EXPECT_EQ(cache.stats().loads, 4);
  // Prefetch reads without counting a miss; a prefetched table is a hit after.
  ASSERT_TRUE(cache.Prefetch(3).ok());
  EXPECT_EQ(cache.stats().loads, 5);
  EXPECT_EQ(cache.stats().misses, 4);
  ExpectShardServed(cache, 3);
  EXPECT_EQ(cache.stats().hits, 3);

  // A bound below one table still serves every shard, holding at most the last read.
  ShardTableCache tiny(tables_, 1);
  for (uint32_t s = 0; s < 4; ++s) ExpectShardServed(tiny, s);
  EXPECT_LE(tiny.stats().memory_bytes, one + one / 2);
  EXPECT_EQ(tiny.stats().loads, 4);
}

TEST_F(ShardTableCacheTest, AChangedByteInATableIsAHostErrorNotAnotherSample) {
  const std::string good = ReadWholeFile(cache_file_);
  for (uint32_t s = 0; s < 4; ++s) {
    const ShardTableLocation& at = tables_->shards[s];
    for (const uint64_t offset : {at.offset, at.offset + at.size / 2, at.offset + at.size - 1}) {
      std::string bad = good;
      bad[offset] = static_cast<char>(bad[offset] ^ 0x20);
      shard_testing::WriteFile(cache_file_, bad);
      // Opened anew each time: the failure sets the file it read aside.
      std::shared_ptr<IndexTables> tables = TablesOf(good);
      ASSERT_NE(tables, nullptr);
      ShardTableCache cache(tables, int64_t{64} << 20);
      ExpectHostError(cache, s, absl::StrCat("shard ", s, " byte ", offset));
      EXPECT_EQ(cache.stats().load_failures, 1);
      EXPECT_EQ(cache.stats().memory_bytes, 0);
      // The other shards' tables are untouched and still served.
      ExpectShardServed(cache, (s + 1) % 4);
    }
  }
}

TEST_F(ShardTableCacheTest, ACacheFileTruncatedInPlaceIsAHostError) {
  const std::string good = ReadWholeFile(cache_file_);
  // Truncated under the reader (the same file, written over in place): the tables past
  // the cut cannot be read.
  ShardTableCache cache(tables_, int64_t{64} << 20);
  shard_testing::WriteFile(cache_file_, good.substr(0, tables_->shards[2].offset + 3));
  ExpectShardServed(cache, 0);
  ExpectHostError(cache, 2, "truncated in the table");
  ExpectHostError(cache, 3, "truncated before the table");
  // Grown back with other bytes: the checksums catch them. (The failures above set the
  // file aside: it is written over where it now lies.)
  std::string other = good;
  for (size_t i = tables_->shards[1].offset; i < other.size(); ++i) other[i] = 'x';
  shard_testing::WriteFile(cache_file_ + ".corrupt", other);
  ExpectHostError(cache, 1, "written over");
  EXPECT_EQ(cache.stats().load_failures, 3);
}

// A table that changed under the server sets its cache file aside, so the next start
// indexes the shards again and writes a sound cache, which serves; the bytes set aside
// are kept for a look. A cache another server already rebuilt (renamed over the path)
// is left alone.
TEST_F(ShardTableCacheTest, AChangedTableSetsTheCacheAsideAndTheNextStartRebuildsIt) {
  const std::string good = ReadWholeFile(cache_file_);
  std::string bad = good;
  bad[tables_->shards[1].offset + 1] ^= 0x20;
  shard_testing::WriteFile(cache_file_, bad);
  {
    ShardTableCache cache(tables_, int64_t{64} << 20);
    ExpectHostError(cache, 1, "changed byte");
    absl::StatusOr<std::shared_ptr<const LoadedShardTable>> again = cache.Get(1);
    ASSERT_FALSE(again.ok());
    EXPECT_TRUE(IsHostIoError(again.status())) << again.status();
  }
  EXPECT_FALSE(std::filesystem::exists(cache_file_));
  EXPECT_EQ(ReadWholeFile(cache_file_ + ".corrupt"), bad);

  absl::StatusOr<DatasetIndex> rebuilt = BuildDatasetIndex(tmp_ / "data", options_);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_FALSE(rebuilt->loaded_from_cache);
  ASSERT_TRUE(std::filesystem::exists(cache_file_));
  const std::string sound = ReadWholeFile(cache_file_);
  tables_ = TablesOf(sound);
  ASSERT_NE(tables_, nullptr);
  {
    ShardTableCache cache(tables_, int64_t{64} << 20);
    for (uint32_t s = 0; s < 4; ++s) ExpectShardServed(cache, s);
  }

  // The file this server reads goes bad after another server rebuilt the cache (renamed
  // a sound one over the path): the rebuilt cache stays where it is.
  std::filesystem::remove(cache_file_ + ".corrupt");
  std::string changed = sound;
  changed[tables_->shards[2].offset + 1] ^= 0x20;
  shard_testing::WriteFile(cache_file_, changed);  // in place: what tables_ reads
  shard_testing::WriteFile(tmp_ / "sound", sound);
  std::filesystem::rename(tmp_ / "sound", cache_file_);
  ShardTableCache stale(tables_, int64_t{64} << 20);
  ExpectHostError(stale, 2, "changed byte after a rebuild");
  EXPECT_EQ(ReadWholeFile(cache_file_), sound);
  EXPECT_FALSE(std::filesystem::exists(cache_file_ + ".corrupt"));
}

// A cache file removed, or replaced by rename (as a server rebuilding it writes it)
// while the tables are read, leaves the bytes the index was read from readable: the
// tables are read from the descriptor opened with the index.
TEST_F(ShardTableCacheTest, ACacheFileRemovedOrReplacedByRenameStillServesTheIndexRead) {
  ShardTableCache cache(tables_, 1);
  std::filesystem::remove(cache_file_);
  ExpectShardServed(cache, 1);
  std::filesystem::remove(tmp_ / "data/s-0.tar");
  MakeTar(tmp_.path(), {{"other.jpg", Payload("other", 300)}, {"other.cls", "1\n"}},
          TarWriter::kGnuTarPax, tmp_ / "data/s-0.tar");
  ASSERT_TRUE(BuildDatasetIndex(tmp_ / "data", options_).ok());
  ASSERT_TRUE(std::filesystem::exists(cache_file_));
  for (uint32_t s = 0; s < 4; ++s) ExpectShardServed(cache, s);
}

// The index itself: with a cache, it says where its tables lie; released, it keeps the
// counts and reads each shard's samples back from the file as they were.
TEST_F(ShardTableCacheTest, AReleasedIndexReadsItsSamplesBackFromTheCache) {
  for (const bool from_cache : {false, true}) {
    SCOPED_TRACE(from_cache ? "from the cache" : "indexed");
    if (!from_cache) std::filesystem::remove(cache_file_);
    absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(tmp_ / "data", options_);
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ(index->loaded_from_cache, from_cache);
    ASSERT_NE(index->tables, nullptr);
    const std::vector<uint32_t> counts = index->ShardSampleCounts();
    const auto extensions = index->MemberExtensionCounts();
    const uint64_t largest = index->LargestImageBytes();
    ASSERT_TRUE(ReleaseSamples(&*index));
    EXPECT_TRUE(index->samples_released);
    for (const ShardInfo& shard : index->shards) EXPECT_TRUE(shard.samples.empty());
    EXPECT_EQ(index->ShardSampleCounts(), counts);
    EXPECT_EQ(index->MemberExtensionCounts(), extensions);
    EXPECT_EQ(index->LargestImageBytes(), largest);
    for (uint32_t s = 0; s < 4; ++s) {
      std::vector<std::string> keys;
      ASSERT_TRUE(ForEachSample(*index, s, [&](uint32_t, const SampleEntry& e) {
                    keys.push_back(e.key);
                  }).ok());
      ASSERT_EQ(keys.size(), index_.shards[s].samples.size());
      for (size_t j = 0; j < keys.size(); ++j) EXPECT_EQ(keys[j], index_.shards[s].samples[j].key);
    }
  }
  // A server's start (samples_on_disk) reads the cache's header alone: the index comes
  // released, with the counts, figures and fingerprint of the samples it did not read.
  IndexOptions on_disk = options_;
  on_disk.samples_on_disk = true;
  absl::StatusOr<DatasetIndex> header_only = BuildDatasetIndex(tmp_ / "data", on_disk);
  ASSERT_TRUE(header_only.ok()) << header_only.status();
  EXPECT_TRUE(header_only->loaded_from_cache);
  EXPECT_TRUE(header_only->samples_released);
  EXPECT_EQ(header_only->fingerprint, index_.fingerprint);
  EXPECT_EQ(header_only->num_samples, index_.num_samples);
  EXPECT_EQ(header_only->has_images, index_.has_images);
  EXPECT_EQ(header_only->has_labels, index_.has_labels);
  EXPECT_EQ(header_only->num_classes, index_.num_classes);
  EXPECT_EQ(header_only->class_names, index_.class_names);
  EXPECT_EQ(header_only->ShardSampleCounts(), index_.ShardSampleCounts());
  EXPECT_EQ(header_only->MemberExtensionCounts(), index_.MemberExtensionCounts());
  EXPECT_EQ(header_only->LargestImageBytes(), index_.LargestImageBytes());
  for (const ShardInfo& shard : header_only->shards) EXPECT_TRUE(shard.samples.empty());
  ShardTableCache cache(header_only->tables, int64_t{1} << 20);
  for (uint32_t s = 0; s < 4; ++s) ExpectShardServed(cache, s);

  // Without a cache there is nothing to read back: the samples stay.
  IndexOptions no_cache;
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(tmp_ / "data", no_cache);
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(index->tables, nullptr);
  EXPECT_FALSE(ReleaseSamples(&*index));
  EXPECT_EQ(index->shards[0].samples.size(), 40u);
}

}  // namespace
}  // namespace shardcast

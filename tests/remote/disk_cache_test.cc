// The disk cache of remote bytes: hits return what was put, the size bound holds with
// the least recently used going first, a restarted cache is warm, and a file that is
// not what was put (another size) is a miss, never wrong bytes.
#include "common/remote/disk_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace shardcast::remote {
namespace {

using testing_util::TempDir;

std::string Bytes(char c, size_t n) { return std::string(n, c); }

TEST(DiskCacheTest, AHitReturnsTheBytesPutAndAMissIsCounted) {
  TempDir dir;
  auto cache = DiskCache::Open(dir.path() + "/c", 1 << 20);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_FALSE((*cache)->Get("a", 10).has_value());
  (*cache)->Put("a", Bytes('a', 10));
  EXPECT_EQ((*cache)->Get("a", 10), Bytes('a', 10));
  EXPECT_FALSE((*cache)->Get("a", 11).has_value()) << "another size is another entry";
  EXPECT_EQ((*cache)->counters().hits.load(), 1);
  EXPECT_EQ((*cache)->counters().misses.load(), 2);
}

TEST(DiskCacheTest, TheLeastRecentlyUsedGoFirstAndTheBoundHolds) {
  TempDir dir;
  auto cache = DiskCache::Open(dir.path(), 300);
  ASSERT_TRUE(cache.ok()) << cache.status();
  (*cache)->Put("a", Bytes('a', 100));
  (*cache)->Put("b", Bytes('b', 100));
  (*cache)->Put("c", Bytes('c', 100));
  ASSERT_TRUE((*cache)->Get("a", 100).has_value());  // a is now the most recent
  (*cache)->Put("d", Bytes('d', 100));               // b goes
  EXPECT_TRUE((*cache)->Contains("a", 100));
  EXPECT_FALSE((*cache)->Contains("b", 100));
  EXPECT_TRUE((*cache)->Contains("c", 100));
  EXPECT_TRUE((*cache)->Contains("d", 100));
  EXPECT_LE((*cache)->counters().bytes.load(), 300);
  EXPECT_EQ((*cache)->counters().evictions.load(), 1);
  (*cache)->Put("huge", Bytes('h', 301));  // larger than the cache: not kept
  EXPECT_FALSE((*cache)->Contains("huge", 301));
  EXPECT_TRUE((*cache)->Contains("d", 100));
}

TEST(DiskCacheTest, ARestartedCacheKeepsItsEntriesWithinItsBound) {
  TempDir dir;
  {
    auto cache = DiskCache::Open(dir.path(), 1000);
    ASSERT_TRUE(cache.ok());
    for (char c : std::string("abcdefgh")) (*cache)->Put(std::string(1, c), Bytes(c, 100));
  }
  std::ofstream(dir.path() + "/tmp-123-0") << "half a write";  // a crash mid-write
  auto again = DiskCache::Open(dir.path(), 500);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->counters().entries.load(), 5);
  EXPECT_LE((*again)->counters().bytes.load(), 500);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/tmp-123-0"));
  int kept = 0;
  for (char c : std::string("abcdefgh")) {
    if (std::optional<std::string> got = (*again)->Get(std::string(1, c), 100)) {
      EXPECT_EQ(*got, Bytes(c, 100));
      ++kept;
    }
  }
  EXPECT_EQ(kept, 5);
}

TEST(DiskCacheTest, AnEntryChangedOnDiskIsAMissNotWrongBytes) {
  TempDir dir;
  auto cache = DiskCache::Open(dir.path(), 1000);
  ASSERT_TRUE(cache.ok());
  (*cache)->Put("a", Bytes('a', 100));
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    std::ofstream(entry.path(), std::ios::app) << "more";
  }
  EXPECT_FALSE((*cache)->Get("a", 100).has_value());
  EXPECT_FALSE((*cache)->Contains("a", 100));
}

TEST(DiskCacheTest, AWholeFileIsAdoptedAndFoundByItsPath) {
  TempDir dir;
  auto cache = DiskCache::Open(dir.path(), 1000);
  ASSERT_TRUE(cache.ok());
  const std::string temporary = (*cache)->TemporaryPath();
  std::ofstream(temporary) << Bytes('z', 50);
  (*cache)->Adopt("whole", temporary);
  std::optional<std::string> path = (*cache)->Find("whole");
  ASSERT_TRUE(path.has_value());
  std::ifstream in(*path);
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, Bytes('z', 50));
  EXPECT_FALSE(std::filesystem::exists(temporary));
}

TEST(DiskCacheTest, ANonPositiveSizeIsRefused) {
  TempDir dir;
  EXPECT_EQ(DiskCache::Open(dir.path(), 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardcast::remote

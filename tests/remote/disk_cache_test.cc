// The disk cache of remote bytes: hits return what was put, the size bound holds with
// the least recently used going first, a restarted cache is warm, and a file that is
// not what was put (another size) is a miss, never wrong bytes. The cache owns only
// its own files (issue 35): what else is in --cache-dir survives it, and two caches
// sharing the directory (two servers, even in separate PID namespaces) never write
// one temporary file.
#include "common/remote/disk_cache.h"

#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/support/temp_dir.h"

namespace shardcast::remote {
namespace {

using testing_util::TempDir;

std::string Bytes(char c, size_t n) { return std::string(n, c); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

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
  // A crash mid-write leaves a temporary file of the cache's own; nobody holds its lock.
  const std::string half =
      dir.path() + "/" + DiskCache::kSubdirectory + "/tmp-" + std::string(32, 'a');
  std::ofstream(half) << "half a write";
  auto again = DiskCache::Open(dir.path(), 500);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->counters().entries.load(), 5);
  EXPECT_LE((*again)->counters().bytes.load(), 500);
  EXPECT_FALSE(std::filesystem::exists(half));
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
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path())) {
    if (entry.is_regular_file()) std::ofstream(entry.path(), std::ios::app) << "more";
  }
  EXPECT_FALSE((*cache)->Get("a", 100).has_value());
  EXPECT_FALSE((*cache)->Contains("a", 100));
}

TEST(DiskCacheTest, AWholeFileIsAdoptedAndFoundByItsPath) {
  TempDir dir;
  auto cache = DiskCache::Open(dir.path(), 1000);
  ASSERT_TRUE(cache.ok());
  absl::StatusOr<DiskCache::Temporary> made = (*cache)->CreateTemporary();
  ASSERT_TRUE(made.ok()) << made.status();
  const std::string temporary = made->path;
  ASSERT_EQ(::write(made->fd, Bytes('z', 50).data(), 50), 50);
  (*cache)->Adopt("whole", temporary);
  ::close(made->fd);
  std::optional<std::string> path = (*cache)->Find("whole");
  ASSERT_TRUE(path.has_value());
  std::ifstream in(*path);
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, Bytes('z', 50));
  EXPECT_FALSE(std::filesystem::exists(temporary));
}

// Issue 35: a user's weights.bin in --cache-dir was deleted at start (any *.bin was
// taken for an entry, then evicted), and so was anything named tmp-*.
TEST(DiskCacheTest, FilesItDidNotWriteSurviveStartEvictionAndCleanup) {
  TempDir dir;
  namespace fs = std::filesystem;
  const std::vector<std::pair<std::string, std::string>> foreign = {
      {"weights.bin", Bytes('w', 4000)},
      {"tmp-123-0", "a user's file named like a temporary"},
      {std::string(32, 'b') + ".bin", "named like an entry, but not in the cache's own place"},
      {"notes.txt", "notes"},
      {"index/entry.idx", "the index cache's"}};
  fs::create_directories(dir.path() + "/index");
  for (const auto& [name, text] : foreign) std::ofstream(dir.path() + "/" + name) << text;
  for (int round = 0; round < 2; ++round) {  // a start on them, then a restart
    auto cache = DiskCache::Open(dir.path(), 300);
    ASSERT_TRUE(cache.ok()) << cache.status();
    EXPECT_EQ((*cache)->counters().entries.load(), round == 0 ? 0 : 3)
        << "only its own entries are counted";
    for (char c : std::string("abcdef")) (*cache)->Put(std::string(1, c), Bytes(c, 100));
    EXPECT_GT((*cache)->counters().evictions.load(), 0);
    EXPECT_LE((*cache)->counters().bytes.load(), 300);
  }
  for (const auto& [name, text] : foreign) {
    EXPECT_EQ(ReadFile(dir.path() + "/" + name), text) << name;
  }
}

// Issue 35: temporary names were tmp-PID-N, which two servers in separate PID
// namespaces sharing the directory both write. Two caches in one process have one PID
// too: they write entries at once, each of its own bytes, and every entry read back
// afterwards is whole and right.
TEST(DiskCacheTest, TwoCachesSharingTheDirectoryNeverMixTheirWrites) {
  TempDir dir;
  auto first = DiskCache::Open(dir.path(), int64_t{1} << 30);
  auto second = DiskCache::Open(dir.path(), int64_t{1} << 30);
  ASSERT_TRUE(first.ok() && second.ok());
  constexpr int kKeys = 12;
  constexpr size_t kSize = 1 << 20;  // large enough for the writes to overlap
  const auto bytes_of = [](int writer, int key) {
    std::string bytes(kSize, static_cast<char>('A' + writer));
    bytes[0] = static_cast<char>(key);
    return bytes;
  };
  // Both writers start each Put together, so that their writes overlap.
  std::atomic<int> arrived{0};
  const auto together = [&arrived](int step) {
    arrived.fetch_add(1);
    while (arrived.load() < 2 * step) std::this_thread::yield();
  };
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      DiskCache& cache = w == 0 ? **first : **second;
      int step = 0;
      for (int k = 0; k < kKeys; ++k) {
        // The same key from both, as two servers caching one object would, and keys
        // of one's own with one's own bytes.
        together(++step);
        cache.Put(absl::StrCat("shared-", k), bytes_of(0, k));
        together(++step);
        cache.Put(absl::StrCat("own-", w, "-", k), bytes_of(w, k));
      }
    });
  }
  for (std::thread& t : writers) t.join();
  auto reader = DiskCache::Open(dir.path(), int64_t{1} << 30);
  ASSERT_TRUE(reader.ok());
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ((*reader)->Get(absl::StrCat("shared-", k), kSize), bytes_of(0, k)) << k;
    for (int w = 0; w < 2; ++w) {
      EXPECT_EQ((*reader)->Get(absl::StrCat("own-", w, "-", k), kSize), bytes_of(w, k))
          << w << " " << k;
    }
  }
  EXPECT_EQ((*first)->counters().write_errors.load() + (*second)->counters().write_errors.load(),
            0);
}

// A temporary file being written is locked: another cache opening the directory (a
// second server starting) leaves it alone, and the names never repeat.
TEST(DiskCacheTest, ATemporaryFileBeingWrittenSurvivesAnotherCachesStart) {
  TempDir dir;
  auto cache = DiskCache::Open(dir.path(), 1 << 20);
  ASSERT_TRUE(cache.ok());
  absl::StatusOr<DiskCache::Temporary> writing = (*cache)->CreateTemporary();
  ASSERT_TRUE(writing.ok()) << writing.status();
  absl::StatusOr<DiskCache::Temporary> other = (*cache)->CreateTemporary();
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(writing->path, other->path);
  ::close(other->fd);  // abandoned, unlocked: the next start removes it
  auto second = DiskCache::Open(dir.path(), 1 << 20);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(std::filesystem::exists(writing->path));
  EXPECT_FALSE(std::filesystem::exists(other->path));
  ASSERT_EQ(::write(writing->fd, "abc", 3), 3);
  (*cache)->Adopt("k", writing->path);
  ::close(writing->fd);
  EXPECT_TRUE((*cache)->Find("k").has_value());
}

TEST(DiskCacheTest, ANonPositiveSizeIsRefused) {
  TempDir dir;
  EXPECT_EQ(DiskCache::Open(dir.path(), 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardcast::remote

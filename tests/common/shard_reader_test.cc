// ShardReader returns the original bytes of every member, for plain and gzip shards,
// from many threads at once, and names the shard and member when the file changed.
#include "common/shards/shard_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/common/shard_test_util.h"

namespace shardcast {
namespace {

using shard_testing::FileSpec;
using shard_testing::MakeTar;
using shard_testing::Payload;
using shard_testing::ScopedTempDir;
using shard_testing::TarWriter;

class ShardReaderTest : public ::testing::Test {
 protected:
  // `n` shards of 3 samples; even shards plain, odd ones .tar.gz (or all gz).
  void MakeShards(int n, bool all_gzip = false) {
    std::filesystem::create_directories(tmp_ / "data");
    for (int s = 0; s < n; ++s) {
      std::vector<FileSpec> files;
      for (int i = 0; i < 3; ++i) {
        const std::string key = absl::StrCat("s", s, "_", i);
        for (const std::string ext : {"jpg", "json", "seg.png"}) {
          const std::string name = key + "." + ext;
          std::string content = ext == "json" ? absl::StrCat("{\"label\": ", i, "}")
                                              : Payload(name, 300 + 911 * i + 17 * s);
          files.push_back({name, content});
          originals_[name] = content;
        }
      }
      const bool gz = all_gzip || s % 2 == 1;
      MakeTar(tmp_.path(), files, s % 3 ? TarWriter::kPythonPax : TarWriter::kGnuTarGnu,
              tmp_ / absl::StrCat("data/shard-", s, gz ? ".tar.gz" : ".tar"), gz);
    }
    Reindex();
  }

  void Reindex() {
    absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(tmp_ / "data", IndexOptions());
    ASSERT_TRUE(index.ok()) << index.status();
    index_ = *std::move(index);
  }

  // Reads every member of every sample and compares with what was packed.
  void CheckAll(ShardReader& reader, int* checked) {
    for (uint32_t s = 0; s < index_.shards.size(); ++s) {
      for (const SampleEntry& e : index_.shards[s].samples) {
        for (const MemberRef& m : e.members) {
          absl::StatusOr<std::string> bytes = reader.ReadMember(s, m);
          ASSERT_TRUE(bytes.ok()) << bytes.status();
          ASSERT_EQ(*bytes, originals_.at(e.key + "." + m.ext)) << e.key << "." << m.ext;
          ++*checked;
        }
      }
    }
  }

  ScopedTempDir tmp_;
  DatasetIndex index_;
  std::map<std::string, std::string> originals_;
};

TEST_F(ShardReaderTest, ReadsOriginalBytesFromPlainAndGzipShards) {
  MakeShards(4);
  ASSERT_EQ(index_.num_samples, 12);
  ASSERT_TRUE(index_.shards[1].compressed);
  ASSERT_FALSE(index_.shards[0].compressed);
  ShardReader reader(index_);
  int checked = 0;
  CheckAll(reader, &checked);
  EXPECT_EQ(checked, 36);
  CheckAll(reader, &checked);  // second pass: cached fds and inflated shards
  EXPECT_EQ(checked, 72);
}

TEST_F(ShardReaderTest, ConcurrentReadsOverMoreGzipShardsThanTheCacheHolds) {
  MakeShards(8, /*all_gzip=*/true);
  // A budget below one index: every shard switch drops the others' and rebuilds.
  ShardReader reader(index_, /*max_gzip_index_bytes=*/1);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      // Each thread walks the shards in another order so the LRU keeps evicting.
      for (int round = 0; round < 3; ++round) {
        for (uint32_t k = 0; k < index_.shards.size(); ++k) {
          const uint32_t s = (k * (t + 1) + round) % index_.shards.size();
          for (const SampleEntry& e : index_.shards[s].samples) {
            for (const MemberRef& m : e.members) {
              absl::StatusOr<std::string> bytes = reader.ReadMember(s, m);
              if (!bytes.ok() || *bytes != originals_.at(e.key + "." + m.ext)) ++failures;
            }
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(ShardReaderTest, ConcurrentPlainReads) {
  MakeShards(2);
  ShardReader reader(index_);
  std::atomic<int> checked{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      int mine = 0;
      CheckAll(reader, &mine);
      checked += mine;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(checked.load(), 8 * 18);
}

// The error a changed shard gives: FAILED_PRECONDITION, marked IsShardChanged, naming
// the shard and `what` changed.
void ExpectShardChanged(const absl::StatusOr<std::string>& got, absl::string_view shard,
                        absl::string_view what) {
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition) << got.status();
  EXPECT_TRUE(IsShardChanged(got.status())) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), shard)) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "changed since indexing")) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), what)) << got.status();
}

TEST_F(ShardReaderTest, ChangedOrShrunkFilesAreErrorsNamingTheShard) {
  MakeShards(3);
  const SampleEntry& last0 = index_.shards[0].samples.back();
  const MemberRef member0 = last0.members[last0.image_member];
  const std::string path0 = index_.root + "/" + index_.shards[0].path;
  const std::string bytes0 = shard_testing::ReadWholeFile(path0);
  {
    // Shrunk before the first read: refused at open (size differs from the index).
    ShardReader reader(index_);
    shard_testing::WriteFile(path0, bytes0.substr(0, member0.offset + 5));
    ExpectShardChanged(reader.ReadMember(0, member0), "shard-0.tar", "size");
    shard_testing::WriteFile(path0, bytes0);
    Reindex();  // the restored file is another version as far as timestamps go
  }
  {
    // Shrunk after the fd was opened: the read that follows is refused, not short.
    ShardReader reader(index_);
    ASSERT_TRUE(reader.ReadMember(0, index_.shards[0].samples[0].members[0]).ok());
    ASSERT_EQ(::truncate(path0.c_str(), static_cast<off_t>(member0.offset + 5)), 0);
    ExpectShardChanged(reader.ReadMember(0, member0), "shard-0.tar", "size");
    shard_testing::WriteFile(path0, bytes0);
    Reindex();
  }
  {
    // A gzip shard replaced by garbage.
    ShardReader reader(index_);
    const std::string path1 = index_.root + "/" + index_.shards[1].path;
    shard_testing::WriteFile(path1, Payload("junk", 4000));
    ExpectShardChanged(reader.ReadMember(1, index_.shards[1].samples[0].members[0]),
                       "shard-1.tar.gz", "size");
  }
  {
    ShardReader reader(index_);
    EXPECT_EQ(reader.ReadMember(99, member0).status().code(), absl::StatusCode::kOutOfRange);
    MemberRef beyond = index_.shards[2].samples[0].members[0];
    beyond.offset = 1 << 30;
    // A reference past the end of a plain tar is refused before any buffer is made.
    absl::StatusOr<std::string> got = reader.ReadMember(2, beyond);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
    beyond.size = uint64_t{1} << 62;  // a size no buffer could hold
    beyond.offset = 0;
    EXPECT_EQ(reader.ReadMember(2, beyond).status().code(), absl::StatusCode::kDataLoss);
  }
}

// Sets the file's mtime to a fixed past time, so a rewrite now changes it even
// within the filesystem's timestamp tick.
void BackdateMtime(const std::string& path) { shard_testing::SetMtime(path, 1600000000, 0); }

// Overwrites the bytes of `path` in place (same inode, same size) with other bytes.
void RewriteInPlaceSameSize(const std::string& path) {
  std::string bytes = shard_testing::ReadWholeFile(path);
  for (char& c : bytes) c = static_cast<char>(c ^ 0x5a);
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

TEST_F(ShardReaderTest, SameSizeRewriteInPlaceIsDetectedAndStaysFailed) {
  MakeShards(2);
  for (const ShardInfo& shard : index_.shards) BackdateMtime(index_.root + "/" + shard.path);
  Reindex();
  ShardReader reader(index_);
  int checked = 0;
  CheckAll(reader, &checked);  // descriptors open, gzip index built
  EXPECT_TRUE(reader.ChangedShards().empty());

  for (uint32_t s : {0u, 1u}) {  // plain, then gzip
    const std::string path = index_.root + "/" + index_.shards[s].path;
    const std::string original = shard_testing::ReadWholeFile(path);
    RewriteInPlaceSameSize(path);
    const MemberRef& member = index_.shards[s].samples[1].members[0];
    ExpectShardChanged(reader.ReadMember(s, member), index_.shards[s].path, "mtime");
    // Put back byte for byte: still refused (its timestamps cannot be trusted again).
    shard_testing::WriteFile(path, original);
    ExpectShardChanged(reader.ReadMember(s, member), index_.shards[s].path, "mtime");
  }
  const std::vector<ChangedShard> changed = reader.ChangedShards();
  ASSERT_EQ(changed.size(), 2u);
  EXPECT_EQ(changed[0].path, "shard-0.tar");
  EXPECT_EQ(changed[1].path, "shard-1.tar.gz");
  EXPECT_TRUE(absl::StrContains(changed[0].change, "mtime")) << changed[0].change;
}

TEST_F(ShardReaderTest, ShardReplacedByRenameIsDetectedWhenReopened) {
  MakeShards(1);
  const std::string path = index_.root + "/" + index_.shards[0].path;
  const std::string original = shard_testing::ReadWholeFile(path);
  // Same bytes, same size, same mtime, but another inode: another file.
  shard_testing::WriteFile(path + ".new", original);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  shard_testing::SetMtime(path + ".new", st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  ASSERT_EQ(::rename((path + ".new").c_str(), path.c_str()), 0);
  ShardReader reader(index_);
  ExpectShardChanged(reader.ReadMember(0, index_.shards[0].samples[0].members[0]), "shard-0.tar",
                     "inode");
}

// A FIFO put in a shard's place (issue 29): opening it must not wait for a writer; it is
// another file, so a change. A regression hangs here until the suite's timeout.
TEST_F(ShardReaderTest, ShardReplacedByAFifoIsAChangeNotAHang) {
  MakeShards(1);
  const std::string path = index_.root + "/" + index_.shards[0].path;
  std::filesystem::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  ShardReader reader(index_);
  ExpectShardChanged(reader.ReadMember(0, index_.shards[0].samples[0].members[0]), "shard-0.tar",
                     "size");
}

TEST_F(ShardReaderTest, RemovedShardIsAChangeNotAnUnreadableSample) {
  MakeShards(1);
  std::filesystem::remove(index_.root + "/" + index_.shards[0].path);
  ShardReader reader(index_);
  ExpectShardChanged(reader.ReadMember(0, index_.shards[0].samples[0].members[0]), "shard-0.tar",
                     "removed");
  EXPECT_EQ(reader.ChangedShards().size(), 1u);
}

}  // namespace
}  // namespace shardcast

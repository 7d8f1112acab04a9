// ShardReader returns the original bytes of every member, for plain and gzip shards,
// from many threads at once, and names the shard and member when the file changed.
#include "common/shard_reader.h"

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
  ShardReader reader(index_);
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

TEST_F(ShardReaderTest, ChangedOrShrunkFilesAreErrorsNamingShardAndMember) {
  MakeShards(3);
  const SampleEntry& last0 = index_.shards[0].samples.back();
  const MemberRef member0 = last0.members[last0.image_member];
  const std::string path0 = index_.root + "/" + index_.shards[0].path;
  {
    // Shrunk before the first read: refused at open (size differs from the index).
    ShardReader reader(index_);
    const std::string bytes = shard_testing::ReadWholeFile(path0);
    shard_testing::WriteFile(path0, bytes.substr(0, member0.offset + 5));
    absl::StatusOr<std::string> got = reader.ReadMember(0, member0);
    ASSERT_FALSE(got.ok());
    EXPECT_TRUE(absl::StrContains(got.status().message(), "shard-0.tar")) << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), "changed since indexing"));
    shard_testing::WriteFile(path0, bytes);
  }
  {
    // Shrunk after the fd was opened: the short read names the member.
    ShardReader reader(index_);
    ASSERT_TRUE(reader.ReadMember(0, index_.shards[0].samples[0].members[0]).ok());
    ASSERT_EQ(::truncate(path0.c_str(), static_cast<off_t>(member0.offset + 5)), 0);
    absl::StatusOr<std::string> got = reader.ReadMember(0, member0);
    ASSERT_FALSE(got.ok());
    EXPECT_TRUE(absl::StrContains(got.status().message(), "shard-0.tar")) << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), absl::StrCat("offset ", member0.offset)))
        << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), "short read"));
  }
  {
    // A gzip shard replaced by garbage: the inflate error names the shard and member.
    ShardReader reader(index_);
    const std::string path1 = index_.root + "/" + index_.shards[1].path;
    shard_testing::WriteFile(path1, Payload("junk", 4000));
    const MemberRef& m = index_.shards[1].samples[0].members[0];
    absl::StatusOr<std::string> got = reader.ReadMember(1, m);
    ASSERT_FALSE(got.ok());
    EXPECT_TRUE(absl::StrContains(got.status().message(), "shard-1.tar.gz")) << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), "offset")) << got.status();
  }
  {
    ShardReader reader(index_);
    EXPECT_EQ(reader.ReadMember(99, member0).status().code(), absl::StatusCode::kOutOfRange);
    MemberRef beyond = index_.shards[2].samples[0].members[0];
    beyond.offset = 1 << 30;
    // Shard 2 is a plain tar: pread past the end is a short read, not garbage.
    absl::StatusOr<std::string> got = reader.ReadMember(2, beyond);
    EXPECT_FALSE(got.ok());
  }
}

}  // namespace
}  // namespace shardcast

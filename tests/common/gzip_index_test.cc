// GzipIndex against real gzip files (written by gzip and zlib): every byte range read
// through the access points equals the same range of the file inflated whole, across
// block boundaries, access points and concatenated members; broken files are errors.
#include "common/shards/gzip_index.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/common/shard_test_util.h"

namespace shardcast {
namespace {

using shard_testing::Payload;
using shard_testing::ScopedTempDir;

// Half random bytes, half repetitive text: deflate then emits blocks of both kinds.
std::string MixedData(size_t size, const std::string& seed) {
  std::string out = Payload(seed, size / 2);
  while (out.size() < size) out += "the same sentence again, compressible; ";
  out.resize(size);
  return out;
}

// gzip-compresses `data` with zlib (one member).
std::string Gzip(const std::string& data, int level = 6) {
  z_stream strm{};
  EXPECT_EQ(deflateInit2(&strm, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&strm, data.size()) + 64, '\0');
  strm.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  strm.avail_in = static_cast<uInt>(data.size());
  strm.next_out = reinterpret_cast<Bytef*>(out.data());
  strm.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&strm, Z_FINISH), Z_STREAM_END);
  out.resize(strm.total_out);
  deflateEnd(&strm);
  return out;
}

class GzipIndexTest : public ::testing::Test {
 protected:
  int Open(const std::string& name, const std::string& bytes) {
    const std::string path = tmp_ / name;
    shard_testing::WriteFile(path, bytes);
    const int fd = ::open(path.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    fds_.push_back(fd);
    return fd;
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
  }

  // Reads ranges at every access point, across them, at both ends, and at random.
  void ExpectReadsMatch(int fd, const GzipIndex& index, const std::string& plain) {
    ASSERT_EQ(index.uncompressed_size(), plain.size());
    std::mt19937_64 rng(7);
    std::vector<std::pair<uint64_t, uint64_t>> ranges = {
        {0, 1}, {0, plain.size()}, {plain.size() - 1, 1}, {plain.size(), 0}};
    for (int i = 0; i < 60; ++i) {
      const uint64_t offset = rng() % plain.size();
      ranges.push_back({offset, rng() % std::min<uint64_t>(200000, plain.size() - offset + 1)});
    }
    for (const auto& [offset, size] : ranges) {
      std::string got(size, '\0');
      absl::Status read = index.Read(fd, offset, size, got.data());
      ASSERT_TRUE(read.ok()) << read << " at " << offset << "+" << size;
      ASSERT_TRUE(got == plain.substr(offset, size)) << "at " << offset << "+" << size;
    }
  }

  ScopedTempDir tmp_;
  std::vector<int> fds_;
};

TEST_F(GzipIndexTest, ReadsEqualTheWholeInflatedStream) {
  const std::string plain = MixedData(3 << 20, "one");
  const int fd = Open("one.gz", Gzip(plain));
  absl::StatusOr<GzipIndex> index = GzipIndex::Build(fd, /*span=*/64 << 10);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_GT(index->access_points(), 20u);  // a point per ~64 KiB of output
  EXPECT_GT(index->memory_bytes(),
            (index->access_points() - 1) * 32768);  // the first has no window
  ExpectReadsMatch(fd, *index, plain);

  // The default span: a point (32 KiB) per kDefaultSpan of output at most.
  absl::StatusOr<GzipIndex> coarse = GzipIndex::Build(fd);
  ASSERT_TRUE(coarse.ok()) << coarse.status();
  EXPECT_LE(coarse->access_points(), plain.size() / GzipIndex::kDefaultSpan + 1);
  ExpectReadsMatch(fd, *coarse, plain);
}

TEST_F(GzipIndexTest, GzipToolOutputAndConcatenatedMembers) {
  // The gzip program's own output, then three members back to back (as pigz or
  // `cat a.gz b.gz` make), then trailing zeros (tape padding), which gzip ignores.
  const std::string a = MixedData(700000, "a"), b = MixedData(5, "b"), c = MixedData(900000, "c");
  shard_testing::WriteFile(tmp_ / "tool", a);
  ASSERT_EQ(shard_testing::RunShell("gzip -9 -k " + shard_testing::ShellQuote(tmp_ / "tool")), 0);
  const std::string tool = shard_testing::ReadWholeFile(tmp_ / "tool.gz");
  const int tool_fd = Open("tool2.gz", tool);
  absl::StatusOr<GzipIndex> tool_index = GzipIndex::Build(tool_fd, 32 << 10);
  ASSERT_TRUE(tool_index.ok()) << tool_index.status();
  ExpectReadsMatch(tool_fd, *tool_index, a);

  const int fd = Open("multi.gz", Gzip(a) + Gzip(b, 1) + Gzip(c, 9) + std::string(1024, '\0'));
  absl::StatusOr<GzipIndex> index = GzipIndex::Build(fd, 48 << 10);
  ASSERT_TRUE(index.ok()) << index.status();
  ExpectReadsMatch(fd, *index, a + b + c);
}

TEST_F(GzipIndexTest, BrokenFilesAreErrorsNotCrashes) {
  const std::string plain = MixedData(400000, "broken");
  const std::string good = Gzip(plain);
  for (const std::string& bad :
       {std::string(), std::string("not gzip at all"), good.substr(0, good.size() / 2),
        good.substr(0, 10),
        good.substr(0, 300) + std::string(1, good[300] ^ 0x40) + good.substr(301)}) {
    absl::StatusOr<GzipIndex> index = GzipIndex::Build(Open("bad.gz", bad), 32 << 10);
    ASSERT_FALSE(index.ok()) << bad.size();
    EXPECT_EQ(index.status().code(), absl::StatusCode::kDataLoss) << index.status();
  }
  // Ranges past the end are refused; a file that changed under its index fails its read.
  const int fd = Open("good.gz", good);
  absl::StatusOr<GzipIndex> index = GzipIndex::Build(fd, 32 << 10);
  ASSERT_TRUE(index.ok()) << index.status();
  char byte = 0;
  EXPECT_EQ(index->Read(fd, plain.size(), 1, &byte).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(index->Read(fd, 1, uint64_t{1} << 62, &byte).code(), absl::StatusCode::kOutOfRange);
  const int other = Open("other.gz", Gzip(MixedData(1000, "x")));
  std::string out(1000, '\0');
  EXPECT_EQ(index->Read(other, plain.size() - 1000, 1000, out.data()).code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace shardcast

// The log helper for untrusted strings, and where the memory budget's default comes
// from (cgroup files read from a directory tree written by the test).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "server/base/log.h"
#include "server/base/memory_limit.h"
#include "tests/support/temp_dir.h"

namespace shardcast::server {
namespace {

TEST(LogSafeTest, PrintableAsciiIsKept) { EXPECT_EQ(LogSafe("job-42_a.b"), "job-42_a.b"); }

TEST(LogSafeTest, ControlAndNonAsciiBytesAreEscaped) {
  EXPECT_EQ(LogSafe("a\nb"), "a\\nb");
  EXPECT_EQ(LogSafe("x\x1b[31my"), "x\\x1b[31my");
  EXPECT_EQ(LogSafe(std::string("n\0ul", 4)), "n\\x00ul");
  EXPECT_EQ(LogSafe("caf\xc3\xa9"), "caf\\xc3\\xa9");
  EXPECT_EQ(LogSafe("it's"), "it\\'s");  // a quote cannot close the '...' around it
  const std::string escaped = LogSafe("line\r\nE forged: line");
  EXPECT_EQ(escaped.find('\n'), std::string::npos);
  EXPECT_EQ(escaped.find('\r'), std::string::npos);
}

TEST(LogSafeTest, LongValuesAreCutAndTheirSizeSaid) {
  const std::string id(300, 'a');
  EXPECT_EQ(LogSafe(id), std::string(64, 'a') + "...(300 bytes)");
  EXPECT_EQ(LogSafe(std::string(64, 'b')), std::string(64, 'b'));
  EXPECT_EQ(LogSafe(std::string(10, '\n'), 4), "\\n\\n\\n\\n...(10 bytes)");
}

class MemoryLimitTest : public ::testing::Test {
 protected:
  void Write(const std::string& relative, const std::string& text) {
    const std::string path = root_.path() + relative;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  }
  static constexpr int64_t kPhysical = int64_t{64} << 30;
  testing_util::TempDir root_;
};

TEST_F(MemoryLimitTest, CgroupV2LimitOfTheProcesssCgroup) {
  Write("/proc/self/cgroup", "0::/system.slice/shardcast.service\n");
  Write("/sys/fs/cgroup/system.slice/shardcast.service/memory.max", "4294967296\n");
  const MemoryLimit limit = AvailableMemory(root_.path(), kPhysical);
  EXPECT_EQ(limit.bytes, int64_t{4} << 30);
  EXPECT_NE(limit.source.find("memory.max"), std::string::npos);
  EXPECT_EQ(DefaultBatchMemoryBytes(limit), int64_t{2} << 30);
}

TEST_F(MemoryLimitTest, CgroupV2MaxMeansThePhysicalMemory) {
  Write("/proc/self/cgroup", "0::/\n");
  Write("/sys/fs/cgroup/memory.max", "max\n");
  const MemoryLimit limit = AvailableMemory(root_.path(), kPhysical);
  EXPECT_EQ(limit.bytes, kPhysical);
  EXPECT_EQ(limit.source, "physical memory");
}

TEST_F(MemoryLimitTest, CgroupV1Limit) {
  Write("/proc/self/cgroup", "5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n");
  Write("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "1073741824\n");
  EXPECT_EQ(AvailableMemory(root_.path(), kPhysical).bytes, int64_t{1} << 30);
}

TEST_F(MemoryLimitTest, CgroupV1UnlimitedIsAHugeNumberAndMeansThePhysicalMemory) {
  Write("/proc/self/cgroup", "4:memory:/\n");
  Write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(AvailableMemory(root_.path(), kPhysical).bytes, kPhysical);
}

TEST_F(MemoryLimitTest, NoCgroupFilesMeansThePhysicalMemory) {
  EXPECT_EQ(AvailableMemory(root_.path(), kPhysical).bytes, kPhysical);
  EXPECT_GT(AvailableMemory().bytes, 0);
}

}  // namespace
}  // namespace shardcast::server

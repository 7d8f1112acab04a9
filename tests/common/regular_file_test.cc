// ReadRegularFile and the files read through it (token and PEM files): a FIFO, a device, a
// directory or an oversized file is refused at once, without blocking and without
// reading it (issue 29: a FIFO as the index cache or the token file hung the server, and
// SIGTERM with it; a link to /dev/zero took 7 GB).
#include "common/util/regular_file.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/util/token_file.h"
#include "tests/support/temp_dir.h"

namespace shardcast {
namespace {

using ::testing::HasSubstr;
using testing_util::TempDir;

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(RegularFileTest, ReadsARegularFileWhole) {
  TempDir dir;
  Write(dir / "f", std::string("a\0b", 3));
  absl::StatusOr<std::string> text = ReadRegularFile(dir / "f", 3);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, std::string("a\0b", 3));
  Write(dir / "empty", "");
  EXPECT_EQ(ReadRegularFile(dir / "empty", 0).value(), "");
}

TEST(RegularFileTest, WhatIsNotARegularFileIsRefusedWithoutWaiting) {
  TempDir dir;
  // Opening a FIFO for reading blocks until a writer comes, unless told not to: a
  // regression hangs here (and the suite's timeout fails it).
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  absl::StatusOr<std::string> fifo = ReadRegularFile(dir / "fifo", 1 << 20);
  EXPECT_EQ(fifo.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fifo.status().message(), HasSubstr("a FIFO, not a regular file"));

  std::filesystem::create_symlink("/dev/zero", dir / "zero");
  absl::StatusOr<std::string> zero = ReadRegularFile(dir / "zero", 1 << 20);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(zero.status().message(), HasSubstr("a character device"));

  EXPECT_THAT(ReadRegularFile(dir.path(), 1 << 20).status().message(), HasSubstr("a directory"));
  EXPECT_EQ(ReadRegularFile(dir / "missing", 1).status().code(), absl::StatusCode::kNotFound);
}

TEST(RegularFileTest, AFileLargerThanItsBoundIsNotRead) {
  TempDir dir;
  // 64 GiB, sparse: read whole it would take the memory; refused from its size alone.
  {
    const int fd = ::open((dir / "huge").c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, off_t{64} << 30), 0);
    ::close(fd);
  }
  absl::StatusOr<std::string> huge = ReadRegularFile(dir / "huge", 1 << 20);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(huge.status().message(),
              HasSubstr("68719476736 bytes, more than the 1048576 this file may hold"));
  Write(dir / "four", "1234");
  EXPECT_FALSE(ReadRegularFile(dir / "four", 3).ok());
  EXPECT_TRUE(ReadRegularFile(dir / "four", 4).ok());
}

TEST(RegularFileTest, TokenAndPemFilesNameTheFileAndRefuseAFifo) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "tokens").c_str(), 0600), 0);
  absl::StatusOr<std::vector<std::string>> tokens = ReadTokenFile(dir / "tokens");
  EXPECT_EQ(tokens.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(tokens.status().message(),
              HasSubstr("token file '" + (dir / "tokens") + "': a FIFO, not a regular file"));
  absl::StatusOr<std::string> pem = ReadPemFile("--tls-cert", dir / "tokens");
  EXPECT_THAT(pem.status().message(), HasSubstr("--tls-cert '" + (dir / "tokens") + "': a FIFO"));
  EXPECT_THAT(ReadPemFile("--tls-ca", dir / "missing").status().message(),
              HasSubstr("--tls-ca '" + (dir / "missing") + "': cannot open: No such file"));
}

}  // namespace
}  // namespace shardcast

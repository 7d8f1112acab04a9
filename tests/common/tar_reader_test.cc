// Tar scanning: member lists and offsets for tars written by GNU tar and Python's tarfile
// in every format, checked against pread, libarchive's own bytes and tarfile's offsets.
#include "common/shards/tar_reader.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/common/shard_test_util.h"

namespace shardcast {
namespace {

using shard_testing::FileSpec;
using shard_testing::MakeTar;
using shard_testing::Payload;
using shard_testing::ScopedTempDir;
using shard_testing::TarWriter;

std::string PreadBytes(const std::string& path, uint64_t offset, uint64_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0) << path;
  std::string out(size, '\0');
  const ssize_t n = ::pread(fd, out.data(), size, static_cast<off_t>(offset));
  ::close(fd);
  EXPECT_EQ(n, static_cast<ssize_t>(size)) << path << " @" << offset;
  return out;
}

// What libarchive itself returns for each regular member, by streaming the archive.
std::map<std::string, std::string> LibarchiveContents(const std::string& path) {
  std::map<std::string, std::string> out;
  archive* a = archive_read_new();
  archive_read_support_filter_all(a);
  archive_read_support_format_tar(a);
  EXPECT_EQ(archive_read_open_filename(a, path.c_str(), 10240), ARCHIVE_OK);
  archive_entry* entry = nullptr;
  int r;
  // ARCHIVE_WARN: a UTF-8 PAX name that the C locale cannot represent; the raw name is fine.
  while ((r = archive_read_next_header(a, &entry)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
    if (archive_entry_filetype(entry) != AE_IFREG) continue;
    std::string data;
    char buf[4096];
    la_ssize_t n;
    while ((n = archive_read_data(a, buf, sizeof(buf))) > 0) data.append(buf, n);
    const char* utf8 = archive_entry_pathname_utf8(entry);
    out[utf8 != nullptr ? utf8 : archive_entry_pathname(entry)] = data;
  }
  archive_read_free(a);
  return out;
}

// tarfile's own idea of each regular member's data offset: an independent check.
std::map<std::string, uint64_t> PythonOffsets(const ScopedTempDir& tmp, const std::string& tar) {
  const std::string out = tmp / "offsets.txt";
  const std::string cmd =
      shard_testing::PythonBinary() +
      " -c \"import sys,tarfile\nwith open(sys.argv[2],'w',encoding='utf-8') as o:\n"
      " for m in tarfile.open(sys.argv[1]):\n"
      "  m.isreg() and o.write('%d %s\\n' % (m.offset_data, m.name))\" " +
      shard_testing::ShellQuote(tar) + " " + shard_testing::ShellQuote(out);
  EXPECT_EQ(shard_testing::RunShell(cmd), 0) << cmd;
  std::map<std::string, uint64_t> offsets;
  std::istringstream in(shard_testing::ReadWholeFile(out));
  std::string line;
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    offsets[line.substr(space + 1)] = std::stoull(line.substr(0, space));
  }
  return offsets;
}

std::vector<FileSpec> VariedFiles(bool long_names) {
  std::vector<FileSpec> files = {
      {"000001.jpg", Payload("a", 1000)},
      {"000001.json", "{\"label\": 3}"},
      {"000002.jpg", Payload("b", 512)},  // exactly one block
      {"000002.cls", "7\n"},
      {"empty.txt", ""},
      {"dir/sub/000003.png", Payload("c", 70000)},  // several libarchive blocks
      {"000004.jpg", Payload("d", 1)},
      {"\xc3\xbcnicode-\xe2\x82\xac.jpg", Payload("e", 33)},
  };
  if (long_names) {
    const std::string deep = std::string(60, 'd') + "/" + std::string(70, 'e');
    files.push_back({deep + "/sample-with-a-long-key.jpg", Payload("f", 4000)});
    files.push_back({std::string(150, 'k') + ".seg.png", Payload("g", 900)});
  }
  return files;
}

class TarFormatTest : public ::testing::TestWithParam<TarWriter> {};

TEST_P(TarFormatTest, MembersOffsetsAndBytesAgreeWithLibarchiveAndTarfile) {
  ScopedTempDir tmp;
  const bool long_names = GetParam() != TarWriter::kPythonUstar;
  const std::vector<FileSpec> files = VariedFiles(long_names);
  const std::string tar = tmp / "shard.tar";
  MakeTar(tmp.path(), files, GetParam(), tar);

  absl::StatusOr<TarScan> scan = ScanTar(tar, [](absl::string_view name, uint64_t) {
    return absl::EndsWith(name, ".json") || absl::EndsWith(name, ".cls");
  });
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_TRUE(scan->error.ok()) << scan->error;
  EXPECT_FALSE(scan->compressed);
  ASSERT_EQ(scan->members.size(), files.size());  // directories are not listed

  const std::map<std::string, std::string> libarchive = LibarchiveContents(tar);
  const std::map<std::string, uint64_t> tarfile_offsets = PythonOffsets(tmp, tar);
  for (size_t i = 0; i < files.size(); ++i) {
    const TarMember& m = scan->members[i];
    SCOPED_TRACE(m.name);
    EXPECT_EQ(m.name, files[i].name);  // archive order, long names resolved
    EXPECT_EQ(m.size, files[i].content.size());
    // One pread at the recorded offset gives exactly the member's bytes ...
    EXPECT_EQ(PreadBytes(tar, m.offset, m.size), files[i].content);
    // ... the same bytes libarchive streams, at the offset tarfile computes.
    EXPECT_EQ(libarchive.at(m.name), files[i].content);
    EXPECT_EQ(tarfile_offsets.at(m.name), m.offset);
    const bool wanted = absl::EndsWith(m.name, ".json") || absl::EndsWith(m.name, ".cls");
    EXPECT_EQ(m.has_content, wanted);
    if (wanted) {
      EXPECT_EQ(m.content, files[i].content);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Writers, TarFormatTest,
                         ::testing::Values(TarWriter::kGnuTarGnu, TarWriter::kGnuTarPax,
                                           TarWriter::kPythonGnu, TarWriter::kPythonPax,
                                           TarWriter::kPythonUstar),
                         [](const auto& info) { return shard_testing::TarWriterName(info.param); });

TEST(TarReaderTest, GzipOffsetsIndexTheUncompressedStream) {
  ScopedTempDir tmp;
  const std::vector<FileSpec> files = VariedFiles(true);
  for (TarWriter writer : {TarWriter::kGnuTarPax, TarWriter::kPythonGnu}) {
    SCOPED_TRACE(shard_testing::TarWriterName(writer));
    const std::string tgz = tmp / (std::string(shard_testing::TarWriterName(writer)) + ".tgz");
    MakeTar(tmp.path(), files, writer, tgz, /*gzip=*/true);
    absl::StatusOr<TarScan> scan = ScanTar(tgz);
    ASSERT_TRUE(scan.ok()) << scan.status();
    ASSERT_TRUE(scan->error.ok()) << scan->error;
    EXPECT_TRUE(scan->compressed);
    absl::StatusOr<std::string> stream = ReadUncompressedStream(tgz);
    ASSERT_TRUE(stream.ok()) << stream.status();
    // gzip -dc is an independent decompressor: same stream.
    const std::string plain = tmp / "plain.tar";
    ASSERT_EQ(shard_testing::RunShell("gzip -dc " + shard_testing::ShellQuote(tgz) + " > " +
                                      shard_testing::ShellQuote(plain)),
              0);
    EXPECT_EQ(*stream, shard_testing::ReadWholeFile(plain));
    ASSERT_EQ(scan->members.size(), files.size());
    for (size_t i = 0; i < files.size(); ++i) {
      EXPECT_EQ(stream->substr(scan->members[i].offset, scan->members[i].size), files[i].content)
          << files[i].name;
    }
  }
}

TEST(TarReaderTest, SkipsNonRegularEntries) {
  ScopedTempDir tmp;
  shard_testing::WriteFile(tmp / "src/a.jpg", "AAAA");
  shard_testing::WriteFile(tmp / "src/b.jpg", "BBBB");
  ASSERT_EQ(::symlink("a.jpg", (tmp / "src/link.jpg").c_str()), 0);
  ASSERT_EQ(::link((tmp / "src/a.jpg").c_str(), (tmp / "src/hard.jpg").c_str()), 0);
  std::filesystem::create_directories(tmp / "src/emptydir");
  const std::string tar = tmp / "x.tar";
  ASSERT_EQ(shard_testing::RunShell("tar --format=gnu -cf " + tar + " -C " + tmp / "src" +
                                    " a.jpg emptydir link.jpg hard.jpg b.jpg"),
            0);
  absl::StatusOr<TarScan> scan = ScanTar(tar);
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_TRUE(scan->error.ok()) << scan->error;
  std::vector<std::string> names;
  for (const TarMember& m : scan->members) names.push_back(m.name);
  // GNU tar stores the second name of a hard link as a link entry: not a regular file.
  EXPECT_EQ(names, (std::vector<std::string>{"a.jpg", "b.jpg"}));
}

TEST(TarReaderTest, TruncatedTarKeepsCompleteMembersAndNamesTheBrokenOne) {
  ScopedTempDir tmp;
  const std::vector<FileSpec> files = {{"1.jpg", Payload("1", 3000)},
                                       {"2.jpg", Payload("2", 3000)},
                                       {"3.jpg", Payload("3", 3000)},
                                       {"4.jpg", Payload("4", 3000)}};
  const std::string tar = tmp / "shard-7.tar";
  MakeTar(tmp.path(), files, TarWriter::kGnuTarPax, tar);
  absl::StatusOr<TarScan> full = ScanTar(tar);
  ASSERT_TRUE(full.ok() && full->error.ok());
  const std::string bytes = shard_testing::ReadWholeFile(tar);

  // Cut in the middle of member 3's data.
  const uint64_t cut = full->members[2].offset + 1000;
  shard_testing::WriteFile(tar, bytes.substr(0, cut));
  absl::StatusOr<TarScan> scan = ScanTar(tar);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_FALSE(scan->error.ok());
  EXPECT_NE(scan->error.message().find("shard-7.tar"), std::string::npos) << scan->error;
  EXPECT_NE(scan->error.message().find("3.jpg"), std::string::npos) << scan->error;
  ASSERT_EQ(scan->members.size(), 2u);
  EXPECT_EQ(scan->members[1].name, "2.jpg");

  // Cut in the middle of member 3's header block(s): the break is after member 2.
  shard_testing::WriteFile(tar, bytes.substr(0, full->members[2].offset - 200));
  scan = ScanTar(tar);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_FALSE(scan->error.ok());
  EXPECT_NE(scan->error.message().find("2.jpg"), std::string::npos) << scan->error;
  EXPECT_EQ(scan->members.size(), 2u);

  // Reading the content of a member cut short fails too (libarchive's read path).
  shard_testing::WriteFile(tar, bytes.substr(0, cut));
  scan = ScanTar(tar, [](absl::string_view, uint64_t) { return true; });
  ASSERT_TRUE(scan.ok());
  EXPECT_FALSE(scan->error.ok());
  EXPECT_EQ(scan->members.size(), 2u);
}

TEST(TarReaderTest, TruncatedGzipIsAnErrorNotACrash) {
  ScopedTempDir tmp;
  std::vector<FileSpec> files;
  for (int i = 0; i < 20; ++i) {
    files.push_back({std::to_string(i) + ".jpg", Payload(std::to_string(i), 20000)});
  }
  const std::string tgz = tmp / "s.tar.gz";
  MakeTar(tmp.path(), files, TarWriter::kPythonPax, tgz, true);
  const std::string bytes = shard_testing::ReadWholeFile(tgz);
  // Cut late: members before the cut are listed, the break is reported.
  shard_testing::WriteFile(tgz, bytes.substr(0, bytes.size() / 2));
  absl::StatusOr<TarScan> scan = ScanTar(tgz);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_FALSE(scan->error.ok());
  EXPECT_GT(scan->members.size(), 0u);
  EXPECT_LT(scan->members.size(), files.size());
  EXPECT_NE(scan->error.message().find("s.tar.gz"), std::string::npos);
  EXPECT_FALSE(ReadUncompressedStream(tgz).ok());
  // Cut early (inside libarchive's first read-ahead): the open itself fails, by name.
  shard_testing::WriteFile(tgz, bytes.substr(0, 5000));
  scan = ScanTar(tgz);
  const absl::Status status = scan.ok() ? scan->error : scan.status();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("s.tar.gz"), std::string::npos);
}

TEST(TarReaderTest, GarbageEmptyAndMissingFilesAreErrors) {
  ScopedTempDir tmp;
  shard_testing::WriteFile(tmp / "garbage.tar", Payload("garbage", 5000));
  shard_testing::WriteFile(tmp / "empty.tar", "");
  for (const std::string name : {"garbage.tar", "empty.tar", "missing.tar"}) {
    absl::StatusOr<TarScan> scan = ScanTar(tmp / name);
    const absl::Status status = scan.ok() ? scan->error : scan.status();
    EXPECT_FALSE(status.ok()) << name;
    if (scan.ok()) {
      EXPECT_TRUE(scan->members.empty()) << name;
    }
    EXPECT_NE(status.message().find(name), std::string::npos) << status;
  }
  // A corrupted header checksum in the middle: members before it survive.
  const std::vector<FileSpec> files = {{"a.jpg", Payload("a", 700)}, {"b.jpg", Payload("b", 700)}};
  MakeTar(tmp.path(), files, TarWriter::kGnuTarGnu, tmp / "flip.tar");
  std::string bytes = shard_testing::ReadWholeFile(tmp / "flip.tar");
  bytes[1536 + 10] ^= 0x55;  // inside b.jpg's header name field (a.jpg: header + 2 blocks)
  shard_testing::WriteFile(tmp / "flip.tar", bytes);
  absl::StatusOr<TarScan> scan = ScanTar(tmp / "flip.tar");
  ASSERT_TRUE(scan.ok());
  EXPECT_FALSE(scan->error.ok());
  ASSERT_EQ(scan->members.size(), 1u);
  EXPECT_EQ(scan->members[0].name, "a.jpg");
}

}  // namespace
}  // namespace shardcast

// Test helpers for the shard tests: temp dirs, files with known payloads, and tar shards
// written by independent writers (GNU tar, Python's tarfile) in several formats.
#ifndef SHARDCAST_TESTS_COMMON_SHARD_TEST_UTIL_H_
#define SHARDCAST_TESTS_COMMON_SHARD_TEST_UTIL_H_

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

namespace shardcast::shard_testing {
namespace fs = std::filesystem;

// Temp dirs, reading files and shell commands: the shared test support.
using ScopedTempDir = testing_util::TempDir;
using testing_util::ReadWholeFile;
using testing_util::RunShell;
using testing_util::ShellQuote;

inline void WriteFile(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// Deterministic, size-varied, binary payload (NULs and 0xff included) for a name.
inline std::string Payload(const std::string& name, size_t size) {
  std::seed_seq seq(name.begin(), name.end());
  std::mt19937 rng(seq);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

struct FileSpec {
  std::string name;     // path inside the tar
  std::string content;  // bytes
};

enum class TarWriter {
  kGnuTarGnu,    // tar --format=gnu  (././@LongLink for long names)
  kGnuTarPax,    // tar --format=pax  (PAX extended headers)
  kPythonGnu,    // tarfile.GNU_FORMAT
  kPythonPax,    // tarfile.PAX_FORMAT
  kPythonUstar,  // tarfile.USTAR_FORMAT (names must fit 100+155)
};

inline const char* TarWriterName(TarWriter w) {
  switch (w) {
    case TarWriter::kGnuTarGnu:
      return "GnuTarGnu";
    case TarWriter::kGnuTarPax:
      return "GnuTarPax";
    case TarWriter::kPythonGnu:
      return "PythonGnu";
    case TarWriter::kPythonPax:
      return "PythonPax";
    case TarWriter::kPythonUstar:
      return "PythonUstar";
  }
  return "?";
}

inline std::string PythonBinary() {
#ifdef REFERENCE_PYTHON
  if (std::string(REFERENCE_PYTHON).size() > 0) return REFERENCE_PYTHON;
#endif
  return "python3";
}

// Writes `files` (in this order) into a tar at `out` with `writer`; gzip-compressed when
// `gzip`. Staging happens in `scratch`. Extra entries (dirs) come from the file paths.
inline void MakeTar(const std::string& scratch, const std::vector<FileSpec>& files,
                    TarWriter writer, const std::string& out, bool gzip = false) {
  static int counter = 0;
  const std::string stage = scratch + "/stage" + std::to_string(counter++);
  fs::create_directories(stage);
  std::string list;
  for (const FileSpec& f : files) {
    WriteFile(stage + "/" + f.name, f.content);
    list += f.name + "\n";
  }
  const std::string list_path = stage + ".list";
  WriteFile(list_path, list);
  std::string cmd;
  switch (writer) {
    case TarWriter::kGnuTarGnu:
    case TarWriter::kGnuTarPax:
      cmd = "tar --format=" + std::string(writer == TarWriter::kGnuTarGnu ? "gnu" : "pax") +
            (gzip ? " -z" : "") + " --no-recursion -cf " + ShellQuote(out) + " -C " +
            ShellQuote(stage) + " -T " + ShellQuote(list_path);
      break;
    default: {
      const char* fmt = writer == TarWriter::kPythonGnu   ? "GNU_FORMAT"
                        : writer == TarWriter::kPythonPax ? "PAX_FORMAT"
                                                          : "USTAR_FORMAT";
      const std::string py =
          "import sys, tarfile, os\n"
          "stage, lst, out, gz = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == '1'\n"
          "names = open(lst, encoding='utf-8').read().splitlines()\n"
          "with tarfile.open(out, 'w:gz' if gz else 'w', format=tarfile." +
          std::string(fmt) +
          ") as t:\n"
          "    for n in names:\n"
          "        t.add(os.path.join(stage, n), arcname=n, recursive=False)\n";
      WriteFile(stage + ".py", py);
      cmd = PythonBinary() + " " + ShellQuote(stage + ".py") + " " + ShellQuote(stage) + " " +
            ShellQuote(list_path) + " " + ShellQuote(out) + (gzip ? " 1" : " 0");
    }
  }
  ASSERT_EQ(RunShell(cmd), 0) << cmd;
}

// Sets a file's mtime (the index keys its cache on shard names, sizes and mtimes).
inline void SetMtime(const std::string& path, int64_t seconds, int64_t nanos = 0) {
  struct timespec times[2];
  times[0].tv_sec = seconds;
  times[0].tv_nsec = nanos;
  times[1] = times[0];
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

}  // namespace shardcast::shard_testing

#endif  // SHARDCAST_TESTS_COMMON_SHARD_TEST_UTIL_H_

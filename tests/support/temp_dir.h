// A scratch directory for tests and benchmarks, removed with everything in it. No gtest
// dependency, so benchmarks can use it too.
#ifndef SHARDCAST_TESTS_SUPPORT_TEMP_DIR_H_
#define SHARDCAST_TESTS_SUPPORT_TEMP_DIR_H_

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace shardcast::testing_util {

// A fresh directory under $TEST_TMPDIR (set by test runners) or the system temp dir.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "shardcast_test") {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string tmpl = (base != nullptr && *base != '\0')
                           ? std::string(base)
                           : std::filesystem::temp_directory_path().string();
    tmpl += "/" + prefix + "_XXXXXX";
    // Nothing a test does can work without its directory.
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_SUPPORT_TEMP_DIR_H_

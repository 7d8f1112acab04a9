// tools/hostile_s3.py as a child process: an S3 store (path style) serving a directory,
// whose faults a test arms by rewriting a JSON file that the store reads on every
// request (see the script's docstring for the keys). For the remote indexing tests
// (issue 35): listings that never end or repeat a key, GETs that fail, trickles, ETags
// that are not MD5s. No gtest dependency.
#ifndef SHARDCAST_TESTS_SUPPORT_HOSTILE_STORE_H_
#define SHARDCAST_TESTS_SUPPORT_HOSTILE_STORE_H_

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

namespace shardcast::testing_util {

class HostileStore {
 public:
  // Serves the files under `dir` as bucket `bucket`'s objects.
  static absl::StatusOr<std::unique_ptr<HostileStore>> Start(const std::string& dir,
                                                             const std::string& bucket) {
    const std::string python = "/usr/bin/python3";  // Debian's, as the script's #! says
    const std::string script = std::string(SHARDCAST_SOURCE_DIR) + "/tools/hostile_s3.py";
    if (access(python.c_str(), X_OK) != 0 || access(script.c_str(), R_OK) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("need ", python, " and ", script, " for the hostile store"));
    }
    auto store = std::unique_ptr<HostileStore>(new HostileStore());
    store->dir_ = std::make_unique<TempDir>("shardcast_hostile_s3");
    const std::string port_file = *store->dir_ / "port";
    store->faults_ = *store->dir_ / "faults.json";
    store->log_ = *store->dir_ / "log";
    store->process_ = std::make_unique<ChildProcess>();
    if (absl::Status s =
            store->process_->Start({python, "-u", script, "--dir", dir, "--bucket", bucket,
                                    "--port-file", port_file, "--faults", store->faults_},
                                   store->log_ + ".out", store->log_ + ".err");
        !s.ok()) {
      return s;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!std::filesystem::exists(port_file)) {
      if (store->process_->WaitFor(std::chrono::milliseconds(0)).has_value() ||
          std::chrono::steady_clock::now() > deadline) {
        return absl::UnavailableError(absl::StrCat("tools/hostile_s3.py did not start: ",
                                                   ReadWholeFile(store->log_ + ".err")));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    store->port_ = std::stoi(ReadWholeFile(port_file));
    return store;
  }

  ~HostileStore() { Stop(); }

  // Stops the store: its port refuses connections from now on.
  void Stop() { process_.reset(); }

  std::string endpoint() const { return absl::StrCat("http://127.0.0.1:", port_); }

  // Arms `json` (an object, "{}" = no fault) for the requests from now on.
  void SetFaults(const std::string& json) const {
    const std::string tmp = faults_ + ".tmp";
    std::ofstream(tmp, std::ios::trunc) << json;
    std::rename(tmp.c_str(), faults_.c_str());
  }

  std::string log() const { return ReadWholeFile(log_ + ".err"); }

 private:
  HostileStore() = default;
  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<ChildProcess> process_;
  std::string faults_;
  std::string log_;
  int port_ = 0;
};

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_SUPPORT_HOSTILE_STORE_H_

// Test fixtures for client tests: a synthetic shard directory made with the pack
// library, and the real shardcast-server binary run as a child process on loopback.
#ifndef SHARDCAST_TESTS_CLIENT_SERVER_PROCESS_H_
#define SHARDCAST_TESTS_CLIENT_SERVER_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tools/pack/synthetic_dataset.h"

namespace shardcast::testing_util {

// A fresh directory under the test temp dir, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "shardcast-client-XXXXXX");
    const char* base = std::getenv("TEST_TMPDIR");
    if (base != nullptr && *base != '\0') tmpl = std::string(base) + "/shardcast-client-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    const char* made = mkdtemp(buf.data());
    path_ = made != nullptr ? made : "";
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes a learnable synthetic dataset (JPEG + json + cls) to `dir`.
inline absl::Status MakeSyntheticShards(const std::string& dir, int64_t num_samples,
                                        int num_classes, int size, int64_t per_shard) {
  pack::SyntheticOptions options;
  options.num_samples = num_samples;
  options.num_classes = num_classes;
  options.width = size;
  options.height = size;
  options.per_shard = per_shard;
  options.seed = 7;
  options.threads = 2;
  absl::StatusOr<pack::PackSummary> summary = pack::WriteSyntheticDataset(dir, options);
  return summary.status();
}

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string BinaryPath(const std::string& relative) {
  return std::string(SHARDCAST_BINARY_DIR) + "/" + relative;
}

// Runs a program as a child process with stdout and stderr redirected to files.
class ChildProcess {
 public:
  ChildProcess() = default;
  // A child still running is asked to stop (SIGTERM: a launcher forwards it to the
  // processes it started), then killed.
  ~ChildProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    if (!WaitFor(std::chrono::seconds(5)).has_value()) Kill(SIGKILL);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  absl::Status Start(const std::vector<std::string>& argv, const std::string& stdout_path,
                     const std::string& stderr_path) {
    stdout_path_ = stdout_path;
    stderr_path_ = stderr_path;
    // Everything the child needs is prepared before fork(): the parent has gRPC and
    // torch threads, so the child only makes async-signal-safe calls.
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int out = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0 || err < 0) {
      if (out >= 0) close(out);
      if (err >= 0) close(err);
      return absl::InternalError(absl::StrCat("cannot create ", stdout_path, " / ", stderr_path));
    }
    pid_t pid = fork();
    if (pid == 0) {
      dup2(out, 1);  // dup2'ed descriptors do not inherit O_CLOEXEC
      dup2(err, 2);
      execv(args[0], args.data());
      _exit(127);
    }
    close(out);
    close(err);
    if (pid < 0) return absl::InternalError("fork failed");
    pid_ = pid;
    return absl::OkStatus();
  }

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // Sends `sig` and reaps the child; returns its wait status (or -1 if none ran).
  int Kill(int sig) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    return Wait();
  }

  // Waits for the child to exit; returns the raw wait status.
  int Wait() {
    if (pid_ <= 0) return -1;
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  // Polls for exit up to `timeout`; nullopt if still running.
  std::optional<int> WaitFor(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return -1;
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (true) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return status;
      }
      if (std::chrono::steady_clock::now() >= until) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  std::string Stdout() const { return ReadWholeFile(stdout_path_); }
  std::string Stderr() const { return ReadWholeFile(stderr_path_); }

 private:
  pid_t pid_ = -1;
  std::string stdout_path_;
  std::string stderr_path_;
};

// The real shardcast-server binary, serving `shards_dir` on 127.0.0.1:`port`
// (0 = a free port, read back from what the server prints on stdout).
class ServerProcess {
 public:
  explicit ServerProcess(std::string shards_dir, std::string log_dir)
      : shards_dir_(std::move(shards_dir)), log_dir_(std::move(log_dir)) {}

  absl::Status Start(int port = 0, const std::vector<std::string>& extra_flags = {}) {
    ++starts_;
    std::vector<std::string> argv = {BinaryPath("server/shardcast-server"), "--shards", shards_dir_,
                                     "--listen", absl::StrCat("127.0.0.1:", port)};
    argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
    const std::string out = absl::StrCat(log_dir_, "/server-", starts_, ".out");
    const std::string err = absl::StrCat(log_dir_, "/server-", starts_, ".err");
    absl::Status started = child_.Start(argv, out, err);
    if (!started.ok()) return started;
    // The server prints the address it bound once it listens.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < until) {
      std::optional<int> bound = ParsePort(child_.Stdout());
      if (bound) {
        port_ = *bound;
        return absl::OkStatus();
      }
      if (child_.WaitFor(std::chrono::milliseconds(20)).has_value()) {
        return absl::InternalError(
            absl::StrCat("shardcast-server exited before listening: ", child_.Stderr()));
      }
    }
    child_.Kill(SIGKILL);
    return absl::DeadlineExceededError(
        absl::StrCat("shardcast-server printed no port within 60 s; stderr: ", child_.Stderr()));
  }

  int Kill(int sig) { return child_.Kill(sig); }
  int port() const { return port_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  std::string Stderr() const { return child_.Stderr(); }

 private:
  // The port from the server's stdout ("shardcast-server listening on HOST:PORT"): the
  // digits after the last ':' of the first complete line that ends in ":PORT", or a
  // line that is just a number.
  static std::optional<int> ParsePort(const std::string& text) {
    size_t start = 0;
    while (true) {
      const size_t end = text.find('\n', start);
      if (end == std::string::npos) return std::nullopt;  // no complete line yet
      const std::string line = text.substr(start, end - start);
      start = end + 1;
      size_t digits = line.size();
      while (digits > 0 && std::isdigit(static_cast<unsigned char>(line[digits - 1]))) --digits;
      const size_t count = line.size() - digits;
      if (count < 1 || count > 5) continue;
      if (digits == 0 || line[digits - 1] == ':') return std::stoi(line.substr(digits));
    }
  }

  std::string shards_dir_;
  std::string log_dir_;
  ChildProcess child_;
  int port_ = 0;
  int starts_ = 0;
};

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_CLIENT_SERVER_PROCESS_H_

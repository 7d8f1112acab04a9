// The real shardcast-server binary as a child process of a test or benchmark (the
// synthetic shard directories it serves: synthetic_shards.h). No gtest dependency.
#ifndef SHARDCAST_TESTS_SUPPORT_SERVER_PROCESS_H_
#define SHARDCAST_TESTS_SUPPORT_SERVER_PROCESS_H_

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tests/support/child_process.h"
#include "tests/support/synthetic_shards.h"  // MakeSyntheticShards, for its users

namespace shardcast::testing_util {

// The address of shardcast-server's first stdout line, "shardcast-server listening on
// ADDRESS" (HOST:PORT, or unix:PATH); nullopt for any other line.
inline std::optional<std::string> ListeningAddress(const std::string& line) {
  constexpr absl::string_view kPrefix = "shardcast-server listening on ";
  if (!absl::StartsWith(line, kPrefix) || line.size() == kPrefix.size()) return std::nullopt;
  return line.substr(kPrefix.size());
}

// The port of such a line's HOST:PORT; nullopt for a unix: address or any other line.
inline std::optional<int> ListeningPort(const std::string& line) {
  const std::optional<std::string> address = ListeningAddress(line);
  int port = 0;
  if (!address.has_value() || absl::StartsWith(*address, "unix:")) return std::nullopt;
  const size_t colon = address->rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(address->substr(colon + 1), &port)) {
    return std::nullopt;
  }
  return port;
}

// shardcast-server run with `args` (the binary is prepended), stdout to `stdout_path`,
// stderr to `stderr_path` ("" = this process's stderr). Start() returns once the server
// printed its first stdout line: it does so once it listens, so the port is known.
class ServerChild {
 public:
  ServerChild() = default;
  // A command the server is run under, e.g. {"prlimit", "--nofile=64:64", "--"}.
  explicit ServerChild(std::vector<std::string> launcher) : launcher_(std::move(launcher)) {}

  absl::Status Start(std::vector<std::string> args, const std::string& stdout_path,
                     const std::string& stderr_path,
                     std::chrono::seconds timeout = std::chrono::seconds(60)) {
    port_ = 0;
    unix_address_.clear();
    first_line_.clear();
    exit_status_.reset();
    args.insert(args.begin(), std::string(SHARDCAST_BINARY_DIR) + "/server/shardcast-server");
    args.insert(args.begin(), launcher_.begin(), launcher_.end());
    absl::Status started = child_.Start(args, stdout_path, stderr_path);
    if (!started.ok()) return started;
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const std::string out = child_.Stdout();
      const size_t newline = out.find('\n');
      if (newline != std::string::npos || exit_status_.has_value()) {
        first_line_ = out.substr(0, newline);
        break;
      }
      if (std::chrono::steady_clock::now() >= until) {
        Kill(SIGKILL);
        return absl::DeadlineExceededError(absl::StrCat("shardcast-server printed no line within ",
                                                        timeout.count(),
                                                        " s; stderr: ", child_.Stderr()));
      }
      exit_status_ = child_.WaitFor(std::chrono::milliseconds(20));
    }
    if (std::optional<std::string> address = ListeningAddress(first_line_)) {
      if (absl::StartsWith(*address, "unix:")) {
        unix_address_ = *address;
        return absl::OkStatus();
      }
      if (std::optional<int> port = ListeningPort(first_line_)) {
        port_ = *port;
        return absl::OkStatus();
      }
    }
    return absl::InternalError(
        absl::StrCat(exit_status_.has_value() ? "shardcast-server exited before listening"
                                              : "shardcast-server printed no port",
                     ": first stdout line '", first_line_, "'; stderr: ", child_.Stderr()));
  }

  // Sends `sig` and reaps the server; returns its wait status (-1 if it was not running).
  int Kill(int sig) {
    if (exit_status_.has_value()) return -1;
    exit_status_ = child_.Kill(sig);
    return *exit_status_;
  }

  // Waits up to `timeout` for the server to exit; returns its wait status, or nullopt if
  // it is still running.
  std::optional<int> WaitFor(std::chrono::milliseconds timeout) {
    if (!exit_status_.has_value()) exit_status_ = child_.WaitFor(timeout);
    return exit_status_;
  }

  // The TCP port; 0 for a server on a unix: address.
  int port() const { return port_; }
  pid_t pid() const { return child_.pid(); }
  const std::string& first_line() const { return first_line_; }
  // What a client connects to: its unix:PATH, or 127.0.0.1 and its port.
  std::string target() const {
    return unix_address_.empty() ? absl::StrCat("127.0.0.1:", port_) : unix_address_;
  }
  std::string Stderr() const { return child_.Stderr(); }

 private:
  std::vector<std::string> launcher_;
  ChildProcess child_;
  int port_ = 0;
  std::string unix_address_;  // unix:PATH when it listens on one
  std::string first_line_;
  std::optional<int> exit_status_;  // once reaped
};

// The shardcast-server binary serving `shards_dir` on 127.0.0.1:`port` (0 = a free
// port), restartable; each start logs to server-N.out / server-N.err in `log_dir`.
class ServerProcess {
 public:
  explicit ServerProcess(std::string shards_dir, std::string log_dir)
      : shards_dir_(std::move(shards_dir)), log_dir_(std::move(log_dir)) {}

  absl::Status Start(int port = 0, const std::vector<std::string>& extra_flags = {}) {
    ++starts_;
    std::vector<std::string> args = {"--shards", shards_dir_, "--listen",
                                     absl::StrCat("127.0.0.1:", port)};
    args.insert(args.end(), extra_flags.begin(), extra_flags.end());
    return server_.Start(std::move(args), absl::StrCat(log_dir_, "/server-", starts_, ".out"),
                         absl::StrCat(log_dir_, "/server-", starts_, ".err"));
  }

  int Kill(int sig) { return server_.Kill(sig); }
  // For signals that do not end it (SIGSTOP/SIGCONT: a stalled server).
  pid_t pid() const { return server_.pid(); }
  int port() const { return server_.port(); }
  std::string address() const { return server_.target(); }
  std::string Stderr() const { return server_.Stderr(); }

 private:
  std::string shards_dir_;
  std::string log_dir_;
  ServerChild server_;
  int starts_ = 0;
};

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_SUPPORT_SERVER_PROCESS_H_

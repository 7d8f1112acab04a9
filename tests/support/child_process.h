// Running programs from tests and benchmarks: shell commands, and a child process with
// its stdout and stderr in files. No gtest dependency, so benchmarks can use it too.
#ifndef SHARDCAST_TESTS_SUPPORT_CHILD_PROCESS_H_
#define SHARDCAST_TESTS_SUPPORT_CHILD_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardcast::testing_util {

// The whole file as bytes ("" if it cannot be read).
inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

#ifdef SHARDCAST_BINARY_DIR
// A path inside the build tree, e.g. "server/shardcast-server".
inline std::string BinaryPath(const std::string& relative) {
  return std::string(SHARDCAST_BINARY_DIR) + "/" + relative;
}
#endif

// `s` single-quoted for /bin/sh.
inline std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// `argv` as one /bin/sh command line, every word quoted.
inline std::string ShellCommand(const std::vector<std::string>& argv) {
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "" : " ") + ShellQuote(a);
  return command;
}

// Runs `command` with /bin/sh; its exit code, or -1 if it did not exit normally.
inline int RunShell(const std::string& command) {
  const int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// What a command printed on stdout, and its exit code (-1: it did not exit normally).
struct CommandOutput {
  int exit_code = -1;
  std::string out;
};

// Runs `command` with /bin/sh and captures its stdout (redirect stderr in `command`).
inline CommandOutput RunShellCapture(const std::string& command) {
  CommandOutput result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof(buf), pipe)) > 0) result.out.append(buf, got);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Runs a program as a child process with stdout and stderr redirected to files
// (stderr inherited from this process when its path is empty).
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
    const int err = stderr_path.empty()
                        ? -2
                        : open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0 || err == -1) {
      if (out >= 0) close(out);
      if (err >= 0) close(err);
      return absl::InternalError(absl::StrCat("cannot create ", stdout_path, " / ", stderr_path));
    }
    pid_t pid = fork();
    if (pid == 0) {
      dup2(out, 1);  // dup2'ed descriptors do not inherit O_CLOEXEC
      if (err >= 0) dup2(err, 2);
      execv(args[0], args.data());
      _exit(127);
    }
    close(out);
    if (err >= 0) close(err);
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

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_SUPPORT_CHILD_PROCESS_H_

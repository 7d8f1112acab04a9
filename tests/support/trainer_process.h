// The shardcast-train binary run by a test as one launcher process: its flags, its
// stdout and stderr in files, its end awaited up to a limit. The local ranks it starts
// (--nproc-per-node) meet over Gloo on loopback. The server it reads from:
// server_process.h. No gtest dependency.
#ifndef SHARDCAST_TESTS_SUPPORT_TRAINER_PROCESS_H_
#define SHARDCAST_TESTS_SUPPORT_TRAINER_PROCESS_H_

#include <sys/wait.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tests/support/child_process.h"

namespace shardcast::testing_util {

// The files of one run in `dir`, named by its `tag`: TAG.out, TAG.err, and each rank's
// metrics TAG.RANK.jsonl.
struct TrainerFiles {
  std::string dir;
  std::string tag;

  std::string out_path() const { return absl::StrCat(dir, "/", tag, ".out"); }
  std::string err_path() const { return absl::StrCat(dir, "/", tag, ".err"); }
  // The value of --metrics: the trainer puts each rank's number in place of {rank}.
  std::string metrics_pattern() const { return absl::StrCat(dir, "/", tag, ".{rank}.jsonl"); }
  std::string metrics_path(int rank) const {
    return absl::StrCat(dir, "/", tag, ".", rank, ".jsonl");
  }
};

// How one run of the launcher ended.
struct TrainerExit {
  absl::Status started;            // not OK: it did not start
  std::optional<int> wait_status;  // nullopt: still running at the limit

  // The exit code; -1 when it did not start, did not end within the limit, or ended by
  // a signal.
  int code() const {
    if (!wait_status.has_value() || !WIFEXITED(*wait_status)) return -1;
    return WEXITSTATUS(*wait_status);
  }
};

// Runs shardcast-train with `flags` (the binary is prepended), stdout and stderr in
// files, and waits for its end up to `limit`. One still running then is stopped
// (SIGTERM, which the launcher forwards to its ranks, then SIGKILL).
inline TrainerExit RunTrainer(const std::vector<std::string>& flags, const std::string& out_path,
                              const std::string& err_path, std::chrono::seconds limit) {
  std::vector<std::string> argv = {BinaryPath("client/shardcast-train")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  ChildProcess launcher;
  TrainerExit exit;
  exit.started = launcher.Start(argv, out_path, err_path);
  if (exit.started.ok()) exit.wait_status = launcher.WaitFor(limit);
  return exit;
}

// Runs shardcast-train with `flags` as RunTrainer does, on `world` ranks that the
// launcher starts on this machine (--nproc-per-node), writing to `files`. The ranks wait
// up to 60 s for each other: several start at once on a machine's few shared cores.
inline TrainerExit RunLocalRanks(int world, std::vector<std::string> flags,
                                 const TrainerFiles& files, std::chrono::seconds limit) {
  flags.insert(flags.end(), {"--metrics", files.metrics_pattern(), "--nproc-per-node",
                             absl::StrCat(world), "--rendezvous-timeout", "60s"});
  return RunTrainer(flags, files.out_path(), files.err_path(), limit);
}

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_SUPPORT_TRAINER_PROCESS_H_

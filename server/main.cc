// shardcast-server: indexes a directory of WebDataset shards and streams
// fixed-count batches to registered trainer ranks over gRPC.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/log.h"
#include "server/shardcast_server.h"
#include "server/version.h"

ABSL_FLAG(std::string, shards, "", "Directory holding the .tar/.tar.gz shards (required).");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "Address to listen on, HOST:PORT; port 0 picks a free port (printed on stdout).");
ABSL_FLAG(int32_t, batch_size, 32, "Default batch size of a job.");
ABSL_FLAG(std::string, split, "shard",
          "Default split: 'shard' (webdataset split_by_node semantics) or 'sample' "
          "(exactly-once per-epoch permutation).");
ABSL_FLAG(std::string, remainder, "drop",
          "Default remainder: 'drop' (n = N // (B*W)) or 'pad' (n = ceil, padding flagged).");
ABSL_FLAG(int32_t, workers, 1, "Default virtual DataLoader workers per rank (split shard).");
ABSL_FLAG(uint64_t, seed, 0, "Default plan seed (shuffles, augmentation).");
ABSL_FLAG(bool, shuffle_shards, false, "Default: shuffle the shard order per epoch.");
ABSL_FLAG(int32_t, shuffle_buffer, 0, "Default per-worker sample shuffle buffer (split shard).");
ABSL_FLAG(int32_t, block_size, 0,
          "Default shards per shuffle block (split sample); 0 = one global permutation.");
ABSL_FLAG(std::string, transform, "center",
          "Default transform: 'center' (Resize(resize) + CenterCrop(crop)) or 'random' "
          "(RandomResizedCrop(crop) + horizontal flip).");
ABSL_FLAG(int32_t, resize, 256, "Default short-side resize of the center transform.");
ABSL_FLAG(int32_t, crop, 224, "Default output size: images are 3 x crop x crop uint8.");
ABSL_FLAG(int32_t, decode_threads, 0, "Decode pool threads; 0 = all cores.");
ABSL_FLAG(int32_t, prefetch, 4,
          "Batches assembled ahead of each stream's client (per-stream memory bound).");
ABSL_FLAG(std::string, index_cache_dir, "",
          "Directory for the dataset index cache (never inside --shards); empty = no cache.");
ABSL_FLAG(std::string, label_field, "label",
          "Field of a sample's .json holding its integer label (when it has no .cls).");
ABSL_FLAG(int64_t, max_message_size, 512ll << 20,
          "Largest Batch message in bytes; jobs whose batches exceed it are refused.");
ABSL_FLAG(absl::Duration, grace_period, absl::Seconds(10),
          "On SIGTERM/SIGINT: how long open streams may go on before they are cancelled.");
ABSL_FLAG(std::string, log_level, "info", "Lowest level logged: 'info', 'warning' or 'error'.");
ABSL_FLAG(bool, bench_only_resend_first_batch, false,
          "BENCHMARK ONLY: every stream re-sends its first batch (measures the wire "
          "without decode; clients receive wrong data). Never use for training.");

namespace {

using shardcast::server::LogError;
using shardcast::server::LogInfo;

// Our flags are spelled with dashes (--batch-size); absl names them with
// underscores. Rewrites "--a-b[=v]" to "--a_b[=v]" before absl parses argv.
std::vector<char*> NormalizeFlagNames(int argc, char** argv, std::vector<std::string>* storage) {
  storage->reserve(argc);
  std::vector<char*> out;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (i > 0 && absl::StartsWith(arg, "--") && arg.size() > 2) {
      const size_t eq = arg.find('=');
      const size_t name_end = eq == std::string::npos ? arg.size() : eq;
      std::replace(arg.begin() + 2, arg.begin() + name_end, '-', '_');
    }
    storage->push_back(std::move(arg));
  }
  for (std::string& s : *storage) out.push_back(s.data());
  return out;
}

// --help: every flag of this program with its default, in dashed spelling.
void PrintHelp() {
  std::printf(
      "usage: shardcast-server --shards DIR [--listen HOST:PORT] [flags]\n\n"
      "Serves fixed-count batches of a WebDataset shard directory over gRPC\n"
      "(service shardcast.v1.Shardcast, grpc.health.v1, server reflection).\n"
      "Job flags are defaults for what a RegisterRequest leaves unset.\n"
      "SIGTERM/SIGINT drain: health NOT_SERVING, streams finish or are cancelled\n"
      "after --grace-period, exit 0.\n\nflags:\n");
  std::vector<std::pair<std::string, const absl::CommandLineFlag*>> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::StrContains(flag->Filename(), "server/main.cc")) {
      flags.emplace_back(absl::StrReplaceAll(name, {{"_", "-"}}), flag);
    }
  }
  std::sort(flags.begin(), flags.end());
  for (const auto& [name, flag] : flags) {
    std::printf("  --%s (default: %s)\n      %s\n", name.c_str(),
                flag->DefaultValue().empty() ? "\"\"" : flag->DefaultValue().c_str(),
                flag->Help().c_str());
  }
  std::printf(
      "  --help\n      Print this help and exit.\n  --version\n      Print the version "
      "and exit.\n");
}

bool ParseOptions(shardcast::server::ServerOptions* options, std::string* error) {
  using shardcast::Remainder;
  using shardcast::Split;
  using shardcast::TransformMode;
  options->shards_dir = absl::GetFlag(FLAGS_shards);
  if (options->shards_dir.empty()) {
    *error = "--shards DIR is required";
    return false;
  }
  options->listen_address = absl::GetFlag(FLAGS_listen);
  shardcast::JobConfig& d = options->defaults;
  d.plan.batch_size = absl::GetFlag(FLAGS_batch_size);
  const std::string split = absl::GetFlag(FLAGS_split);
  if (split == "shard") {
    d.plan.split = Split::kShard;
  } else if (split == "sample") {
    d.plan.split = Split::kSample;
  } else {
    *error = absl::StrCat("--split must be 'shard' or 'sample', got '", split, "'");
    return false;
  }
  const std::string remainder = absl::GetFlag(FLAGS_remainder);
  if (remainder == "drop") {
    d.plan.remainder = Remainder::kDrop;
  } else if (remainder == "pad") {
    d.plan.remainder = Remainder::kPad;
  } else {
    *error = absl::StrCat("--remainder must be 'drop' or 'pad', got '", remainder, "'");
    return false;
  }
  d.plan.workers = absl::GetFlag(FLAGS_workers);
  d.plan.seed = absl::GetFlag(FLAGS_seed);
  d.plan.shuffle_shards = absl::GetFlag(FLAGS_shuffle_shards);
  d.plan.shuffle_buffer = absl::GetFlag(FLAGS_shuffle_buffer);
  d.plan.block_size = absl::GetFlag(FLAGS_block_size);
  const std::string transform = absl::GetFlag(FLAGS_transform);
  if (transform == "center") {
    d.transform.mode = TransformMode::kCenter;
  } else if (transform == "random") {
    d.transform.mode = TransformMode::kRandom;
  } else {
    *error = absl::StrCat("--transform must be 'center' or 'random', got '", transform, "'");
    return false;
  }
  d.transform.resize = absl::GetFlag(FLAGS_resize);
  d.transform.crop = absl::GetFlag(FLAGS_crop);
  if (d.plan.batch_size < 1 || d.plan.workers < 1 || d.transform.crop < 1 || d.transform.resize < 1 || d.plan.shuffle_buffer < 0 ||
      d.plan.block_size < 0) {
    *error =
        "--batch-size, --workers, --crop and --resize must be >= 1; "
        "--shuffle-buffer and --block-size >= 0";
    return false;
  }
  options->decode_threads = absl::GetFlag(FLAGS_decode_threads);
  options->prefetch = absl::GetFlag(FLAGS_prefetch);
  if (options->prefetch < 1 || options->decode_threads < 0) {
    *error = "--prefetch must be >= 1 and --decode-threads >= 0";
    return false;
  }
  options->index_cache_dir = absl::GetFlag(FLAGS_index_cache_dir);
  options->label_field = absl::GetFlag(FLAGS_label_field);
  options->max_message_bytes = absl::GetFlag(FLAGS_max_message_size);
  if (options->max_message_bytes < (1 << 20)) {
    *error = "--max-message-size must be at least 1048576";
    return false;
  }
  options->grace_period = absl::GetFlag(FLAGS_grace_period);
  if (options->grace_period < absl::ZeroDuration()) {
    *error = "--grace-period must be >= 0";
    return false;
  }
  options->bench_only_resend_first_batch = absl::GetFlag(FLAGS_bench_only_resend_first_batch);
  const std::string level = absl::GetFlag(FLAGS_log_level);
  if (level == "info") {
    shardcast::server::SetMinLogLevel(shardcast::server::LogLevel::kInfo);
  } else if (level == "warning") {
    shardcast::server::SetMinLogLevel(shardcast::server::LogLevel::kWarning);
  } else if (level == "error") {
    shardcast::server::SetMinLogLevel(shardcast::server::LogLevel::kError);
  } else {
    *error = absl::StrCat("--log-level must be info, warning or error, got '", level, "'");
    return false;
  }
  return true;
}

// HOST part of HOST:PORT (brackets of an IPv6 address kept).
std::string ListenHost(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

int main(int argc, char** argv) {
  // Block the stop signals in every thread (gRPC's included, created later); one
  // thread takes them with sigwait, so no work happens in a signal handler.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      PrintHelp();
      return 0;
    }
    if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("shardcast-server %s\n", shardcast::server::kServerVersion);
      return 0;
    }
  }
  absl::SetProgramUsageMessage(
      "shardcast-server --shards DIR [--listen HOST:PORT] [flags]  (--help lists every flag)");
  std::vector<std::string> storage;
  std::vector<char*> args = NormalizeFlagNames(argc, argv, &storage);
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  if (positional.size() > 1) {
    std::fprintf(stderr, "shardcast-server: unexpected argument '%s' (see --help)\n",
                 positional[1]);
    return 2;
  }
  shardcast::server::ServerOptions options;
  std::string error;
  if (!ParseOptions(&options, &error)) {
    std::fprintf(stderr, "shardcast-server: %s (see --help)\n", error.c_str());
    return 2;
  }

  shardcast::server::ShardcastServer server(options);
  absl::Status started = server.Start();
  if (!started.ok()) {
    LogError("server", started.ToString());
    return 1;
  }
  std::printf("shardcast-server listening on %s:%d\n", ListenHost(options.listen_address).c_str(),
              server.port());
  std::fflush(stdout);

  absl::Notification stop;
  std::atomic<int> received{0};
  std::thread signal_waiter([&stop, &received, stop_signals] {
    int signal_number = 0;
    if (sigwait(&stop_signals, &signal_number) != 0) return;
    received.store(signal_number);
    stop.Notify();
    // A second signal while draining means "now".
    if (sigwait(&stop_signals, &signal_number) != 0) return;
    LogError("server", absl::StrCat("second signal (", strsignal(signal_number),
                                    "): exiting without draining"));
    std::_Exit(1);
  });
  signal_waiter.detach();

  while (!stop.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
    std::optional<absl::Status> ready = server.ready_status();
    if (ready.has_value() && !ready->ok()) {
      LogError("server", absl::StrCat("exiting: ", ready->ToString()));
      server.Shutdown();
      return 1;
    }
  }
  LogInfo("server", absl::StrCat("received ", strsignal(received.load()), "; draining"));
  server.Drain();
  LogInfo("server", "exit 0");
  return 0;
}

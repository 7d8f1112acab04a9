// Server memory under clients that open streams and never read (issue 9): a real
// shardcast-server process, its idle RSS, then N jobs each opening one stream that is
// never read. Two configurations in the same run: the old behaviour (no budget: a huge
// --max-batch-memory and no --stream-idle-timeout, so every stream fills its window)
// and a small budget with an idle timeout. Prints one table.
//   memory_attack_bench [--streams N] [--budget SIZE] [--idle-timeout DURATION]
//                       [--images N] [--batch B] [--prefetch K] [--threads T]
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/server_probe.h"
#include "common/flags/flags.h"
#include "shardcast/v1/shardcast.grpc.pb.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace {

namespace v1 = ::shardcast::v1;
using Clock = std::chrono::steady_clock;

constexpr int kResize = 256;
constexpr int kCrop = 224;

struct Options {
  int streams = 40;
  int64_t budget = int64_t{128} << 20;
  absl::Duration idle_timeout = absl::Seconds(3);
  int64_t images = 512;
  int batch = 32;
  int prefetch = 4;
  int threads = 2;
};

// How long a status query may take before the benchmark reads it as "no answer".
constexpr int kStatusSeconds = 10;

// A client that does not read: no BDP probing and a 64 KiB stream window (as
// client::ChannelOptions::stream_window_bytes makes it), so its stream stalls at once.
std::shared_ptr<grpc::Channel> NonReadingChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 * 1024);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

struct Row {
  std::string config;
  int64_t idle_rss = 0, peak_rss = 0, end_rss = 0, peak_reserved = 0;
  int64_t limit = 0, refused = 0, reclaimed = 0, open_at_end = 0;
  double settle_seconds = 0;
};

Row Attack(const std::string& data, const Options& o, const std::string& config,
           std::vector<std::string> extra, const std::string& log_path) {
  std::vector<std::string> args = {"--shards",         data,
                                   "--listen",         "127.0.0.1:0",
                                   "--decode-threads", std::to_string(o.threads),
                                   "--prefetch",       std::to_string(o.prefetch),
                                   "--max-jobs",       "0",
                                   "--log-level",      "error"};
  // Every attack job is registered (from this one peer) before any stream opens.
  args.insert(args.end(), {"--max-unstreamed-jobs-per-peer", "0"});
  args.insert(args.end(), extra.begin(), extra.end());
  shardcast::testing_util::ServerChild server;
  if (absl::Status s = server.Start(args, log_path + ".out", log_path); !s.ok()) {
    std::fprintf(stderr, "memory_attack_bench: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
  auto channel = NonReadingChannel(server.target());
  auto stub = v1::Shardcast::NewStub(channel);
  Row row;
  row.config = config;
  for (int i = 0; i < 600 && !shardcast::bench::ServerStatus(stub.get(), kStatusSeconds).serving();
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Every job registered first, so the idle figure includes the registry.
  for (int i = 0; i < o.streams; ++i) {
    v1::RegisterRequest request;
    request.set_job_id(absl::StrCat("attack-", i));
    request.set_world_size(1);
    request.set_batch_size(o.batch);
    request.mutable_transform()->set_mode(v1::TRANSFORM_MODE_CENTER);
    request.mutable_transform()->set_resize(kResize);
    request.mutable_transform()->set_crop(kCrop);
    grpc::ClientContext context;
    v1::RegisterResponse response;
    grpc::Status s = stub->Register(&context, request, &response);
    if (!s.ok()) {
      std::fprintf(stderr, "memory_attack_bench: register: %s\n", s.error_message().c_str());
      std::exit(1);
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  row.idle_rss = shardcast::bench::ProcMemoryBytes(server.pid(), "VmRSS:");

  // The attack: one stream per job, never read.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::Batch>>> readers;
  const auto start = Clock::now();
  for (int i = 0; i < o.streams; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    v1::StreamBatchesRequest request;
    request.set_job_id(absl::StrCat("attack-", i));
    readers.push_back(stub->StreamBatches(contexts.back().get(), request));
  }
  // Until the server has nothing left to do (no decode queued for 1 s), then as long as
  // the idle timeout plus 3 s, sampling RSS and the server's own accounting.
  v1::GetStatusResponse status;
  auto quiet_since = Clock::now();
  const auto give_up = start + std::chrono::seconds(120);
  while (Clock::now() < give_up) {
    status = shardcast::bench::ServerStatus(stub.get(), kStatusSeconds);
    row.peak_rss =
        std::max(row.peak_rss, shardcast::bench::ProcMemoryBytes(server.pid(), "VmRSS:"));
    if (status.queue_depth() > 0) quiet_since = Clock::now();
    if (Clock::now() - quiet_since > std::chrono::seconds(1)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  row.settle_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const auto hold_until =
      Clock::now() + std::chrono::milliseconds(absl::ToInt64Milliseconds(o.idle_timeout) + 3000);
  while (Clock::now() < hold_until) {
    status = shardcast::bench::ServerStatus(stub.get(), kStatusSeconds);
    row.peak_rss =
        std::max(row.peak_rss, shardcast::bench::ProcMemoryBytes(server.pid(), "VmRSS:"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  row.peak_rss = std::max(row.peak_rss, shardcast::bench::ProcMemoryBytes(server.pid(), "VmHWM:"));
  row.end_rss = shardcast::bench::ProcMemoryBytes(server.pid(), "VmRSS:");
  row.limit = status.batch_memory_limit_bytes();
  row.peak_reserved = status.batch_memory_peak_reserved_bytes();
  row.refused = status.streams_refused_memory();
  row.reclaimed = status.streams_reclaimed_idle();
  row.open_at_end = status.open_streams();
  for (auto& context : contexts) context->TryCancel();
  for (auto& reader : readers) (void)reader->Finish();
  server.Kill(SIGKILL);
  return row;
}

double MiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  Options o;
  shardcast::FlagSet flags("memory_attack_bench");
  flags.Int({{"--streams"}, "N", "streams that never read (one job each)"}, &o.streams, 1);
  flags.Size({{"--budget"}, "SIZE", "--max-batch-memory of the governed run"}, &o.budget);
  flags.Duration({{"--idle-timeout"}, "DURATION", "--stream-idle-timeout of the governed run"},
                 &o.idle_timeout);
  flags.Int64({{"--images"}, "N", "images in the synthetic dataset (256x256 JPEGs)"}, &o.images, 1);
  flags.Int({{"--batch"}, "B", "batch size (crop 224)"}, &o.batch, 1);
  flags.Int({{"--prefetch"}, "K", "server --prefetch"}, &o.prefetch, 1);
  flags.Int({{"--threads"}, "T", "server --decode-threads"}, &o.threads, 1);
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "memory_attack_bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }
  shardcast::testing_util::TempDir scratch("memory_attack_bench");
  const std::string data = scratch / "shards";
  if (absl::Status s = shardcast::testing_util::MakeSyntheticShards(data, o.images, 10, 256, 128);
      !s.ok()) {
    std::fprintf(stderr, "memory_attack_bench: dataset: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const double batch_mib = MiB(int64_t{o.batch} * 3 * kCrop * kCrop);
  std::printf(
      "%d streams that never read (one job each, batch %d x 3x%dx%d = %.2f MiB, --prefetch %d, "
      "%d decode threads, %ld images)\n",
      o.streams, o.batch, kCrop, kCrop, batch_mib, o.prefetch, o.threads,
      static_cast<long>(o.images));
  std::vector<Row> rows;
  rows.push_back(Attack(data, o, "before: --max-batch-memory 1TiB --stream-idle-timeout 0",
                        {"--max-batch-memory", "1TiB", "--stream-idle-timeout", "0"},
                        scratch / "before.log"));
  const std::string budget = shardcast::FormatFlagSize(o.budget);
  const std::string idle = shardcast::FormatFlagDuration(o.idle_timeout);
  rows.push_back(Attack(
      data, o, absl::StrCat("after: --max-batch-memory ", budget, " --stream-idle-timeout ", idle),
      {"--max-batch-memory", budget, "--stream-idle-timeout", idle}, scratch / "after.log"));
  std::printf(
      "\n| configuration | idle RSS MiB | peak RSS MiB | batch memory reserved, peak MiB | "
      "refused | reclaimed idle | open at end | RSS at end MiB |\n"
      "|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %.1f | %.1f | %.1f | %ld | %ld | %ld | %.1f |\n", r.config.c_str(),
                MiB(r.idle_rss), MiB(r.peak_rss), MiB(r.peak_reserved),
                static_cast<long>(r.refused), static_cast<long>(r.reclaimed),
                static_cast<long>(r.open_at_end), MiB(r.end_rss));
  }
  std::printf(
      "\npeak RSS: the larger of VmHWM and VmRSS sampled every 50 ms; RSS at end: after the\n"
      "windows filled (no decode queued for 1 s) plus the idle timeout + 3 s.\n");
  return 0;
}

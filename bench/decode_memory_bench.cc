// Server peak RSS against --max-decode-memory (issue 10): a real shardcast-server serves
// decode_memory_test's 64 solid-colour 12000x14900 PNGs (536 MB each once decoded, under
// 1 MB compressed) on --decode-threads threads, once per budget, to one reader. Prints
// the server's baseline, its peak RSS (VmHWM) and its own decode accounting per budget,
// and the bound peak <= baseline + budget (docs/BENCHMARKS.md, "Decode memory").
//   decode_memory_bench [--threads 8] [--budget-images 1.5,2.5,4.5,0] [--images 64]
// A budget is given in images (0 = unbounded: 64 GiB, the server before the budget).
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/server_probe.h"
#include "common/flags/flags.h"
#include "shardcast/v1/shardcast.grpc.pb.h"
#include "tests/support/server_process.h"
#include "tests/support/solid_png.h"
#include "tests/support/temp_dir.h"
#include "tools/pack/tar_writer.h"

namespace {

namespace v1 = ::shardcast::v1;
using Clock = std::chrono::steady_clock;

constexpr int kWidth = 12000;
constexpr int kHeight = 14900;  // 178.8 M pixels: just under the decoder's pixel limit
// Bytes one image needs to decode (DecodeBufferBytes for a PNG: pixels + row pointers).
constexpr int64_t kImageDecodeBytes = int64_t{kWidth} * kHeight * 3 + int64_t{kHeight} * 8;

struct Options {
  int threads = 8;
  int images = 64;
  std::string budget_images = "1.5,2.5,4.5,0";
};

// How long a status query may take before the benchmark reads it as "no answer".
constexpr int kStatusSeconds = 30;

struct Row {
  int64_t budget = 0;
  int64_t baseline = 0, peak_rss = 0, peak_decode = 0, waits = 0, substituted = 0;
  int64_t served = 0;
  double seconds = 0;
};

double MiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

void Die(const std::string& what) {
  std::fprintf(stderr, "decode_memory_bench: %s\n", what.c_str());
  std::exit(1);
}

Row Serve(const std::string& data, const Options& o, int64_t budget, const std::string& log) {
  shardcast::testing_util::ServerChild server;
  const std::vector<std::string> args = {"--shards",
                                         data,
                                         "--listen",
                                         "127.0.0.1:0",
                                         "--decode-threads",
                                         std::to_string(o.threads),
                                         "--prefetch",
                                         "4",
                                         "--max-decode-memory",
                                         shardcast::FormatFlagSize(budget),
                                         "--max-member-bytes",
                                         "1MiB",
                                         "--log-level",
                                         "error"};
  if (absl::Status s = server.Start(args, log + ".out", log); !s.ok()) Die(s.ToString());
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(-1);
  auto stub = v1::Shardcast::NewStub(
      grpc::CreateCustomChannel(server.target(), grpc::InsecureChannelCredentials(), channel_args));
  for (int i = 0; i < 600 && !shardcast::bench::ServerStatus(stub.get(), kStatusSeconds).serving();
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  v1::RegisterRequest request;
  request.set_job_id("huge");
  request.set_world_size(1);
  request.set_batch_size(16);
  request.mutable_transform()->set_mode(v1::TRANSFORM_MODE_CENTER);
  request.mutable_transform()->set_resize(16);
  request.mutable_transform()->set_crop(16);
  {
    grpc::ClientContext context;
    v1::RegisterResponse response;
    if (grpc::Status s = stub->Register(&context, request, &response); !s.ok()) {
      Die(absl::StrCat("register: ", s.error_message()));
    }
  }
  Row row;
  row.budget = budget;
  row.baseline = shardcast::bench::ProcMemoryBytes(server.pid(), "VmHWM:");

  std::atomic<bool> done{false};
  int64_t sampled_peak = 0;
  std::thread sampler([&] {
    while (!done) {
      sampled_peak =
          std::max(sampled_peak, shardcast::bench::ProcMemoryBytes(server.pid(), "VmRSS:"));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  const auto start = Clock::now();
  grpc::ClientContext context;
  v1::StreamBatchesRequest stream_request;
  stream_request.set_job_id("huge");
  auto reader = stub->StreamBatches(&context, stream_request);
  v1::Batch batch;
  while (reader->Read(&batch)) row.served += batch.samples_size();
  const grpc::Status finished = reader->Finish();
  row.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  done = true;
  sampler.join();
  if (!finished.ok()) Die(absl::StrCat("stream: ", finished.error_message()));
  row.peak_rss = std::max(sampled_peak, shardcast::bench::ProcMemoryBytes(server.pid(), "VmHWM:"));
  const v1::GetStatusResponse status = shardcast::bench::ServerStatus(stub.get(), kStatusSeconds);
  row.peak_decode = status.decode_memory_peak_bytes();
  row.waits = status.decode_memory_waits();
  row.substituted = status.substitutions();
  server.Kill(SIGKILL);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  shardcast::FlagSet flags("decode_memory_bench");
  flags.Int({{"--threads"}, "T", "server --decode-threads"}, &o.threads, 1);
  flags.Int({{"--images"}, "N", "huge PNGs served (a multiple of 16)"}, &o.images, 16);
  flags.String({{"--budget-images"},
                "LIST",
                "--max-decode-memory of each run, in images (0 = unbounded: 64GiB)"},
               &o.budget_images);
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) Die(std::string(s.message()));
  if (flags.help_requested()) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }
  std::vector<int64_t> budgets;
  for (absl::string_view item : absl::StrSplit(o.budget_images, ',')) {
    double images = 0;
    if (!absl::SimpleAtod(item, &images) || images < 0) Die(absl::StrCat("bad budget ", item));
    budgets.push_back(images == 0 ? int64_t{64} << 30
                                  : static_cast<int64_t>(images * kImageDecodeBytes));
  }

  shardcast::testing_util::TempDir scratch("decode_memory_bench");
  const std::string data = scratch / "shards";
  if (mkdir(data.c_str(), 0755) != 0) Die("mkdir " + data);
  {
    // Two colours, as in decode_memory_test.
    const std::string red = shardcast::testing_util::SolidPng(kWidth, kHeight, 200, 30, 60);
    const std::string blue = shardcast::testing_util::SolidPng(kWidth, kHeight, 20, 40, 220);
    if (red.empty() || blue.empty()) Die("could not write the PNGs");
    auto tar = shardcast::pack::TarWriter::Open(data + "/shard-0.tar");
    if (!tar.ok()) Die(tar.status().ToString());
    for (int i = 0; i < o.images; ++i) {
      const std::string key = absl::StrCat("huge", i);
      if (!(*tar)->AddMember(key + ".png", i % 2 == 0 ? red : blue).ok() ||
          !(*tar)->AddMember(key + ".cls", absl::StrCat(i % 2)).ok()) {
        Die("could not write the shard");
      }
    }
    if (!(*tar)->Close().ok()) Die("could not close the shard");
  }
  std::printf(
      "%d PNGs of %dx%d (%.0f MiB each decoded), %d decode threads, batch 16, "
      "--prefetch 4; machine: %u cores\n\n",
      o.images, kWidth, kHeight, MiB(kImageDecodeBytes), o.threads,
      std::thread::hardware_concurrency());
  std::printf(
      "| --max-decode-memory | images | served | seconds | baseline RSS MiB | peak RSS "
      "MiB | peak - baseline MiB | decode peak (server) MiB | waits | substituted | "
      "peak <= baseline + budget |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < budgets.size(); ++i) {
    const Row r = Serve(data, o, budgets[i], scratch / absl::StrCat("server", i, ".log"));
    std::printf("| %.1f MiB | %.1f | %ld | %.1f | %.1f | %.1f | %.1f | %.1f | %ld | %ld | %s |\n",
                MiB(r.budget), static_cast<double>(r.budget) / kImageDecodeBytes,
                static_cast<long>(r.served), r.seconds, MiB(r.baseline), MiB(r.peak_rss),
                MiB(r.peak_rss - r.baseline), MiB(r.peak_decode), static_cast<long>(r.waits),
                static_cast<long>(r.substituted),
                r.peak_rss <= r.baseline + r.budget ? "yes" : "NO");
    std::fflush(stdout);
  }
  std::printf(
      "\npeak RSS: the larger of the server's VmHWM and VmRSS sampled every 50 ms; "
      "baseline: VmHWM once indexed and the job registered.\n");
  return 0;
}

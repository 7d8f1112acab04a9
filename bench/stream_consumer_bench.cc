// The C++ side of bench/python_loader_bench.py: consumes a running server's stream the
// way a C++ trainer does and prints images/s and this process's CPU time per image as
// one JSON line, so the Python loader is measured against it on the same server, data
// and machine in one run.
//
//   stream_consumer_bench --server HOST:PORT --job-id ID --mode MODE [--batch B]
//       [--resize R] [--crop C] [--epochs E] [--threads T]
//       [--tls-ca FILE] [--tls-cert FILE --tls-key FILE] [--auth-token-file FILE]
// MODE: batch_stream  BatchStream (prefetch thread, checks, WireBatch, table normalize)
//       raw           a generated stub reading and parsing each Batch, nothing else
//       wire          a reader of WireBatch (client/rpc/wire_batch.h), as the
//                     trainer's stream reads: header parsed, pixels left in gRPC's
//                     receive slices; against raw, the parse copy the client avoids
//       raw_tensors   raw + per-batch tensor work as BatchStream did it before WireBatch
//                     (parse copy, from_blob, torch normalize ops),
//                     without its sequence check: what reads the bench-only server that
//                     re-sends batch 0
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "bench/raw_stream_reader.h"
#include "client/batch_stream.h"
#include "client/decode/receive_memory.h"
#include "client/rpc/client_security.h"
#include "common/flags/flags.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string server;
  std::string job_id;
  std::string mode;
  int batch = 32;
  int resize = 72;
  int crop = 64;
  int epochs = 2;
  int threads = 1;
  shardcast::client::ClientSecurity security;  // from the shared client security flags
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "stream_consumer_bench: %s\n", what.c_str());
  std::exit(1);
}

shardcast::client::RankJob Job(const Args& a) {
  shardcast::client::RankJob job;
  job.job_id = a.job_id;
  job.overrides.batch_size = a.batch;
  job.overrides.split = shardcast::Split::kSample;
  job.overrides.transform_mode = shardcast::TransformMode::kCenter;
  job.overrides.resize = a.resize;
  job.overrides.crop = a.crop;
  return job;
}

// Wall and process CPU time (all threads) of a timed section.
class Timer {
 public:
  Timer() : wall_(Clock::now()), cpu_(std::clock()) {}
  void Print(const std::string& mode, int64_t images) const {
    const double wall = std::chrono::duration<double>(Clock::now() - wall_).count();
    const double cpu = static_cast<double>(std::clock() - cpu_) / CLOCKS_PER_SEC;
    std::printf(
        "{\"mode\": \"%s\", \"images\": %lld, \"images_per_s\": %.1f, "
        "\"cpu_us_per_image\": %.2f}\n",
        mode.c_str(), static_cast<long long>(images), images / wall, 1e6 * cpu / images);
  }

 private:
  Clock::time_point wall_;
  std::clock_t cpu_;
};

// Per-channel ImageNet normalization, as BatchStream does it on the CPU.
class Normalizer {
 public:
  Normalizer()
      : mean_(torch::tensor({0.485f, 0.456f, 0.406f}).view({1, 3, 1, 1})),
        std_(torch::tensor({0.229f, 0.224f, 0.225f}).view({1, 3, 1, 1})) {}
  torch::Tensor operator()(uint8_t* pixels, const std::vector<int64_t>& shape) const {
    torch::Tensor u8 = torch::from_blob(pixels, shape, torch::kUInt8);
    return u8.to(torch::kFloat32).div_(255.0f).sub_(mean_).div_(std_);
  }

 private:
  torch::Tensor mean_;
  torch::Tensor std_;
};

// A stub reader over `epochs` epochs (registration not timed). With `tensors`, each
// batch also becomes a normalized float tensor; with `wire`, batches are read as
// WireBatch instead of parsed.
void Raw(const Args& a, bool tensors, bool wire) {
  shardcast::bench::RawStreamJob job;
  job.server = a.server;
  job.credentials = a.security.credentials;
  job.bearer_token = a.security.bearer_token;
  job.job_id = a.job_id;
  job.batch = a.batch;
  job.resize = a.resize;
  job.crop = a.crop;
  auto reader = shardcast::bench::RawStreamReader::Register(job);
  if (!reader.ok()) Die(reader.status().ToString());
  const Normalizer normalize;
  double checksum = 0;
  shardcast::bench::RawBatchCallback on_batch;
  if (tensors) {
    on_batch = [&](uint8_t* pixels, const std::vector<int64_t>& shape) {
      checksum += normalize(pixels, shape).data_ptr<float>()[0];
    };
  }
  const Timer timer;
  absl::StatusOr<int64_t> images = (*reader)->ReadEpochs(
      a.epochs, wire ? shardcast::bench::RawRead::kWire : shardcast::bench::RawRead::kParse,
      on_batch);
  if (!images.ok()) Die(images.status().ToString());
  timer.Print(a.mode, *images);
  if (checksum == 12345.678) std::printf(" ");  // keeps the tensor work observable
}

// BatchStream, the C++ trainer's input.
void ThroughBatchStream(const Args& a) {
  shardcast::BatchStreamOptions options;
  options.server = a.server;
  options.credentials = a.security.credentials;
  options.bearer_token = a.security.bearer_token;
  options.job = Job(a);
  auto stream = shardcast::BatchStream::Connect(options);
  if (!stream.ok()) Die(stream.status().ToString());
  int64_t images = 0;
  double checksum = 0;
  const Timer timer;
  for (int e = 0; e < a.epochs; ++e) {
    if (auto s = (*stream)->StartEpoch(e); !s.ok()) Die(s.ToString());
    while (true) {
      auto next = (*stream)->Next();
      if (!next.ok()) Die(next.status().ToString());
      if (!next->has_value()) break;
      images += (*next)->images.size(0);
      checksum += (*next)->images.data_ptr<float>()[0];
    }
  }
  timer.Print(a.mode, images);
  if (checksum == 12345.678) std::printf(" ");
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  shardcast::client::ClientSecurityFlags security;
  shardcast::FlagSet flags("stream_consumer_bench");
  flags.String({{"--server"}, "HOST:PORT", "a running shardcast-server"}, &a.server);
  flags.String({{"--job-id"}, "ID", "job to register"}, &a.job_id);
  flags.String({{"--mode"}, "MODE", "batch_stream, raw, raw_tensors or wire"}, &a.mode);
  flags.Int({{"--batch"}, "B", "batch size"}, &a.batch, 1);
  flags.Int({{"--resize"}, "R", "resize"}, &a.resize, 1);
  flags.Int({{"--crop"}, "C", "crop"}, &a.crop, 1);
  flags.Int({{"--epochs"}, "E", "epochs"}, &a.epochs, 1);
  flags.Int({{"--threads"}, "T", "torch threads"}, &a.threads, 1);
  shardcast::client::AddClientSecurityFlags(&flags, &security);
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) Die(std::string(s.message()));
  if (flags.help_requested()) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }
  absl::StatusOr<shardcast::client::ClientSecurity> loaded =
      shardcast::client::LoadClientSecurity(security);
  if (!loaded.ok()) Die(std::string(loaded.status().message()));
  a.security = *std::move(loaded);
  if (a.server.empty() || a.job_id.empty()) Die("--server and --job-id are required");
  torch::set_num_threads(a.threads);
  // Every mode receives into the same warm malloc heap (WireBatchStub would set it only
  // for the modes that use it), so the modes differ only in how they read a batch.
  shardcast::client::KeepReceiveBuffersWarm();
  if (a.mode == "batch_stream") {
    ThroughBatchStream(a);
  } else if (a.mode == "raw" || a.mode == "raw_tensors" || a.mode == "wire") {
    Raw(a, a.mode == "raw_tensors", a.mode == "wire");
  } else {
    Die("--mode must be batch_stream, raw, raw_tensors or wire, got '" + a.mode + "'");
  }
  return 0;
}

// Trainer-side input benchmark, side by side in one run against the real server:
// (a) images/s a no-op model consumes through BatchStream (tensors + normalization)
//     vs a raw gRPC reader of the same stream (no tensors), with decode on and off;
// (b) ResNet-18 step time with batches from the server vs one in-memory batch.
//
//   train_input_bench [--samples N] [--size S] [--resize R] [--crop C] [--batch B]
//                     [--epochs E] [--rounds R] [--steps K] [--decode-threads T]
// Throughput rows are the best of R interleaved rounds (the machine may be shared).
#include <signal.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/raw_stream_reader.h"
#include "client/batch_stream.h"
#include "client/train/resnet.h"
#include "tests/support/child_process.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace {

using Clock = std::chrono::steady_clock;
using shardcast::BatchStream;
using shardcast::BatchStreamOptions;
using shardcast::TrainingBatch;
namespace tu = shardcast::testing_util;

struct Args {
  int64_t samples = 2048;
  int size = 96;
  int resize = 72;
  int crop = 64;
  int batch = 32;
  int epochs = 2;
  int rounds = 3;
  int steps = 20;
  int decode_threads = 0;  // server default: all cores
};

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Servers this run started: Die() exits without running destructors, so it stops them.
std::vector<tu::ServerProcess*> g_servers;
std::string g_scratch;  // removed by Die() too

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "train_input_bench: %s\n", what.c_str());
  for (tu::ServerProcess* server : g_servers) server->Kill(SIGKILL);
  std::error_code ec;
  if (!g_scratch.empty()) std::filesystem::remove_all(g_scratch, ec);
  std::exit(1);
}

shardcast::client::RankJob Job(const Args& a, const std::string& id) {
  shardcast::client::RankJob job;
  job.job_id = id;
  job.overrides.batch_size = a.batch;
  job.overrides.split = shardcast::Split::kSample;
  job.overrides.transform_mode = shardcast::TransformMode::kCenter;
  job.overrides.resize = a.resize;
  job.overrides.crop = a.crop;
  return job;
}

// Raw gRPC consumption: read every message of `epochs` epochs, touch nothing.
double RawGrpcImagesPerSecond(const std::string& server, const Args& a, const std::string& id,
                              int epochs) {
  shardcast::bench::RawStreamJob job;
  job.server = server;
  job.job_id = id;
  job.batch = a.batch;
  job.resize = a.resize;
  job.crop = a.crop;
  auto reader = shardcast::bench::RawStreamReader::Register(job);
  if (!reader.ok()) Die(reader.status().ToString());
  const auto t0 = Clock::now();
  absl::StatusOr<int64_t> images =
      (*reader)->ReadEpochs(epochs, shardcast::bench::RawRead::kParse, nullptr);
  if (!images.ok()) Die(images.status().ToString());
  return *images / Seconds(t0);
}

std::unique_ptr<BatchStream> Connect(const std::string& server, const Args& a,
                                     const std::string& id) {
  BatchStreamOptions options;
  options.server = server;
  options.job = Job(a, id);
  auto stream = BatchStream::Connect(options);
  if (!stream.ok()) Die(stream.status().ToString());
  return std::move(*stream);
}

// BatchStream consumption by a no-op model: uint8 -> float normalized tensors.
double BatchStreamImagesPerSecond(const std::string& server, const Args& a, const std::string& id,
                                  int epochs) {
  auto stream = Connect(server, a, id);
  int64_t images = 0;
  double checksum = 0;
  const auto t0 = Clock::now();
  for (int e = 0; e < epochs; ++e) {
    if (!stream->StartEpoch(e).ok()) Die("StartEpoch");
    while (true) {
      auto next = stream->Next();
      if (!next.ok()) Die(next.status().ToString());
      if (!next->has_value()) break;
      images += (*next)->images.size(0);
      checksum += (*next)->images.data_ptr<float>()[0];  // the no-op "model" reads it
    }
  }
  const double rate = images / Seconds(t0);
  if (checksum == 12345.678) std::printf(" ");
  return rate;
}

// What BatchStream does per batch on CPU, in memory: wrap the bytes (from_blob), then
// float normalize. Upper bound of the client's conversion rate on one thread.
double ConversionImagesPerSecond(const Args& a) {
  std::string bytes(static_cast<size_t>(a.batch) * 3 * a.crop * a.crop, '\x7f');
  torch::Tensor mean = torch::tensor({0.485f, 0.456f, 0.406f}).view({1, 3, 1, 1});
  torch::Tensor std = torch::tensor({0.229f, 0.224f, 0.225f}).view({1, 3, 1, 1});
  int64_t images = 0;
  double checksum = 0;
  const auto t0 = Clock::now();
  while (Seconds(t0) < 1.0) {
    torch::Tensor u8 = torch::from_blob(bytes.data(), {a.batch, 3, a.crop, a.crop}, torch::kUInt8);
    torch::Tensor f = u8.to(torch::kFloat32).div_(255.0f).sub_(mean).div_(std);
    checksum += f.data_ptr<float>()[0];
    images += a.batch;
  }
  const double rate = images / Seconds(t0);
  if (checksum == 12345.678) std::printf(" ");
  return rate;
}

struct StepStats {
  double mean_step_ms = 0;
  double mean_wait_ms = 0;  // time in Next() (input stall)
};

StepStats ResNetSteps(const Args& a, int num_classes, BatchStream* stream) {
  torch::manual_seed(0);
  shardcast::train::ResNet18 model(num_classes);
  model->train();
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  torch::Tensor fixed_images = torch::randn({a.batch, 3, a.crop, a.crop});
  torch::Tensor fixed_labels = torch::randint(num_classes, {a.batch}, torch::kInt64);
  const int warmup = 3;
  double total = 0, wait = 0;
  int measured = 0;
  int64_t epoch = 0;
  if (stream != nullptr && !stream->StartEpoch(epoch).ok()) Die("StartEpoch");
  for (int step = 0; step < warmup + a.steps; ++step) {
    const auto t0 = Clock::now();
    torch::Tensor images = fixed_images, labels = fixed_labels;
    if (stream != nullptr) {
      auto next = stream->Next();
      if (!next.ok()) Die(next.status().ToString());
      if (!next->has_value()) {
        if (!stream->StartEpoch(++epoch).ok()) Die("StartEpoch");
        next = stream->Next();
        if (!next.ok() || !next->has_value()) Die("empty epoch");
      }
      images = (*next)->images;
      labels = (*next)->labels;
    }
    const double waited = Seconds(t0);
    opt.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(images), labels);
    loss.backward();
    opt.step();
    if (step >= warmup) {
      total += Seconds(t0);
      wait += waited;
      ++measured;
    }
  }
  return {1000 * total / measured, 1000 * wait / measured};
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> long {
      if (i + 1 >= argc) Die("missing value for " + flag);
      return std::atol(argv[++i]);
    };
    if (flag == "--samples")
      a.samples = value();
    else if (flag == "--size")
      a.size = value();
    else if (flag == "--resize")
      a.resize = value();
    else if (flag == "--crop")
      a.crop = value();
    else if (flag == "--batch")
      a.batch = value();
    else if (flag == "--epochs")
      a.epochs = value();
    else if (flag == "--steps")
      a.steps = value();
    else if (flag == "--decode-threads")
      a.decode_threads = value();
    else
      Die("unknown flag " + flag + " (see the header of bench/train_input_bench.cc)");
  }

  tu::TempDir scratch;
  g_scratch = scratch.path();
  const std::string shards = scratch.path() + "/shards";
  if (auto s = tu::MakeSyntheticShards(shards, a.samples, 10, a.size, 256); !s.ok()) {
    Die(s.ToString());
  }
  std::vector<std::string> flags;
  if (a.decode_threads > 0) flags.push_back("--decode-threads=" + std::to_string(a.decode_threads));
  tu::ServerProcess decoding(shards, scratch.path());
  tu::ServerProcess wire(shards, scratch.path());
  g_servers = {&decoding, &wire};
  if (auto s = decoding.Start(0, flags); !s.ok()) Die(s.ToString());
  std::vector<std::string> wire_flags = flags;
  wire_flags.push_back("--bench-only-resend-first-batch");
  if (auto s = wire.Start(0, wire_flags); !s.ok()) Die(s.ToString());

  std::printf(
      "train_input_bench: %lld synthetic %dx%d JPEGs, center resize %d crop %d, B=%d, "
      "%d cores, torch threads %d\n",
      static_cast<long long>(a.samples), a.size, a.size, a.resize, a.crop, a.batch,
      static_cast<int>(std::thread::hardware_concurrency()), torch::get_num_threads());

  // (a) Input throughput. Each pair runs back to back against the same server.
  // BatchStream cannot read the wire-only server (it re-sends batch 0, which the
  // sequence check rejects), so the client's own cost is measured in memory instead.
  // The machine may be shared: rows run interleaved, best of --rounds rounds.
  const int wire_epochs = a.epochs * 5;
  double raw_decode = 0, bs_decode = 0, raw_wire = 0, convert = 0;
  for (int round = 0; round < a.rounds; ++round) {
    const std::string r = std::to_string(round);
    raw_decode =
        std::max(raw_decode, RawGrpcImagesPerSecond(decoding.address(), a, "raw-d" + r, a.epochs));
    bs_decode = std::max(bs_decode,
                         BatchStreamImagesPerSecond(decoding.address(), a, "bs-d" + r, a.epochs));
    raw_wire =
        std::max(raw_wire, RawGrpcImagesPerSecond(wire.address(), a, "raw-w" + r, wire_epochs));
    convert = std::max(convert, ConversionImagesPerSecond(a));
  }
  const double mb = 3.0 * a.crop * a.crop / 1e6;
  std::printf("\n(a) input throughput, no-op model (images/s, best of %d rounds)\n", a.rounds);
  std::printf("%-44s %12s %12s %8s\n", "", "raw gRPC", "BatchStream", "ratio");
  std::printf("%-44s %12.0f %12.0f %8.2f\n", "server decoding (real serving)", raw_decode,
              bs_decode, bs_decode / raw_decode);
  std::printf("%-44s %12.0f %12s %8s\n", "server wire only (batch 0 re-sent, no decode)", raw_wire,
              "-", "-");
  std::printf("%-44s %12s %12.0f %8s\n", "client tensors + normalize only (in memory)", "-",
              convert, "-");
  std::printf("  (wire only: %.0f MB/s of uint8 pixels)\n", raw_wire * mb);

  // (b) ResNet-18 steps.
  auto stream = Connect(decoding.address(), a, "resnet");
  const int num_classes = stream->registration().num_classes;
  const StepStats mem = ResNetSteps(a, num_classes, nullptr);
  const StepStats served = ResNetSteps(a, num_classes, stream.get());
  std::printf(
      "\n(b) ResNet-18 train step (fwd+bwd+Adam), CPU, B=%d, %dx%d, %d steps after 3 "
      "warm-up\n",
      a.batch, a.crop, a.crop, a.steps);
  std::printf("%-34s %14s %14s %10s\n", "data from", "step ms", "wait ms", "img/s");
  std::printf("%-34s %14.1f %14.1f %10.0f\n", "in-memory tensor", mem.mean_step_ms,
              mem.mean_wait_ms, a.batch * 1000 / mem.mean_step_ms);
  std::printf("%-34s %14.1f %14.1f %10.0f\n", "shardcast-server via BatchStream",
              served.mean_step_ms, served.mean_wait_ms, a.batch * 1000 / served.mean_step_ms);
  std::printf("  step time ratio server/in-memory: %.2f\n", served.mean_step_ms / mem.mean_step_ms);
  return 0;
}

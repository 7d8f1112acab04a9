// Planning cost at scale: 10M samples in 10,000 uneven shards, 256 ranks, batch 256.
// Create time, sample refs/s (one rank's epoch and all ranks'), resume latency and peak
// RSS, for both splits, side by side with a naive materialized-permutation planner.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/plan/epoch_plan.h"

namespace {

// CPU time of this thread: the build machine is shared, so wall time would measure the
// neighbours too. The planner is single-threaded, so CPU time is its cost.
struct Clock {
  using time_point = double;
  static double now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  }
};

double Seconds(double since) { return Clock::now() - since; }

// Peak resident set size of this process in KiB (VmHWM).
long PeakRssKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

struct Row {
  double create_ms = 0;
  double one_rank_refs_per_s = 0;
  double all_ranks_refs_per_s = 0;
  double all_ranks_s = 0;
  double resume_us = 0;
  double peak_rss_delta_mib = 0;
  int64_t batches_per_rank = 0;
  uint64_t checksum = 0;  // keeps the work observable
};

// Runs `measure` in a child process so each row's peak RSS starts from the same base.
Row InChild(const std::function<Row()>& measure) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Row row = measure();
    if (write(fds[1], &row, sizeof(row)) != static_cast<ssize_t>(sizeof(row))) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  Row row;
  if (read(fds[0], &row, sizeof(row)) != static_cast<ssize_t>(sizeof(row))) {
    std::fprintf(stderr, "plan_bench: a measurement failed\n");
    std::exit(1);
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return row;
}

uint64_t Consume(const shardcast::PlannedBatch& batch) {
  uint64_t sum = 0;
  for (const shardcast::SampleRef& s : batch.samples) {
    sum += static_cast<uint64_t>(s.shard) * 1000003u + s.index + (s.augment_seed & 1);
  }
  return sum;
}

Row MeasurePlanner(const std::vector<uint32_t>& sizes, const shardcast::PlanConfig& config) {
  Row row;
  const long rss0 = PeakRssKib();
  auto start = Clock::now();
  auto plan = shardcast::EpochPlan::Create(sizes, config, /*epoch=*/1);
  row.create_ms = Seconds(start) * 1e3;
  if (!plan.ok()) {
    std::fprintf(stderr, "plan_bench: %s\n", plan.status().ToString().c_str());
    std::exit(1);
  }
  row.batches_per_rank = (*plan)->batches_per_rank();
  const double refs_per_rank = static_cast<double>(row.batches_per_rank) * config.batch_size;
  shardcast::PlannedBatch batch;
  {
    start = Clock::now();
    auto it = (*plan)->Iterate(config.world_size / 2, 0);
    while (it->Next(&batch)) row.checksum += Consume(batch);
    row.one_rank_refs_per_s = refs_per_rank / Seconds(start);
  }
  // Every rank, in turn, as the server's streams would (one iterator alive at a time
  // here; each holds O(B + shards of its rank)).
  start = Clock::now();
  for (int32_t r = 0; r < config.world_size; ++r) {
    auto it = (*plan)->Iterate(r, 0);
    while (it->Next(&batch)) row.checksum += Consume(batch);
  }
  row.all_ranks_s = Seconds(start);
  row.all_ranks_refs_per_s = refs_per_rank * config.world_size / row.all_ranks_s;
  // Resume at the last batch: iterator creation + the first batch.
  start = Clock::now();
  constexpr int kResumes = 16;
  for (int i = 0; i < kResumes; ++i) {
    auto it = (*plan)->Iterate(i * (config.world_size / kResumes), row.batches_per_rank - 1);
    if (it->Next(&batch)) row.checksum += Consume(batch);
  }
  row.resume_us = Seconds(start) * 1e6 / kResumes;
  row.peak_rss_delta_mib = (PeakRssKib() - rss0) / 1024.0;
  return row;
}

// The naive planner that split sample replaces: a materialized uint32 Fisher-Yates
// permutation of all N samples (global block), mapped to (shard, index) on the fly.
Row MeasureMaterialized(const std::vector<uint32_t>& sizes, const shardcast::PlanConfig& c) {
  Row row;
  const long rss0 = PeakRssKib();
  auto start = Clock::now();
  std::vector<uint64_t> cum(sizes.size() + 1, 0);
  for (size_t i = 0; i < sizes.size(); ++i) cum[i + 1] = cum[i] + sizes[i];
  const uint64_t n_samples = cum.back();
  std::vector<uint32_t> perm(n_samples);
  std::iota(perm.begin(), perm.end(), 0u);
  std::mt19937_64 rng(c.seed + 1);
  for (uint64_t i = n_samples - 1; i > 0; --i) {
    std::swap(perm[i], perm[std::uniform_int_distribution<uint64_t>(0, i)(rng)]);
  }
  row.create_ms = Seconds(start) * 1e3;
  const uint64_t step = static_cast<uint64_t>(c.batch_size) * c.world_size;
  row.batches_per_rank = static_cast<int64_t>(n_samples / step);
  auto rank_epoch = [&](int32_t rank) {
    uint64_t sum = 0;
    for (int64_t j = 0; j < row.batches_per_rank; ++j) {
      const uint64_t first = (static_cast<uint64_t>(j) * c.world_size + rank) * c.batch_size;
      for (int32_t i = 0; i < c.batch_size; ++i) {
        const uint32_t g = perm[first + i];
        const size_t shard = std::upper_bound(cum.begin(), cum.end(), g) - cum.begin() - 1;
        sum += shard * 1000003u + (g - cum[shard]) +
               (shardcast::AugmentSeed(c.seed, 1, static_cast<int32_t>(shard),
                                       static_cast<int32_t>(g - cum[shard])) &
                1);
      }
    }
    return sum;
  };
  const double refs_per_rank = static_cast<double>(row.batches_per_rank) * c.batch_size;
  start = Clock::now();
  row.checksum += rank_epoch(c.world_size / 2);
  row.one_rank_refs_per_s = refs_per_rank / Seconds(start);
  start = Clock::now();
  for (int32_t r = 0; r < c.world_size; ++r) row.checksum += rank_epoch(r);
  row.all_ranks_s = Seconds(start);
  row.all_ranks_refs_per_s = refs_per_rank * c.world_size / row.all_ranks_s;
  row.resume_us = 0;  // random access into the array
  row.peak_rss_delta_mib = (PeakRssKib() - rss0) / 1024.0;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t num_samples = 10'000'000;
  int32_t num_shards = 10'000;
  int32_t world = 256;
  int32_t batch = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long long value = std::atoll(argv[i + 1]);
    if (flag == "--samples") num_samples = value;
    if (flag == "--shards") num_shards = static_cast<int32_t>(value);
    if (flag == "--world") world = static_cast<int32_t>(value);
    if (flag == "--batch") batch = static_cast<int32_t>(value);
  }
  // Uneven shards (+-10% around the mean), a fixed seed: the same dataset every run.
  std::vector<uint32_t> sizes(num_shards);
  std::mt19937_64 rng(42);
  const int64_t mean = num_samples / num_shards;
  int64_t total = 0;
  for (int32_t i = 0; i < num_shards; ++i) {
    sizes[i] = static_cast<uint32_t>(
        std::uniform_int_distribution<int64_t>(mean - mean / 10, mean + mean / 10)(rng));
    total += sizes[i];
  }
  std::printf("plan_bench: %lld samples in %d shards (%u..%u per shard), world %d, batch %d\n",
              static_cast<long long>(total), num_shards,
              *std::min_element(sizes.begin(), sizes.end()),
              *std::max_element(sizes.begin(), sizes.end()), world, batch);

  struct Scenario {
    const char* name;
    shardcast::PlanConfig config;
    bool materialized = false;
  };
  shardcast::PlanConfig base;
  base.world_size = world;
  base.batch_size = batch;
  base.seed = 7;
  std::vector<Scenario> scenarios;
  {
    shardcast::PlanConfig c = base;
    c.split = shardcast::Split::kShard;
    c.workers = 4;
    scenarios.push_back({"shard K=4", c});
    c.shuffle_shards = true;
    c.shuffle_buffer = 1000;
    scenarios.push_back({"shard K=4 shuffled+buf1000", c});
    c = base;
    c.split = shardcast::Split::kSample;
    scenarios.push_back({"sample global", c});
    c.block_size = 16;
    scenarios.push_back({"sample block=16", c});
    c.block_size = 0;
    scenarios.push_back({"naive: materialized perm", c, true});
  }
  std::printf("\n%-28s %6s %10s %14s %14s %9s %12s %10s\n", "planner", "n", "create ms",
              "1 rank refs/s", "all refs/s", "all s", "resume us", "peak MiB");
  for (const Scenario& s : scenarios) {
    const Row row = InChild([&] {
      return s.materialized ? MeasureMaterialized(sizes, s.config)
                            : MeasurePlanner(sizes, s.config);
    });
    std::printf("%-28s %6lld %10.2f %14.3g %14.3g %9.2f %12.1f %10.1f\n", s.name,
                static_cast<long long>(row.batches_per_rank), row.create_ms,
                row.one_rank_refs_per_s, row.all_ranks_refs_per_s, row.all_ranks_s, row.resume_us,
                row.peak_rss_delta_mib);
  }
  std::printf(
      "\nTimes are thread CPU time. all refs/s: every rank's full epoch, one after another,\n"
      "one thread (%lld refs).\n"
      "resume us: Iterate(rank, n-1) + its first batch. peak MiB: VmHWM growth in a fresh\n"
      "child process per row (the 10k-entry shard size list is in the base).\n",
      static_cast<long long>(static_cast<int64_t>(total / (int64_t{batch} * world)) * batch *
                             world));
  return 0;
}

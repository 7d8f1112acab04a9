// The mixture planner's cost (issue 47): CPU ns per planned sample for 3 and 8 datasets,
// constant weights and a schedule that ramps, and the memory of a mixture of 8
// datasets of 10^8 samples each (it must not grow with the datasets' sizes).
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/plan/mixture_plan.h"

namespace {

using shardcast::MixtureDraw;
using shardcast::MixturePlanner;
using shardcast::MixtureSpec;

// CPU time of this thread: the machine is shared, so wall time would count neighbours.
double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

long RssKib(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::string(field).size());
  }
  return -1;
}

MixtureSpec Spec(int k, uint64_t samples, bool ramp) {
  MixtureSpec spec;
  shardcast::MixturePoint first{0, {}}, last{5000, {}};
  for (int i = 0; i < k; ++i) {
    const std::string name = absl::StrCat("d", i);
    spec.datasets.push_back({name, samples + static_cast<uint64_t>(i) * 7919});
    first.weights.emplace_back(name, 1.0 + i);
    // The ramp moves weight from the first datasets to the last; d0 leaves at 0.
    last.weights.emplace_back(name, i == 0 ? 0.0 : 1.0 + (k - i));
  }
  spec.schedule = {first};
  if (ramp) spec.schedule.push_back(last);
  spec.segments = {{0, 0, 256 * 8}};  // batch 256 on 8 ranks
  spec.samples_per_epoch = samples * k;
  spec.seed = 42;
  return spec;
}

void Measure(int k, bool ramp, int64_t n) {
  absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(Spec(k, 100000000, ramp));
  if (!planner.ok()) {
    std::fprintf(stderr, "%s\n", std::string(planner.status().message()).c_str());
    std::exit(1);
  }
  MixturePlanner::Cursor c = planner->Start();
  uint64_t checksum = 0;
  const double t0 = CpuSeconds();
  for (int64_t j = 0; j < n; ++j) {
    const MixtureDraw d = planner->Next(&c);
    checksum += d.index + static_cast<uint64_t>(d.dataset);
  }
  const double ns = (CpuSeconds() - t0) * 1e9 / static_cast<double>(n);
  std::printf("| %d datasets | %-28s | %8.1f | %12.1f | %016llx |\n", k,
              ramp ? "ramp over 5000 steps of 2048" : "constant", ns, 1e3 / ns,
              static_cast<unsigned long long>(checksum));
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 20000000;
  std::printf("%lld positions each, CPU time of one thread\n\n", static_cast<long long>(n));
  std::printf("| mixture | weights | ns / sample | M samples/s (CPU) | checksum |\n");
  std::printf("|---|---|---:|---:|---|\n");
  for (int k : {1, 3, 8}) {
    for (bool ramp : {false, true}) {
      if (k == 1 && ramp) continue;
      Measure(k, ramp, n);
    }
  }
  // The deadline walk's worst habit: ramps one step at a time. Global batch 1, a dataset
  // entering from 0 and one leaving to 0 over 10^6 steps.
  {
    MixtureSpec spec = Spec(3, 100000000, true);
    spec.schedule = {{0, {{"d0", 1.0}, {"d1", 0.0}, {"d2", 1.0}}},
                     {1000000, {{"d0", 0.0}, {"d1", 1.0}, {"d2", 1.0}}}};
    spec.segments = {{0, 0, 1}};
    absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(spec);
    MixturePlanner::Cursor c = planner->Start();
    const double t0 = CpuSeconds();
    planner->Advance(&c, 2000000);
    std::printf("| 3 datasets | enter/leave ramps over 10^6 steps, global batch 1 | %8.1f | | |\n",
                (CpuSeconds() - t0) * 1e9 / 2e6);
  }
  // Memory: a planner and a cursor for 8 datasets of 10^8 samples vs of 10 samples.
  for (uint64_t samples : {uint64_t{10}, uint64_t{100000000}}) {
    const long before = RssKib("VmRSS:");
    absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(Spec(8, samples, true));
    MixturePlanner::Cursor c = planner->Start();
    planner->Advance(&c, 1000000);
    std::printf(
        "\n8 datasets of %llu samples: RSS growth %ld KiB after 10^6 positions "
        "(state: %zu bytes per dataset)\n",
        static_cast<unsigned long long>(samples), RssKib("VmRSS:") - before,
        sizeof(shardcast::MixtureDatasetState) + sizeof(int64_t) + sizeof(uint64_t) + 64);
  }
  return 0;
}

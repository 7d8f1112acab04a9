// What the image benchmarks share: thread CPU time (the machine is shared, and the
// targets are per core, so rows are timed by the CPU time their thread got, not by the
// wall clock), reading a corpus file, and a timed loop over the corpus.
#ifndef SHARDCAST_BENCH_BENCH_TIMING_H_
#define SHARDCAST_BENCH_BENCH_TIMING_H_

#include <time.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

namespace shardcast::bench {

inline double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

inline std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Items per CPU second of fn(i) over the n items, cycling for at least `seconds` after
// one warm-up pass; -1 if fn failed.
inline double ItemsPerCpuSecond(size_t n, double seconds, const std::function<bool(size_t)>& fn) {
  for (size_t i = 0; i < n; ++i) {
    if (!fn(i)) return -1;
  }
  size_t done = 0;
  const double start = ThreadCpuSeconds();
  double elapsed = 0;
  do {
    for (size_t i = 0; i < n; ++i) {
      if (!fn(i)) return -1;
    }
    done += n;
    elapsed = ThreadCpuSeconds() - start;
  } while (elapsed < seconds);
  return done / elapsed;
}

}  // namespace shardcast::bench

#endif  // SHARDCAST_BENCH_BENCH_TIMING_H_

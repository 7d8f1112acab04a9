// KeepReceiveBuffersWarm: the blocks a stream of received batches frees are reused warm,
// not faulted in afresh for every batch.
#include "client/decode/receive_memory.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

// AddressSanitizer brings its own allocator, whose mallopt takes nothing (and the
// sanitizer tree of tools/sanitize.sh runs this test too).
#if defined(__SANITIZE_ADDRESS__)
#define SHARDCAST_ASAN_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHARDCAST_ASAN_ALLOCATOR 1
#endif
#endif

namespace shardcast::client {
namespace {

constexpr size_t kBatchBytes = 4'816'896;  // 32 x 3x224x224
constexpr int kWarmupBatches = 50, kMeasuredBatches = 200;

int64_t MinorFaultsOfThisThread() {
  rusage usage;
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

// What gRPC's receive does: each batch arrives in blocks of 64 KB .. 4 MB (the read
// chunk grows and shrinks), `window` batches are held while the consumer works, and
// the oldest is freed as the next arrives. Returns the page faults of the measured
// batches, after the heap had the warm-up batches to reach its working size.
int64_t FaultsPerStream(int window) {
  std::deque<std::vector<void*>> held;
  uint32_t random = 1;
  int64_t faults_at_start = 0;
  for (int b = 0; b < kWarmupBatches + kMeasuredBatches; ++b) {
    if (b == kWarmupBatches) faults_at_start = MinorFaultsOfThisThread();
    std::vector<void*> batch;
    for (size_t total = 0; total < kBatchBytes;) {
      random = random * 1664525u + 1013904223u;
      const size_t bytes = size_t{64 << 10} << ((random >> 16) % 7);  // 64 KB .. 4 MB
      void* p = std::malloc(bytes);
      std::memset(p, b, bytes);  // every page written, as a received batch's are
      batch.push_back(p);
      total += bytes;
    }
    held.push_back(std::move(batch));
    if (static_cast<int>(held.size()) > window) {
      for (void* p : held.front()) std::free(p);
      held.pop_front();
    }
  }
  const int64_t faults = MinorFaultsOfThisThread() - faults_at_start;
  for (auto& batch : held) {
    for (void* p : batch) std::free(p);
  }
  return faults;
}

TEST(ReceiveMemoryTest, AStreamOfBatchesReusesWarmPages) {
#if defined(SHARDCAST_ASAN_ALLOCATOR)
  EXPECT_FALSE(KeepReceiveBuffersWarm()) << "ASan's allocator ignores glibc's mallopt";
  GTEST_SKIP() << "ASan's allocator, not glibc's: the page-fault counts are glibc's";
#endif
  ASSERT_TRUE(KeepReceiveBuffersWarm());
  EXPECT_TRUE(KeepReceiveBuffersWarm()) << "a second call must report the same";
  // Untuned (glibc's dynamic thresholds), the measured batches fault 30-38 thousand
  // pages: heaps are trimmed and blocks mapped afresh over and over. Warm, 0.5-2.2
  // thousand. The bound is a twentieth of the pages the measured batches wrote.
  const int64_t bound =
      int64_t{kMeasuredBatches} * static_cast<int64_t>(kBatchBytes / sysconf(_SC_PAGESIZE)) / 20;
  for (int window : {2, 4}) {
    EXPECT_LT(FaultsPerStream(window), bound) << "window " << window << ", main arena";
    // Receive runs on gRPC's threads, which take their memory from arenas of their own.
    int64_t on_thread = -1;
    std::thread([&] { on_thread = FaultsPerStream(window); }).join();
    EXPECT_GE(on_thread, 0);
    EXPECT_LT(on_thread, bound) << "window " << window << ", a thread's arena";
  }
}

}  // namespace
}  // namespace shardcast::client

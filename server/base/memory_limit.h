// How much memory this process may use: the limit of its cgroup (v2 memory.max, as set
// by `docker run -m` or systemd's MemoryMax=, else v1 memory.limit_in_bytes) when there
// is one below the machine's memory, else the machine's physical memory. The default
// of --max-batch-memory and --max-decode-memory are fractions of it.
#ifndef SHARDCAST_SERVER_BASE_MEMORY_LIMIT_H_
#define SHARDCAST_SERVER_BASE_MEMORY_LIMIT_H_

#include <cstdint>
#include <string>

namespace shardcast::server {

struct MemoryLimit {
  int64_t bytes = 0;   // the memory available to the process
  std::string source;  // where it comes from, for --help and the log
};

// Reads `<root>/proc/self/cgroup` and the cgroup files under `<root>/sys/fs/cgroup`
// (root "" = the real system; tests pass a directory tree). `physical_bytes` is the
// machine's memory (the fallback, and the cap: a cgroup limit above it means none).
MemoryLimit AvailableMemory(const std::string& root, int64_t physical_bytes);
// The same for this process, with sysconf's physical memory.
MemoryLimit AvailableMemory();

// --max-batch-memory's default: this fraction of AvailableMemory(). Half leaves the
// other half for decode scratch, gRPC's own buffers, the index and the page cache.
// Rounded down to a MiB so that --help shows a readable figure.
inline constexpr int64_t kDefaultBatchMemoryDivisor = 2;
inline int64_t DefaultBatchMemoryBytes(const MemoryLimit& available) {
  return available.bytes / kDefaultBatchMemoryDivisor / (int64_t{1} << 20) * (int64_t{1} << 20);
}

// --max-decode-memory's default: an eighth of AvailableMemory() (the batch buffers take
// half), at most 4 GiB, rounded down to a MiB. Typical photos need a few MiB each while
// decoding; the budget is for the rare huge image, of which it admits a few at a time.
inline constexpr int64_t kDefaultDecodeMemoryDivisor = 8;
inline constexpr int64_t kMaxDefaultDecodeMemoryBytes = int64_t{4} << 30;
inline int64_t DefaultDecodeMemoryBytes(const MemoryLimit& available) {
  const int64_t eighth = available.bytes / kDefaultDecodeMemoryDivisor;
  const int64_t bytes =
      eighth < kMaxDefaultDecodeMemoryBytes ? eighth : kMaxDefaultDecodeMemoryBytes;
  return bytes / (int64_t{1} << 20) * (int64_t{1} << 20);
}

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_BASE_MEMORY_LIMIT_H_

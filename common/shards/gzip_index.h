// Random access into a gzip file: access points every `span` uncompressed bytes, each
// with the 32 KiB of output deflate needs to resume there (zlib's zran.c technique), so
// reading a member of a .tar.gz shard inflates at most `span` bytes plus the member
// instead of the shard from its start.
#ifndef SHARDCAST_COMMON_SHARDS_GZIP_INDEX_H_
#define SHARDCAST_COMMON_SHARDS_GZIP_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace shardcast {

class GzipIndex {
 public:
  // Uncompressed bytes between access points: inflating up to this much before a read
  // is what a member read costs beyond its own bytes (JPEG data inflates at roughly
  // 70-150 MB/s a core: ~1-2 ms at 256 KiB, 4x that at 1 MiB); each point keeps 32 KiB,
  // so the index takes about 32 KiB / span (12.5 % at 256 KiB) of the uncompressed size.
  static constexpr uint64_t kDefaultSpan = 256 << 10;

  // Inflates the whole gzip file open as `fd` once (pread, so the descriptor may be
  // shared) and records the access points. Concatenated gzip members (pigz, bgzip) are
  // followed; bytes after the last member that do not start another one are ignored,
  // as gzip and libarchive do. DATA_LOSS when the file is not gzip or is corrupt or cut
  // short (naming the compressed offset).
  static absl::StatusOr<GzipIndex> Build(int fd, uint64_t span = kDefaultSpan);

  // Reads `size` bytes at `offset` of the uncompressed stream into `out`, from the
  // access point before `offset`. OUT_OF_RANGE when the range ends past the stream,
  // DATA_LOSS when the file no longer inflates as it did when the index was built.
  // Thread-safe (const; no shared state besides the descriptor, read with pread).
  absl::Status Read(int fd, uint64_t offset, uint64_t size, char* out) const;

  uint64_t uncompressed_size() const { return uncompressed_size_; }
  size_t access_points() const { return points_.size(); }
  // Heap bytes the index holds (windows included): what a cache of indexes budgets.
  size_t memory_bytes() const;

 private:
  struct AccessPoint {
    uint64_t out = 0;  // uncompressed offset of the point
    uint64_t in = 0;   // compressed offset of the first byte it needs (see `bits`)
    int bits = 0;      // bits of the byte before `in` that belong to the point (0-7)
    // True at the start of a gzip member: inflate from `in` with a gzip header and no
    // window (`window` is empty). Otherwise raw deflate primed with `bits` and `window`.
    bool member_start = false;
    std::string window;  // the 32 KiB of output before `out`
  };

  std::vector<AccessPoint> points_;  // by `out`, the first at 0
  uint64_t uncompressed_size_ = 0;
};

// The seek indexes of several gzip files within one memory budget
// (--gzip-index-memory): each built on first use, the least recently used dropped while
// the total is over the budget, never the one just used (a budget below one index
// still reads, rebuilding). An index dropped while a reader holds it lives until that
// read is done. Thread-safe: one thread builds a file's index, the others wait for it.
class GzipIndexCache {
 public:
  explicit GzipIndexCache(size_t max_bytes) : max_bytes_(max_bytes) {}

  // The index of the gzip file open as `fd`, known as `id` (a shard number: one id
  // names one content, whatever descriptor reads it). Build's errors, after which the
  // next call tries again.
  absl::StatusOr<std::shared_ptr<const GzipIndex>> Get(uint64_t id, int fd);

  // Heap bytes of the indexes kept (GzipIndex::memory_bytes).
  size_t bytes() const;
  size_t max_bytes() const { return max_bytes_; }

 private:
  struct Slot {
    absl::Mutex mu;  // held by the thread building the index
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
    std::shared_ptr<const GzipIndex> index ABSL_GUARDED_BY(mu);
    size_t bytes = 0;       // guarded by GzipIndexCache::mu_, set once built
    uint64_t last_use = 0;  // guarded by GzipIndexCache::mu_
  };
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_bytes_;
  mutable absl::Mutex mu_;
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  size_t held_ ABSL_GUARDED_BY(mu_) = 0;  // sum of the slots' bytes
  std::map<uint64_t, std::shared_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARDS_GZIP_INDEX_H_

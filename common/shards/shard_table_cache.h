// The bounded cache of decoded shard tables (issue 46): the serve path's way to a
// sample's key, label and members when the index keeps only counts in memory. A
// shard's compact table (compact_shard_table.h) is read from the index cache file at
// the offset the file's records gave (ShardTableLocation), by pread into memory the
// cache owns (never mmap: a cache file truncated or replaced under the running server
// would SIGBUS a mapped reader), checked against its checksum and binding, and kept in
// an LRU bounded by bytes.
//
// A read that fails, comes back short, or fails the table's checks is the host's fault
// as the serve path sees it (AsHostIoError: retried, then the batch fails loudly): the
// file was sound when the server started, so what changed is the disk or someone
// writing over the cache. Nothing of such a read is kept or served. A table whose bytes
// changed (short, or failing its checks) also sets the cache file aside (PATH.corrupt)
// when the path still names the file this server opened, so the next start rebuilds it.
#ifndef SHARDCAST_COMMON_SHARDS_SHARD_TABLE_CACHE_H_
#define SHARDCAST_COMMON_SHARDS_SHARD_TABLE_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/shards/compact_shard_table.h"
#include "common/shards/index_cache_format.h"

namespace shardcast {

// The tables of one dataset: the file they lie in, where each shard's lies (by the
// served shard, DatasetIndex::shards' order) and the extensions they name.
struct IndexTables {
  IndexTables() = default;
  IndexTables(const IndexTables&) = delete;
  IndexTables& operator=(const IndexTables&) = delete;
  ~IndexTables();

  // Opens `path` for `fd`: a regular file of `expected_size` bytes (what was just read
  // or written there), else an error (a file replaced in between: the caller keeps the
  // samples in memory instead).
  absl::Status Open(const std::string& path, uint64_t expected_size);

  std::string path;
  // The file as opened when the index was read or written: the tables are read from
  // this descriptor, so a cache file replaced (renamed over) later, by a server
  // rebuilding it, leaves these bytes readable; one truncated or written over in place
  // is caught by the reads' length and the tables' checksums.
  int fd = -1;
  std::vector<ShardTableLocation> shards;
  std::shared_ptr<const ExtensionTable> exts;
};

// One shard's table as read: the bytes and the validated view into them.
class LoadedShardTable {
 public:
  const CompactShardTable& table() const { return *table_; }
  // What it takes of the cache's bound: its bytes and the view.
  int64_t memory_bytes() const { return static_cast<int64_t>(bytes_.capacity() + sizeof(*this)); }

 private:
  friend absl::StatusOr<std::shared_ptr<const LoadedShardTable>> ReadShardTable(
      std::shared_ptr<const IndexTables> tables, uint32_t shard);
  std::string bytes_;
  std::shared_ptr<const ExtensionTable> exts_;  // kept alive as long as the view
  std::optional<CompactShardTable> table_;
};

struct ShardTableCacheStats {
  int64_t limit_bytes = 0;
  int64_t memory_bytes = 0;  // of the tables held now
  int64_t hits = 0;          // Get answered from memory
  int64_t misses = 0;        // Get that read the file
  int64_t loads = 0;         // tables read and checked (misses and Prefetch)
  int64_t load_failures = 0;
};

// Shard `shard`'s table read and checked now, outside any cache (the selection of a
// job's samples reads each shard once). Errors as ShardTableCache::Get's.
absl::StatusOr<std::shared_ptr<const LoadedShardTable>> ReadShardTable(
    std::shared_ptr<const IndexTables> tables, uint32_t shard);

class ShardTableCache {
 public:
  // `memory_limit_bytes` bounds the tables held; one table larger than it is still read
  // and used (and dropped as soon as nothing uses it), so a tiny limit slows serving
  // down, never stops it.
  ShardTableCache(std::shared_ptr<const IndexTables> tables, int64_t memory_limit_bytes);
  ShardTableCache(const ShardTableCache&) = delete;
  ShardTableCache& operator=(const ShardTableCache&) = delete;

  // Shard `shard`'s table, from memory or read now. OUT_OF_RANGE for a shard the
  // tables do not have; UNAVAILABLE marked as a host error (IsHostIoError) for a read
  // that fails or a table that fails its checks.
  absl::StatusOr<std::shared_ptr<const LoadedShardTable>> Get(uint32_t shard);
  // Reads shard `shard`'s table into memory if it is not there (the read-ahead calls
  // it before the shard's samples are needed); the error as Get's.
  absl::Status Prefetch(uint32_t shard);

  uint32_t num_shards() const { return static_cast<uint32_t>(tables_->shards.size()); }
  ShardTableCacheStats stats() const;

 private:
  absl::StatusOr<std::shared_ptr<const LoadedShardTable>> GetCounted(uint32_t shard, bool count);
  void InsertLocked(uint32_t shard, std::shared_ptr<const LoadedShardTable> table)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<const IndexTables> tables_;
  const int64_t limit_;
  mutable absl::Mutex mu_;
  // Most recently used first.
  std::list<std::pair<uint32_t, std::shared_ptr<const LoadedShardTable>>> lru_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, decltype(lru_)::iterator> held_ ABSL_GUARDED_BY(mu_);
  ShardTableCacheStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARDS_SHARD_TABLE_CACHE_H_

// The data a server serves: the dataset index, a member reader over it (local files or
// object storage) and the per-shard sample counts the planner needs; with the samples
// released to the index cache (issue 46), the bounded cache of shard tables the serve
// path reads them through. Built once, immutable afterwards.
#ifndef SHARDCAST_SERVER_ASSEMBLY_SERVED_DATASET_H_
#define SHARDCAST_SERVER_ASSEMBLY_SERVED_DATASET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/shards/dataset_index.h"
#include "common/shards/member_reader.h"
#include "common/shards/shard_reader.h"
#include "common/shards/shard_table_cache.h"

namespace shardcast::server {

class ServedDataset {
 public:
  // Makes the reader of an index (which the dataset keeps and the reader refers to).
  using ReaderFactory = std::function<std::unique_ptr<MemberReader>(const DatasetIndex&)>;

  // The server's default --index-memory: room for the tables of about 3 million
  // LAION-like samples (about 20 bytes each), far more than a read-ahead window needs.
  static constexpr int64_t kDefaultIndexMemoryBytes = int64_t{64} << 20;

  // Scans (or loads from the index cache) the shards in directory `dir`.
  // `gzip_index_memory_bytes` bounds the reader's gzip seek indexes (ShardReader).
  // `index_memory_bytes` > 0: when the index's samples can be read back from its cache
  // (DatasetIndex::tables), only their counts stay in memory (ReleaseSamples) and a
  // shard's samples are read through a ShardTableCache bounded by it; 0 keeps every
  // sample in memory.
  static absl::StatusOr<std::unique_ptr<ServedDataset>> Load(
      const std::string& dir, const IndexOptions& options,
      size_t gzip_index_memory_bytes = ShardReader::kDefaultMaxGzipIndexBytes,
      int64_t index_memory_bytes = 0);
  // Wraps an index built elsewhere (tests, benchmarks), read by a ShardReader.
  explicit ServedDataset(DatasetIndex index,
                         size_t gzip_index_memory_bytes = ShardReader::kDefaultMaxGzipIndexBytes,
                         int64_t index_memory_bytes = 0);
  // An index with the reader `make_reader` makes of it (object storage).
  ServedDataset(DatasetIndex index, const ReaderFactory& make_reader,
                int64_t index_memory_bytes = 0);
  ServedDataset(const ServedDataset&) = delete;
  ServedDataset& operator=(const ServedDataset&) = delete;

  // The index; its ShardInfo::samples are empty when they were released (read them
  // with Lookup).
  const DatasetIndex& index() const { return index_; }
  const std::vector<uint32_t>& shard_sizes() const { return shard_sizes_; }
  // Thread-safe member reads.
  MemberReader& reader() const { return *reader_; }

  // Sample `index` of shard `shard` into `*out` (thread-safe): from memory, or from the
  // shard's table through the bounded cache, read from the index cache file on a miss.
  // A read of the table that fails (or fails its checks) is UNAVAILABLE marked as a
  // host error (IsHostIoError), never another sample. OUT_OF_RANGE for a position the
  // shard does not have.
  // `hint` (may be null) keeps the last table looked up, so that the samples of one
  // shard in a batch take the table cache's lock once, not once each, and where in it
  // the last lookup stopped, so that samples looked up in increasing order decode
  // about one record each (CompactShardTable::Cursor).
  struct TableHint {
    uint32_t shard = 0;
    std::shared_ptr<const LoadedShardTable> table;
    CompactShardTable::Cursor cursor;
  };
  absl::Status Lookup(uint32_t shard, uint32_t index, SampleEntry* out,
                      TableHint* hint = nullptr) const;
  // Lookup, a host error retried a few times within about a second (a blink of the
  // disk heals; a table that keeps failing its checks does not).
  absl::Status LookupRetrying(uint32_t shard, uint32_t index, SampleEntry* out,
                              TableHint* hint = nullptr) const;
  // Reads shard `shard`'s table into the cache ahead of its samples (the read-ahead);
  // OK at once with the samples in memory.
  absl::Status PrefetchTable(uint32_t shard) const;
  // The table cache's figures; nullopt when the samples are in memory.
  std::optional<ShardTableCacheStats> index_table_stats() const;
  // Whether lookups decode the samples from the index cache's tables (not kept in
  // memory): their order then matters (Lookup's hint).
  bool samples_in_tables() const { return tables_ != nullptr; }

 private:
  const DatasetIndex index_;  // declared before reader_: the reader refers to it
  const std::vector<uint32_t> shard_sizes_;
  const std::unique_ptr<MemberReader> reader_;
  // Set when the samples were released.
  const std::unique_ptr<ShardTableCache> tables_;
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_ASSEMBLY_SERVED_DATASET_H_

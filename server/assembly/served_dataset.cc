// Index + reader of the served shards (see served_dataset.h).
#include "server/assembly/served_dataset.h"

#include <malloc.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/shards/shard_reader.h"

namespace shardcast::server {
namespace {

// `index` with its samples released to its tables when `index_memory_bytes` asks for
// it and the tables are there.
DatasetIndex MaybeReleased(DatasetIndex index, int64_t index_memory_bytes) {
  if (index_memory_bytes > 0 && !index.samples_released && ReleaseSamples(&index)) {
    // Millions of small blocks (keys, member vectors) just freed: without a trim, glibc
    // keeps most of them resident in its arenas.
    malloc_trim(0);
  }
  return index;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServedDataset>> ServedDataset::Load(const std::string& dir,
                                                                   const IndexOptions& options,
                                                                   size_t gzip_index_memory_bytes,
                                                                   int64_t index_memory_bytes) {
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(dir, options);
  if (!index.ok()) return index.status();
  return std::make_unique<ServedDataset>(*std::move(index), gzip_index_memory_bytes,
                                         index_memory_bytes);
}

ServedDataset::ServedDataset(DatasetIndex index, size_t gzip_index_memory_bytes,
                             int64_t index_memory_bytes)
    : ServedDataset(
          std::move(index),
          [gzip_index_memory_bytes](const DatasetIndex& index) {
            return std::make_unique<ShardReader>(index, gzip_index_memory_bytes);
          },
          index_memory_bytes) {}

ServedDataset::ServedDataset(DatasetIndex index, const ReaderFactory& make_reader,
                             int64_t index_memory_bytes)
    : index_(MaybeReleased(std::move(index), index_memory_bytes)),
      shard_sizes_(index_.ShardSampleCounts()),
      reader_(make_reader(index_)),
      tables_(index_.samples_released
                  ? std::make_unique<ShardTableCache>(index_.tables, index_memory_bytes)
                  : nullptr) {}

absl::Status ServedDataset::Lookup(uint32_t shard, uint32_t index, SampleEntry* out,
                                   TableHint* hint) const {
  if (shard >= index_.shards.size() || index >= shard_sizes_[shard]) {
    return absl::OutOfRangeError(absl::StrCat("sample ", index, " of shard ", shard));
  }
  if (tables_ == nullptr) {
    *out = index_.shards[shard].samples[index];
    return absl::OkStatus();
  }
  if (hint != nullptr && hint->table != nullptr && hint->shard == shard) {
    return hint->table->table().LookupInto(index, out, &hint->cursor);
  }
  absl::StatusOr<std::shared_ptr<const LoadedShardTable>> table = tables_->Get(shard);
  if (!table.ok()) return table.status();
  if (hint == nullptr) return (*table)->table().LookupInto(index, out);
  // The cursor (and its key's allocation) carries over: bound to the old table, the
  // new one ignores it.
  hint->shard = shard;
  hint->table = *std::move(table);
  return hint->table->table().LookupInto(index, out, &hint->cursor);
}

absl::Status ServedDataset::LookupRetrying(uint32_t shard, uint32_t index, SampleEntry* out,
                                           TableHint* hint) const {
  // A blink of the disk heals within the retries; a table that keeps failing its
  // checks (a cache file written over in place) fails the batch, loudly.
  absl::Status status;
  for (const absl::Duration wait : {absl::ZeroDuration(), absl::Milliseconds(10),
                                    absl::Milliseconds(100), absl::Milliseconds(500)}) {
    absl::SleepFor(wait);
    status = Lookup(shard, index, out, hint);
    if (status.ok() || !IsHostIoError(status)) return status;
  }
  return absl::Status(status.code(), absl::StrCat(status.message(), "; retried 3 times"));
}

absl::Status ServedDataset::PrefetchTable(uint32_t shard) const {
  if (tables_ == nullptr) return absl::OkStatus();
  return tables_->Prefetch(shard);
}

std::optional<ShardTableCacheStats> ServedDataset::index_table_stats() const {
  if (tables_ == nullptr) return std::nullopt;
  return tables_->stats();
}

}  // namespace shardcast::server

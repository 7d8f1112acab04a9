// Index + reader of the served shards (see served_dataset.h).
#include "server/assembly/served_dataset.h"

#include <utility>

namespace shardcast::server {

absl::StatusOr<std::unique_ptr<ServedDataset>> ServedDataset::Load(const std::string& dir,
                                                                   const IndexOptions& options,
                                                                   size_t gzip_index_memory_bytes) {
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(dir, options);
  if (!index.ok()) return index.status();
  return std::make_unique<ServedDataset>(*std::move(index), gzip_index_memory_bytes);
}

ServedDataset::ServedDataset(DatasetIndex index, size_t gzip_index_memory_bytes)
    : ServedDataset(std::move(index), [gzip_index_memory_bytes](const DatasetIndex& index) {
        return std::make_unique<ShardReader>(index, gzip_index_memory_bytes);
      }) {}

ServedDataset::ServedDataset(DatasetIndex index, const ReaderFactory& make_reader)
    : index_(std::move(index)),
      shard_sizes_(index_.ShardSampleCounts()),
      reader_(make_reader(index_)) {}

}  // namespace shardcast::server

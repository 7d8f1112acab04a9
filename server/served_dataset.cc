// Index + reader of the served shards (see served_dataset.h).
#include "server/served_dataset.h"

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
    : index_(std::move(index)),
      shard_sizes_(index_.ShardSampleCounts()),
      reader_(std::make_unique<ShardReader>(index_, gzip_index_memory_bytes)) {}

}  // namespace shardcast::server

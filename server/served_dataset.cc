// Index + reader of the served shards (see served_dataset.h).
#include "server/served_dataset.h"

#include <utility>

namespace shardcast::server {

absl::StatusOr<std::unique_ptr<ServedDataset>> ServedDataset::Load(const std::string& dir,
                                                                   const IndexOptions& options) {
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(dir, options);
  if (!index.ok()) return index.status();
  return std::make_unique<ServedDataset>(*std::move(index));
}

ServedDataset::ServedDataset(DatasetIndex index)
    : index_(std::move(index)),
      shard_sizes_(index_.ShardSampleCounts()),
      reader_(std::make_unique<ShardReader>(index_)) {}

}  // namespace shardcast::server

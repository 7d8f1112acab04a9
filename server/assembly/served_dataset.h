// The data a server serves: the dataset index, a member reader over it (local files or
// object storage) and the per-shard sample counts the planner needs. Built once,
// immutable afterwards.
#ifndef SHARDCAST_SERVER_ASSEMBLY_SERVED_DATASET_H_
#define SHARDCAST_SERVER_ASSEMBLY_SERVED_DATASET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/shards/dataset_index.h"
#include "common/shards/member_reader.h"
#include "common/shards/shard_reader.h"

namespace shardcast::server {

class ServedDataset {
 public:
  // Makes the reader of an index (which the dataset keeps and the reader refers to).
  using ReaderFactory = std::function<std::unique_ptr<MemberReader>(const DatasetIndex&)>;

  // Scans (or loads from the index cache) the shards in directory `dir`.
  // `gzip_index_memory_bytes` bounds the reader's gzip seek indexes (ShardReader).
  static absl::StatusOr<std::unique_ptr<ServedDataset>> Load(
      const std::string& dir, const IndexOptions& options,
      size_t gzip_index_memory_bytes = ShardReader::kDefaultMaxGzipIndexBytes);
  // Wraps an index built elsewhere (tests, benchmarks), read by a ShardReader.
  explicit ServedDataset(DatasetIndex index,
                         size_t gzip_index_memory_bytes = ShardReader::kDefaultMaxGzipIndexBytes);
  // An index with the reader `make_reader` makes of it (object storage).
  ServedDataset(DatasetIndex index, const ReaderFactory& make_reader);
  ServedDataset(const ServedDataset&) = delete;
  ServedDataset& operator=(const ServedDataset&) = delete;

  const DatasetIndex& index() const { return index_; }
  const std::vector<uint32_t>& shard_sizes() const { return shard_sizes_; }
  // Thread-safe member reads.
  MemberReader& reader() const { return *reader_; }

 private:
  const DatasetIndex index_;  // declared before reader_: the reader refers to it
  const std::vector<uint32_t> shard_sizes_;
  const std::unique_ptr<MemberReader> reader_;
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_ASSEMBLY_SERVED_DATASET_H_

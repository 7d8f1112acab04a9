// Reads one member of one shard of a local dataset by its recorded offset, for the
// serve path.
#ifndef SHARDCAST_COMMON_SHARDS_SHARD_READER_H_
#define SHARDCAST_COMMON_SHARDS_SHARD_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/shards/dataset_index.h"
#include "common/shards/member_reader.h"
#include "common/shards/shard_errors.h"

namespace shardcast {

// Thread-safe. Plain tars are read with one pread per member on a cached file
// descriptor; gzip shards through a GzipIndex per shard (built on first use by
// inflating the shard once, then every read inflates at most GzipIndex::kDefaultSpan
// bytes before its member), kept in an LRU bounded by `max_gzip_index_bytes` (an index
// evicted is built again on the shard's next read).
//
// Every read is followed by an fstat of the descriptor it used: when the file's size,
// mtime, ctime, inode or device differ from the index's, the bytes are dropped and the
// read fails with ShardChangedError, for this and every later read of that shard
// (even if the file changes back). A shard removed is such a change once it must be
// opened again. A shard replaced by rename while its descriptor is cached keeps
// serving the indexed bytes, which are still the indexed ones, until the descriptor is
// reopened.
// REQUIRES: `index` outlives the reader.
class ShardReader : public MemberReader {
 public:
  static constexpr size_t kDefaultMaxGzipIndexBytes = size_t{1} << 30;

  explicit ShardReader(const DatasetIndex& index,
                       size_t max_gzip_index_bytes = kDefaultMaxGzipIndexBytes);
  ~ShardReader() override;
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  // Errors also name what is wrong with the file (e.g. it shrank since indexing).
  absl::StatusOr<std::string> ReadMember(uint32_t shard, const MemberRef& member) override;
  std::vector<ChangedShard> ChangedShards() const override;
  std::vector<UnreadableShard> UnreadableShards() const override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARDS_SHARD_READER_H_

// Reads one member of one shard by its recorded offset, for the serve path.
#ifndef SHARDCAST_COMMON_SHARD_READER_H_
#define SHARDCAST_COMMON_SHARD_READER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/dataset_index.h"

namespace shardcast {

// Thread-safe. Plain tars are read with one pread per member on a cached file
// descriptor; compressed shards are decompressed once and kept in a small LRU.
// REQUIRES: `index` outlives the reader.
class ShardReader {
 public:
  explicit ShardReader(const DatasetIndex& index);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  // Bytes of `member` of shard number `shard`. Errors name the shard and member
  // (e.g. the file shrank since indexing).
  absl::StatusOr<std::string> ReadMember(uint32_t shard, const MemberRef& member);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARD_READER_H_

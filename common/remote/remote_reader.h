// The serve path's reader of shards in object storage: members by range, fetched
// ahead of the plan (Prefetch), neighbours coalesced into one request, kept in memory
// only until read (bounded), and in the disk cache for the epochs after.
#ifndef SHARDCAST_COMMON_REMOTE_REMOTE_READER_H_
#define SHARDCAST_COMMON_REMOTE_REMOTE_READER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/remote/disk_cache.h"
#include "common/remote/object_store.h"
#include "common/shards/dataset_index.h"
#include "common/shards/member_reader.h"
#include "common/util/clock.h"

namespace shardcast::remote {

struct RemoteReadOptions {
  // Fetched members waiting to be read (read-ahead) hold at most this much memory;
  // what does not fit is not fetched ahead (it is read when needed). --remote-read-ahead-memory.
  int64_t read_ahead_memory_bytes = int64_t{256} << 20;
  // Members of one shard less than this far apart are fetched in one request (the
  // bytes between are read and dropped): adjacent samples are one request.
  uint64_t coalesce_gap_bytes = 64 << 10;
  // No coalesced request is longer than this.
  uint64_t max_request_bytes = 8 << 20;
  // Threads that fetch ahead, each with one request in flight (the server makes one per
  // --remote-connections; the fetcher bounds connections).
  int read_ahead_threads = 8;
  // The seek indexes of .tar.gz shards (copied whole to local disk) are held to this,
  // as a local dataset's are (--gzip-index-memory; ShardReader).
  size_t max_gzip_index_bytes = size_t{1} << 30;
  // What the age of unread read-ahead is measured on; not owned, never null.
  const util::Clock* clock = util::Clock::Real();
};

struct RemoteReadCounters {
  std::atomic<int64_t> read_ahead_members{0};   // members queued for read-ahead
  std::atomic<int64_t> read_ahead_requests{0};  // coalesced requests they became
  std::atomic<int64_t> read_ahead_hits{0};      // reads served by read-ahead (maybe after a wait)
  std::atomic<int64_t> read_ahead_dropped{0};   // members not fetched ahead: no memory left
  std::atomic<int64_t> direct_reads{0};         // reads that fetched on demand
  std::atomic<int64_t> read_ahead_bytes{0};     // gauge: memory held by read-ahead
  std::atomic<int64_t> gzip_index_bytes{0};     // gauge: memory of .tar.gz seek indexes
};

class RemoteReader : public MemberReader {
 public:
  // REQUIRES: `index` (built from `store`'s listing) and `cache` (nullable: no disk
  // cache) outlive the reader.
  RemoteReader(const DatasetIndex& index, std::unique_ptr<ObjectStore> store, DiskCache* cache,
               const RemoteReadOptions& options);
  // Stops the read-ahead threads: queued fetches are dropped, and those in flight are
  // cancelled (a backoff at once, a stalled transfer within about a second), so a
  // store that stopped answering does not hold the reader's owner for its deadline.
  ~RemoteReader() override;

  absl::StatusOr<std::string> ReadMember(uint32_t shard, const MemberRef& member) override;
  void Prefetch(absl::Span<const MemberLocation> members) override;
  bool reads_ahead() const override { return true; }
  std::vector<ChangedShard> ChangedShards() const override;
  std::vector<UnreadableShard> UnreadableShards() const override;

  const RemoteReadCounters& counters() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardcast::remote

#endif  // SHARDCAST_COMMON_REMOTE_REMOTE_READER_H_

// What the serve path reads samples through: member bytes by their place in the index,
// wherever the shards are (a local directory: ShardReader; object storage:
// common/remote/remote_reader.h), plus what it learned about shards that changed or
// cannot be read now.
#ifndef SHARDCAST_COMMON_SHARDS_MEMBER_READER_H_
#define SHARDCAST_COMMON_SHARDS_MEMBER_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/shards/sample_entry.h"

namespace shardcast {

// A shard whose bytes are no longer the ones indexed: what changed.
struct ChangedShard {
  std::string path;    // as ShardInfo::path
  std::string change;  // e.g. "mtime ... -> ...", "ETag \"a\" -> \"b\""
};

// A shard the host cannot read now (its last read failed with an error of the host or
// the store, not of its content: EMFILE, EACCES, EIO, a store answering 503...).
struct UnreadableShard {
  std::string path;   // as ShardInfo::path
  std::string error;  // the last such error
};

// One member the serve path will read soon.
struct MemberLocation {
  uint32_t shard = 0;
  MemberRef member;
};

// Thread-safe.
class MemberReader {
 public:
  virtual ~MemberReader() = default;

  // Bytes of `member` of shard number `shard`. Errors name the shard and member.
  // FAILED_PRECONDITION marked ShardChangedError for a shard that changed since it was
  // indexed; UNAVAILABLE marked HostIoError for the host's or the store's failures.
  virtual absl::StatusOr<std::string> ReadMember(uint32_t shard, const MemberRef& member) = 0;

  // A hint: these members will be read soon, in about this order (the plan's next
  // batches). A reader of remote shards starts fetching them; a local one does nothing.
  // Never blocks on I/O.
  virtual void Prefetch(absl::Span<const MemberLocation> members) { (void)members; }
  // Whether Prefetch does anything: the assembler looks up a coming batch's samples
  // to announce their members only for a reader that reads ahead.
  virtual bool reads_ahead() const { return false; }

  // Shards found changed so far, in the order they were found.
  virtual std::vector<ChangedShard> ChangedShards() const = 0;

  // Shards whose last read failed with HostIoError; one leaves the list with its next
  // successful read.
  virtual std::vector<UnreadableShard> UnreadableShards() const = 0;
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARDS_MEMBER_READER_H_

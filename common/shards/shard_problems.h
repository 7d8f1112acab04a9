// What a member reader learned about its shards while reading them: the shards that
// changed since they were indexed, and the shards the host (or the store) cannot read
// now. Shared by the local and the remote reader, so both report them alike.
#ifndef SHARDCAST_COMMON_SHARDS_SHARD_PROBLEMS_H_
#define SHARDCAST_COMMON_SHARDS_SHARD_PROBLEMS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/shards/dataset_index.h"
#include "common/shards/member_reader.h"

namespace shardcast {

// Thread-safe. A changed shard stays changed (every later read fails with the first
// error found, even if the bytes change back); an unreadable one leaves the list with
// its next good read, which costs no lock while no shard is listed.
// REQUIRES: `index` outlives this.
class ShardProblems {
 public:
  explicit ShardProblems(const DatasetIndex& index) : index_(index) {}

  // The error `shard` was first found changed with; OK while it was not.
  absl::Status KnownChange(uint32_t shard) const ABSL_LOCKS_EXCLUDED(mu_);
  // Records that `shard` changed (`change` is what ChangedShards shows) unless it was
  // found changed before; returns the error kept, the first one.
  absl::Status RecordChange(uint32_t shard, std::string change, absl::Status error)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The shard's last read failed with an error of the host: `error`.
  void NoteUnreadable(uint32_t shard, std::string error) ABSL_LOCKS_EXCLUDED(mu_);
  // The shard's last read succeeded.
  void NoteReadable(uint32_t shard) ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<ChangedShard> Changed() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<UnreadableShard> Unreadable() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const DatasetIndex& index_;
  mutable absl::Mutex mu_;
  std::vector<ChangedShard> changed_ ABSL_GUARDED_BY(mu_);               // in the order found
  std::map<uint32_t, absl::Status> changed_error_ ABSL_GUARDED_BY(mu_);  // the first error
  std::map<uint32_t, std::string> unreadable_ ABSL_GUARDED_BY(mu_);      // the last error
  // unreadable_.size(), read without the lock so that a good read costs no lock.
  std::atomic<size_t> unreadable_count_{0};
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARDS_SHARD_PROBLEMS_H_

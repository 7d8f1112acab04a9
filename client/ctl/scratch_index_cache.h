// The index cache a shardcast-ctl command indexes into, so that a dataset's samples stay
// on disk as a server's do (IndexOptions::samples_on_disk) and the command runs in
// memory that grows with the shards: the user's --cache-dir when given, else a private
// temporary directory removed when the command is done.
#ifndef SHARDCAST_CLIENT_CTL_SCRATCH_INDEX_CACHE_H_
#define SHARDCAST_CLIENT_CTL_SCRATCH_INDEX_CACHE_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/shards/index_parts.h"

namespace shardcast::ctl {

class ScratchIndexCache {
 public:
  // Sets `options->samples_on_disk` and, when `options->cache_dir` is empty, points it
  // at a new directory under $TMPDIR (else /tmp) that this object removes. A dataset
  // directory that holds that place (`shardcast-ctl inspect /tmp`: a cache is never
  // kept inside the dataset) is indexed in memory, as without a cache. Errors: the
  // directory cannot be made.
  static absl::StatusOr<ScratchIndexCache> Use(const std::string& dataset, IndexOptions* options);

  ScratchIndexCache(ScratchIndexCache&& other) noexcept : owned_(std::move(other.owned_)) {
    other.owned_.clear();
  }
  ScratchIndexCache& operator=(ScratchIndexCache&&) = delete;
  ScratchIndexCache(const ScratchIndexCache&) = delete;
  ~ScratchIndexCache();

 private:
  explicit ScratchIndexCache(std::string owned) : owned_(std::move(owned)) {}
  std::string owned_;  // the directory made here, "" when none
};

}  // namespace shardcast::ctl

#endif  // SHARDCAST_CLIENT_CTL_SCRATCH_INDEX_CACHE_H_

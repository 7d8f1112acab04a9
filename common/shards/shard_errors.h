// The two kinds of shard failure every reader and the index tell apart by payload: a
// shard changed since it was indexed, and the host (or the store) failing to read it.
// Below the readers and the index, so the index (dataset_index.cc) reads them without
// including a reader.
#ifndef SHARDCAST_COMMON_SHARDS_SHARD_ERRORS_H_
#define SHARDCAST_COMMON_SHARDS_SHARD_ERRORS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardcast {

// FAILED_PRECONDITION naming the shard and what changed, marked so that IsShardChanged
// recognizes it: a stream must end with it rather than substitute the sample.
absl::Status ShardChangedError(const std::string& shard_path, absl::string_view change);
bool IsShardChanged(const absl::Status& status);

// UNAVAILABLE for an open, stat or read of a shard that failed with `error` (an errno):
// the host's fault, not the data's, so a caller may retry and must never take it for
// corrupt content. The message names the shard (`where`), the errno's name and text.
absl::Status HostIoError(const std::string& where, absl::string_view what, int error);
bool IsHostIoError(const absl::Status& status);
// `status` (UNAVAILABLE or DEADLINE_EXCEEDED of a remote store, say) marked so that
// IsHostIoError recognizes it: the storage's fault, retried by the serve path, never
// taken for corrupt content.
absl::Status AsHostIoError(absl::Status status);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARDS_SHARD_ERRORS_H_

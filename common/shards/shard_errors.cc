// The two kinds of shard failure (see shard_errors.h).
#include "common/shards/shard_errors.h"

#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace shardcast {
namespace {

// The payload that marks ShardChangedError.
constexpr char kShardChangedPayload[] = "type.shardcast.dev/shard-changed";
// The payload that marks HostIoError.
constexpr char kHostIoPayload[] = "type.shardcast.dev/host-io";

}  // namespace

absl::Status HostIoError(const std::string& where, absl::string_view what, int error) {
  absl::Status status = absl::UnavailableError(absl::StrCat(
      where, ": ", what, ": ", std::strerror(error), " (", strerrorname_np(error), ")"));
  status.SetPayload(kHostIoPayload, absl::Cord(absl::StrCat(error)));
  return status;
}

absl::Status AsHostIoError(absl::Status status) {
  status.SetPayload(kHostIoPayload, absl::Cord("0"));
  return status;
}

bool IsHostIoError(const absl::Status& status) {
  return status.GetPayload(kHostIoPayload).has_value();
}

absl::Status ShardChangedError(const std::string& shard_path, absl::string_view change) {
  absl::Status status = absl::FailedPreconditionError(
      absl::StrCat(shard_path, ": the shard changed since indexing (", change,
                   "); its samples are not served under the old index; restart the server "
                   "to index the shards again"));
  status.SetPayload(kShardChangedPayload, absl::Cord("1"));
  return status;
}

bool IsShardChanged(const absl::Status& status) {
  return status.GetPayload(kShardChangedPayload).has_value();
}

}  // namespace shardcast

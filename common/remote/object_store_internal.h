// What tests may set in an ObjectStore beyond its URL and settings, and the pieces
// the store kinds (s3_store.cc, http_store.cc, file_store.cc) share. Internal to
// common/remote and its tests.
#ifndef SHARDCAST_COMMON_REMOTE_OBJECT_STORE_INTERNAL_H_
#define SHARDCAST_COMMON_REMOTE_OBJECT_STORE_INTERNAL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/remote/http_fetcher.h"

namespace shardcast::remote::internal {

struct ObjectStoreTuning {
  // ListObjectsV2's max-keys; 0 = the store's default (1000). Tests set 2 to page
  // through a few objects rather than put a thousand.
  int list_page_size = 0;
  // HEADs at once when listing HTTP URLs (the fetcher's pool bounds them again).
  int list_parallelism = 16;
};

// The names of shards, as a local dataset takes them (*.tar, *.tar.gz, *.tgz).
bool IsShardName(absl::string_view name);

// NOT_FOUND: `root` holds no shard.
absl::Status NoShardsError(const std::string& root);

// Reads `request`'s object whole, failing once it passes `max_bytes` rather than
// holding it all.
absl::StatusOr<std::string> GetBounded(HttpFetcher& fetcher, RangeRequest request,
                                       uint64_t max_bytes);

// GetBounded, with nullopt for a file that is not there (404).
absl::StatusOr<std::optional<std::string>> GetSmallFile(HttpFetcher& fetcher, RangeRequest request,
                                                        uint64_t max_bytes);

// `value` percent-encoded as SigV4's canonical query wants it: every byte but
// A-Z a-z 0-9 - _ . ~ (so '/' too), with upper-case hex digits.
std::string SigV4QueryValue(const std::string& value);

}  // namespace shardcast::remote::internal

#endif  // SHARDCAST_COMMON_REMOTE_OBJECT_STORE_INTERNAL_H_

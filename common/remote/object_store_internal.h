// What tests may set in an ObjectStore beyond OpenObjectStore's arguments. Internal to
// common/remote and its tests.
#ifndef SHARDCAST_COMMON_REMOTE_OBJECT_STORE_INTERNAL_H_
#define SHARDCAST_COMMON_REMOTE_OBJECT_STORE_INTERNAL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/remote/dataset_url.h"
#include "common/remote/object_store.h"
#include "common/remote/s3_settings.h"

namespace shardcast::remote::internal {

struct ObjectStoreTuning {
  // ListObjectsV2's max-keys; 0 = the store's default (1000). Tests set 2 to page
  // through a few objects rather than put a thousand.
  int list_page_size = 0;
  // HEADs at once when listing HTTP URLs (the fetcher's pool bounds them again).
  int list_parallelism = 16;
};

absl::StatusOr<std::unique_ptr<ObjectStore>> OpenObjectStore(const DatasetUrl& url,
                                                             const S3Settings& s3,
                                                             HttpFetcher* fetcher,
                                                             const ObjectStoreTuning& tuning);

// `value` percent-encoded as SigV4's canonical query wants it: every byte but
// A-Z a-z 0-9 - _ . ~ (so '/' too), with upper-case hex digits.
std::string SigV4QueryValue(const std::string& value);

}  // namespace shardcast::remote::internal

#endif  // SHARDCAST_COMMON_REMOTE_OBJECT_STORE_INTERNAL_H_

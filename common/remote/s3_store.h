// The S3 kind of store (s3://bucket/prefix/): ListObjectsV2 listings and SigV4-signed
// range reads through the HttpFetcher, its settings resolved as the AWS CLI does
// (s3_settings.h) from the --s3-* flags declared here once for every binary.
#ifndef SHARDCAST_COMMON_REMOTE_S3_STORE_H_
#define SHARDCAST_COMMON_REMOTE_S3_STORE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/remote/dataset_url.h"
#include "common/remote/http_fetcher.h"
#include "common/remote/object_store.h"
#include "common/remote/object_store_internal.h"
#include "common/remote/s3_settings.h"
#include "common/remote/store_kind.h"

namespace shardcast::remote {

// The table's entry (store_table.cc).
const StoreKind& S3StoreKind();

// The store at `url` (kS3, else INVALID_ARGUMENT) with settings already resolved.
// `fetcher` (not owned) must outlive the store.
absl::StatusOr<std::unique_ptr<ObjectStore>> OpenS3Store(
    const DatasetUrl& url, const S3Settings& settings, HttpFetcher* fetcher,
    const internal::ObjectStoreTuning& tuning = internal::ObjectStoreTuning());

}  // namespace shardcast::remote

#endif  // SHARDCAST_COMMON_REMOTE_S3_STORE_H_

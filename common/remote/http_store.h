// The HTTP(S) kind of store: shards named by URLs in brace notation, listed with a
// HEAD each and read with ranges through the HttpFetcher. It takes no flags of its own
// (the fetcher's --remote-* are every kind's).
#ifndef SHARDCAST_COMMON_REMOTE_HTTP_STORE_H_
#define SHARDCAST_COMMON_REMOTE_HTTP_STORE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/remote/dataset_url.h"
#include "common/remote/http_fetcher.h"
#include "common/remote/object_store.h"
#include "common/remote/object_store_internal.h"
#include "common/remote/store_kind.h"

namespace shardcast::remote {

// The table's entry (store_table.cc).
const StoreKind& HttpStoreKind();

// The store at `url` (kHttp, else INVALID_ARGUMENT). `fetcher` (not owned) must
// outlive the store; the URL's credentials are given to it by the caller
// (OpenRemoteDataset does).
absl::StatusOr<std::unique_ptr<ObjectStore>> OpenHttpStore(
    const DatasetUrl& url, HttpFetcher* fetcher,
    const internal::ObjectStoreTuning& tuning = internal::ObjectStoreTuning());

}  // namespace shardcast::remote

#endif  // SHARDCAST_COMMON_REMOTE_HTTP_STORE_H_

// The table of object-store kinds (S3, HTTP, file://), and the one way a dataset URL
// becomes an open store and an index, for the server (server/assembly/remote_storage)
// and for `shardcast-ctl index` alike. A new kind of store is its own file defining a
// StoreKind (store_kind.h) and one entry in store_table.cc.
#ifndef SHARDCAST_COMMON_REMOTE_STORE_TABLE_H_
#define SHARDCAST_COMMON_REMOTE_STORE_TABLE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/flags/flags.h"
#include "common/remote/dataset_url.h"
#include "common/remote/http_fetcher.h"
#include "common/remote/object_store.h"
#include "common/remote/object_store_internal.h"
#include "common/remote/store_kind.h"
#include "common/shards/dataset_index.h"

namespace shardcast::remote {

// Every kind's flags (--s3-endpoint, ...), storing into `*dst`.
// REQUIRES: `dst` outlives flags->Parse().
void AddStoreFlags(FlagSet* flags, StoreFlags* dst);

// The store at `url` by its kind's entry, its settings resolved from `flags`.
// INVALID_ARGUMENT for a local directory (not an object store); the kind's errors
// (bad settings name the setting and its source). `fetcher` (not owned) must outlive
// the store.
absl::StatusOr<OpenedStore> OpenStore(
    const DatasetUrl& url, const StoreFlags& flags, HttpFetcher* fetcher,
    const internal::ObjectStoreTuning& tuning = internal::ObjectStoreTuning());

struct RemoteDataset {
  std::unique_ptr<ObjectStore> store;
  DatasetIndex index;
};

// Told the kind's name ("s3") and where its settings came from, as soon as they are
// resolved (before the listing, which a wrong region or profile makes fail).
using StoreSettingsLog =
    std::function<void(const std::string& kind_name, const std::string& settings_source)>;

// Opens the store at `url` (OpenStore), gives the URL's credentials (http://user:pw@...)
// to `fetcher` alone, and indexes the dataset (BuildRemoteDatasetIndex: the index file
// next to the shards when it vouches for them, else a scan). Errors name the URL.
// `log`, when given, is called for a kind whose settings have a source to tell.
absl::StatusOr<RemoteDataset> OpenRemoteDataset(const DatasetUrl& url, const StoreFlags& flags,
                                                HttpFetcher* fetcher, const IndexOptions& options,
                                                const StoreSettingsLog& log = nullptr);

}  // namespace shardcast::remote

#endif  // SHARDCAST_COMMON_REMOTE_STORE_TABLE_H_

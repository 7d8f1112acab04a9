// The table of store kinds: one entry each. Adding a kind is its file and a line here.
#include "common/remote/store_table.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/remote/file_store.h"
#include "common/remote/http_store.h"
#include "common/remote/remote_index.h"
#include "common/remote/s3_store.h"

namespace shardcast::remote {
namespace {

// Functions rather than a static array of StoreKind: each entry is defined in its own
// translation unit, and these run after static initialization whatever its order.
using KindEntry = const StoreKind& (*)();
constexpr KindEntry kStoreKinds[] = {
    S3StoreKind,
    HttpStoreKind,
    FileStoreKind,
};

const StoreKind* KindOf(const DatasetUrl& url) {
  for (const KindEntry entry : kStoreKinds) {
    if (entry().kind == url.kind) return &entry();
  }
  return nullptr;
}

}  // namespace

void AddStoreFlags(FlagSet* flags, StoreFlags* dst) {
  for (const KindEntry entry : kStoreKinds) {
    if (entry().add_flags != nullptr) entry().add_flags(flags, dst);
  }
}

absl::StatusOr<OpenedStore> OpenStore(const DatasetUrl& url, const StoreFlags& flags,
                                      HttpFetcher* fetcher,
                                      const internal::ObjectStoreTuning& tuning) {
  const StoreKind* kind = KindOf(url);
  if (kind == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(url.text, ": a local directory, not an object store"));
  }
  return kind->open(url, flags, fetcher, tuning);
}

absl::StatusOr<RemoteDataset> OpenRemoteDataset(const DatasetUrl& url, const StoreFlags& flags,
                                                HttpFetcher* fetcher, const IndexOptions& options,
                                                const StoreSettingsLog& log) {
  if (fetcher == nullptr) return absl::InvalidArgumentError("OpenRemoteDataset without a fetcher");
  absl::StatusOr<OpenedStore> opened = OpenStore(url, flags, fetcher);
  if (!opened.ok()) return opened.status();
  if (log != nullptr && !opened->settings_source.empty()) {
    log(KindOf(url)->name, opened->settings_source);
  }
  // The password of http://user:password@host/... goes to the fetcher alone: the URLs
  // the store, the index and every message use were parsed without it.
  if (url.credentials.has_value()) fetcher->AddCredentials(url.base, *url.credentials);
  absl::StatusOr<DatasetIndex> index = BuildRemoteDatasetIndex(*opened->store, options);
  if (!index.ok()) return index.status();
  return RemoteDataset{std::move(opened->store), *std::move(index)};
}

}  // namespace shardcast::remote

// What one kind of object store (S3, HTTP, a local directory behind file://) gives the
// table of stores (store_table.cc): its scheme, its flags and how it opens. Each kind
// defines one StoreKind in its own file (s3_store.cc, http_store.cc, file_store.cc).
#ifndef SHARDCAST_COMMON_REMOTE_STORE_KIND_H_
#define SHARDCAST_COMMON_REMOTE_STORE_KIND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/flags/flags.h"
#include "common/remote/dataset_url.h"
#include "common/remote/http_fetcher.h"
#include "common/remote/object_store.h"
#include "common/remote/object_store_internal.h"
#include "common/remote/s3_settings.h"

namespace shardcast::remote {

// What the command line says about the stores, one member per kind that takes flags
// (a kind without flags adds nothing here). Copyable: the server keeps it in its
// options and resolves it again for each dataset it opens.
struct StoreFlags {
  S3Flags s3;  // --s3-endpoint, --s3-region, --s3-profile, --s3-path-style
};

// A store, opened, and where its settings came from.
struct OpenedStore {
  std::unique_ptr<ObjectStore> store;
  // For the startup log ("credentials from AWS_ACCESS_KEY_ID; region from ..."); empty
  // for a kind whose settings are its URL alone.
  std::string settings_source;
};

struct StoreKind {
  DatasetUrl::Kind kind;
  // "s3": the tag of the store's log lines; what --help and errors call it.
  const char* name;
  // Adds the kind's flags, storing into `dst`; null for a kind that takes none. The
  // server and shardcast-ctl both call it, so each flag is declared once.
  void (*add_flags)(FlagSet* flags, StoreFlags* dst);
  // Resolves the kind's own settings from `flags` (and the environment) and opens the
  // store at `url` (of this kind). `fetcher` (not owned) outlives the store; a kind
  // that reads without HTTP ignores it.
  absl::StatusOr<OpenedStore> (*open)(const DatasetUrl& url, const StoreFlags& flags,
                                      HttpFetcher* fetcher,
                                      const internal::ObjectStoreTuning& tuning);
};

}  // namespace shardcast::remote

#endif  // SHARDCAST_COMMON_REMOTE_STORE_KIND_H_

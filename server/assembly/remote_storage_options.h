// What the server's remote storage (remote_storage.h) is configured with: the store
// kinds' flags, the fetcher, read-ahead and the disk cache (server flags set them).
#ifndef SHARDCAST_SERVER_ASSEMBLY_REMOTE_STORAGE_OPTIONS_H_
#define SHARDCAST_SERVER_ASSEMBLY_REMOTE_STORAGE_OPTIONS_H_

#include <cstdint>
#include <string>

#include "common/remote/http_fetcher.h"
#include "common/remote/remote_reader.h"
#include "common/remote/store_kind.h"

namespace shardcast::server {

// Shards in object storage (s3://, http(s)://, file:// datasets; docs/server.md).
struct RemoteStorageOptions {
  remote::StoreFlags stores;       // each store kind's flags: --s3-endpoint, ... (store_table.h)
  remote::FetchOptions fetch;      // --remote-connections, --remote-timeout, TLS
  remote::RemoteReadOptions read;  // --remote-read-ahead-memory
  std::string cache_dir;           // --cache-dir; empty = no disk cache
  int64_t cache_size_bytes = int64_t{10} << 30;  // --cache-size
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_ASSEMBLY_REMOTE_STORAGE_OPTIONS_H_

// The file:// kind of store: a local directory reached through the object-store path
// (listing, ranged reads pinned to an ETag, the remote reader with its read-ahead and
// disk cache), as an s3:// or http(s):// dataset is. For a bucket mirrored on a local
// or network disk, and for testing that path without a server. It takes no flags.
#ifndef SHARDCAST_COMMON_REMOTE_FILE_STORE_H_
#define SHARDCAST_COMMON_REMOTE_FILE_STORE_H_

#include <sys/stat.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/remote/dataset_url.h"
#include "common/remote/object_store.h"
#include "common/remote/store_kind.h"

namespace shardcast::remote {

// The table's entry (store_table.cc).
const StoreKind& FileStoreKind();

// The store of the directory of `url` (kFile, else INVALID_ARGUMENT). Its shards are
// the directory's regular files (symlinks followed) with a shard's name; each read
// opens the file and checks that its size and ETag (FileETag) are the ones indexed,
// so a file rewritten under a running job fails its reads FAILED_PRECONDITION
// (ShardChangedError) as a changed S3 object does. The store reads with pread, not
// libcurl: its fetcher() is its own, and its requests are not in the server's
// remote_* figures.
absl::StatusOr<std::unique_ptr<ObjectStore>> OpenFileStore(const DatasetUrl& url);

// The ETag a file:// object has: its size and modification time (nanoseconds), in hex
// and quoted as ETags are: "\"<size>-<mtime>\"". Rewriting a file changes it.
std::string FileETag(const struct stat& st);

}  // namespace shardcast::remote

#endif  // SHARDCAST_COMMON_REMOTE_FILE_STORE_H_

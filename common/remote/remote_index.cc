// Indexing a dataset in object storage (see remote_index.h).
#include "common/remote/remote_index.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/shards/shard_reader.h"

namespace shardcast::remote {
namespace {

constexpr int kDefaultScanThreads = 8;

// The object streamed to an unlinked temporary file, scanned there.
ShardScanResult ScanObject(ObjectStore& store, const ShardInfo& shard,
                           const IndexOptions& options) {
  ShardScanResult result;
  const char* tmp = std::getenv("TMPDIR");
  std::string path =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/shardcast-scan-XXXXXX");
  const int fd = ::mkstemp(path.data());
  if (fd < 0) {
    result.fatal = HostIoError(path, "cannot create a temporary copy", errno);
    return result;
  }
  const RemoteObject object = store.Object(shard.path, shard.file_size, shard.etag);
  absl::Status fetched = DownloadObject(store, object, fd, path);
  ::close(fd);
  if (fetched.ok()) {
    result = ScanShardFile(path, shard, options, /*check_identity=*/false);
  } else {
    result.fatal = fetched;
  }
  ::unlink(path.c_str());
  return result;
}

bool IsShardName(const std::string& name) {
  return absl::EndsWith(name, ".tar") || absl::EndsWith(name, ".tar.gz") ||
         absl::EndsWith(name, ".tgz");
}

}  // namespace

absl::StatusOr<DatasetIndex> BuildRemoteDatasetIndex(ObjectStore& store,
                                                     const IndexOptions& options) {
  absl::StatusOr<std::vector<RemoteObject>> objects = store.ListShards();
  if (!objects.ok()) return objects.status();
  ShardListing listing;
  listing.root = store.root();
  for (const RemoteObject& object : *objects) {
    if (!IsShardName(object.name)) continue;
    ShardInfo shard;
    shard.path = object.name;
    shard.file_size = object.size;
    shard.etag = object.etag;
    shard.compressed = !absl::EndsWith(object.name, ".tar");
    listing.shards.push_back(std::move(shard));
  }
  if (listing.shards.empty()) {
    return absl::NotFoundError(
        absl::StrCat(store.root(), ": no shard (*.tar, *.tar.gz, *.tgz) there"));
  }
  absl::StatusOr<std::optional<std::string>> index_file =
      store.GetFile(kIndexFileName, kMaxIndexFileBytes);
  if (!index_file.ok()) return index_file.status();
  listing.index_file = *std::move(index_file);
  IndexOptions scan_options = options;
  if (scan_options.threads <= 0) scan_options.threads = kDefaultScanThreads;
  listing.scan = [&store, &scan_options](const ShardInfo& shard) {
    return ScanObject(store, shard, scan_options);
  };
  return BuildIndexFromListing(std::move(listing), scan_options);
}

}  // namespace shardcast::remote

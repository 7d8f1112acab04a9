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

// The object streamed to a temporary file (digested as it is written), scanned there.
// A download that fails is the store's fault (host_error): indexing stops with it, and
// nothing is remembered.
ShardScanResult ScanObject(ObjectStore& store, const ShardInfo& shard,
                           const IndexOptions& options) {
  ShardScanResult result;
  const char* tmp = std::getenv("TMPDIR");
  std::string path =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/shardcast-scan-XXXXXX");
  const int fd = ::mkstemp(path.data());
  if (fd < 0) {
    result.fatal = HostIoError(path, "cannot create a temporary copy", errno);
    result.host_error = true;
    return result;
  }
  const RemoteObject object = store.Object(shard.path, shard.file_size, shard.etag);
  ContentHasher hasher;
  absl::Status fetched = DownloadObject(store, object, fd, path, &hasher);
  ::close(fd);
  if (fetched.ok()) {
    result = ScanShardFile(path, shard, options, /*check_identity=*/false, hasher.Hex());
  } else {
    result.fatal = fetched;
    result.host_error = true;
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
  // Bounded by what an index of these shards can take, so a huge file is refused as it
  // arrives, never held (a 128 MiB one made the server allocate 1.3 GB).
  const uint64_t max_index_bytes = std::min(kMaxIndexFileBytes, MaxIndexFileBytes(listing.shards));
  absl::StatusOr<std::optional<std::string>> index_file =
      store.GetFile(kIndexFileName, max_index_bytes);
  if (absl::IsResourceExhausted(index_file.status())) {
    // Bad data, not a failing store: the shards are scanned instead.
    listing.index_file_problem = std::string(index_file.status().message());
  } else if (!index_file.ok()) {
    return index_file.status();
  } else {
    listing.index_file = *std::move(index_file);
  }
  IndexOptions scan_options = options;
  if (scan_options.threads <= 0) scan_options.threads = kDefaultScanThreads;
  listing.scan = [&store, &scan_options](const ShardInfo& shard) {
    return ScanObject(store, shard, scan_options);
  };
  return BuildIndexFromListing(std::move(listing), scan_options);
}

}  // namespace shardcast::remote

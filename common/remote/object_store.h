// The shards of a remote dataset as objects: listing them (S3 ListObjectsV2; HTTP
// brace URLs with a HEAD each; a local directory's entries), fetching small files next
// to them (the dataset index file), and the RangeRequest that reads a piece of one.
// The kinds of store and how one is opened from a URL: store_table.h.
#ifndef SHARDCAST_COMMON_REMOTE_OBJECT_STORE_H_
#define SHARDCAST_COMMON_REMOTE_OBJECT_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/remote/dataset_url.h"
#include "common/remote/http_fetcher.h"
#include "common/shards/content_digest.h"
#include "common/util/clock.h"

namespace shardcast::remote {

struct RemoteObject {
  std::string name;  // relative to the dataset's root: "shard-000001.tar" (may hold '/')
  std::string url;   // what a request fetches
  uint64_t size = 0;
  std::string etag;  // as the store sent it (quotes included); may be empty for HTTP
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // "s3://bucket/prefix/" or the HTTP base: the dataset's root in logs, errors and the
  // index cache's key.
  virtual const std::string& root() const = 0;

  // Every shard (*.tar, *.tar.gz, *.tgz) of the dataset with its size and ETag, in
  // the store's order (the index sorts). S3: ListObjectsV2 pages (continuation
  // tokens) under the prefix, objects in "sub-directories" left out as a local
  // dataset leaves out sub-directories. HTTP: a HEAD per expanded URL, up to
  // FetchOptions::max_connections at once; a URL whose name is not a shard name is an
  // error. Errors name the URL: NOT_FOUND for a bucket or URL that does not exist,
  // PERMISSION_DENIED with S3's message, NOT_FOUND when no shard is there. A listing
  // that does not end (a continuation token answered again, more than kMaxListPages
  // pages) or names an object twice is DATA_LOSS naming the token, page or object:
  // never a shard indexed twice.
  virtual absl::StatusOr<std::vector<RemoteObject>> ListShards() = 0;

  // A file directly at the root (the dataset index file, kIndexFileName of
  // common/shards/dataset_index.h),
  // nullopt when it does not exist (404); an error for others, or a file over
  // `max_bytes`.
  virtual absl::StatusOr<std::optional<std::string>> GetFile(const std::string& name,
                                                             uint64_t max_bytes) = 0;

  // The object named `name` (a ShardInfo::path) with the size and ETag the index
  // pinned: what Request needs, without listing again.
  virtual RemoteObject Object(const std::string& name, uint64_t size,
                              const std::string& etag) const = 0;

  // The request for exactly bytes [offset, offset + length) of `object` (none when
  // `length` is 0: set RangeRequest::to_end for the rest of the object), pinned to its
  // size and ETag, signed when the store signs.
  virtual RangeRequest Request(const RemoteObject& object, uint64_t offset,
                               uint64_t length) const = 0;

  virtual HttpFetcher& fetcher() = 0;
};

// The most ListObjectsV2 pages one listing may take (a billion keys at 1000 a page).
inline constexpr int64_t kMaxListPages = int64_t{1} << 20;

// Streams `object` whole into the open file `fd` (`path` names it in errors), through
// the fetcher's retries in one request pinned to the object's size and ETag: a cut body
// resumes, no byte is written twice, and --remote-timeout bounds the wait for progress,
// not the whole download (HttpFetcher::GetStreaming), so any size downloads at a steady
// rate.
// `hasher`, when given, is fed every byte as it is written (a content digest without
// reading the file again). `cancel`, when given, ends the download early
// (RangeRequest::cancel).
absl::Status DownloadObject(ObjectStore& store, const RemoteObject& object, int fd,
                            const std::string& path, ContentHasher* hasher = nullptr,
                            const util::CancelToken* cancel = nullptr);

}  // namespace shardcast::remote

#endif  // SHARDCAST_COMMON_REMOTE_OBJECT_STORE_H_

// The content digest of a shard file: the lowercase hex MD5 of all its bytes. MD5
// because a single-part S3 upload's ETag is exactly that, so an index can be checked
// against a store's listing without reading a byte more (the digest is no defence
// against a forger, only against a stale or mistaken index).
#ifndef SHARDCAST_COMMON_SHARDS_CONTENT_DIGEST_H_
#define SHARDCAST_COMMON_SHARDS_CONTENT_DIGEST_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardcast {

// MD5 fed piece by piece (the bytes as they are downloaded or read).
class ContentHasher {
 public:
  ContentHasher();
  ~ContentHasher();
  ContentHasher(const ContentHasher&) = delete;
  ContentHasher& operator=(const ContentHasher&) = delete;

  void Add(absl::string_view bytes);
  // 32 lowercase hex digits; the hasher is spent afterwards.
  std::string Hex();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// The digest of the file at `path`, read once in large blocks. A read that fails is a
// HostIoError (the host's fault: indexing stops rather than remember it); a file that
// cannot be opened is DATA_LOSS, as libarchive reports it (the shard is skipped).
absl::StatusOr<std::string> FileContentDigest(const std::string& path);

// The MD5 an ETag carries, lowercase, when it is a single-part upload's ("\"9e10...\"",
// quotes dropped); "" for any other ETag (multipart "...-3", nginx's "5f3a-1c00", a
// weak W/"..." one, none).
std::string EtagContentDigest(absl::string_view etag);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARDS_CONTENT_DIGEST_H_

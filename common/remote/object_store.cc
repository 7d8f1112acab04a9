// What every kind of object store shares: which names are shards, bounded reads of
// small files, and an object streamed whole into a file.
#include "common/remote/object_store.h"

#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/remote/object_store_internal.h"
#include "common/shards/shard_reader.h"

namespace shardcast::remote {
namespace internal {

bool IsShardName(absl::string_view name) {
  return absl::EndsWith(name, ".tar") || absl::EndsWith(name, ".tar.gz") ||
         absl::EndsWith(name, ".tgz");
}

absl::Status NoShardsError(const std::string& root) {
  return absl::NotFoundError(absl::StrCat(root, ": no shards (*.tar, *.tar.gz, *.tgz) are there"));
}

absl::StatusOr<std::string> GetBounded(HttpFetcher& fetcher, RangeRequest request,
                                       uint64_t max_bytes) {
  request.to_end = true;
  std::string out;
  absl::Status status = fetcher.GetStreaming(request, [&](absl::string_view data) {
    if (data.size() > max_bytes - out.size()) {
      return absl::ResourceExhaustedError(
          absl::StrCat(request.url, ": larger than the ", max_bytes, " bytes allowed"));
    }
    out.append(data.data(), data.size());
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::optional<std::string>> GetSmallFile(HttpFetcher& fetcher, RangeRequest request,
                                                        uint64_t max_bytes) {
  request.may_be_absent = true;  // a 404 is the answer "not there", not a failing store
  absl::StatusOr<std::string> file = GetBounded(fetcher, request, max_bytes);
  if (absl::IsNotFound(file.status())) return std::nullopt;
  if (!file.ok()) return file.status();
  return *std::move(file);
}

}  // namespace internal

absl::Status DownloadObject(ObjectStore& store, const RemoteObject& object, int fd,
                            const std::string& path, ContentHasher* hasher,
                            const util::CancelToken* cancel) {
  const auto sink = [fd, &path, hasher](absl::string_view chunk) {
    if (hasher != nullptr) hasher->Add(chunk);
    while (!chunk.empty()) {
      const ssize_t n = ::write(fd, chunk.data(), chunk.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return HostIoError(path, "write failed", errno);
      chunk.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  };
  RangeRequest whole = store.Request(object, 0, 0);
  whole.to_end = true;
  whole.cancel = cancel;
  return store.fetcher().GetStreaming(whole, sink);
}

}  // namespace shardcast::remote

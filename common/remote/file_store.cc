// A local directory behind the ObjectStore interface: a listing from readdir, ranged
// reads with pread, each pinned to the size and ETag (size + mtime) the index saw.
#include "common/remote/file_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/remote/unsigned_url_store.h"
#include "common/shards/shard_reader.h"

namespace shardcast::remote {
namespace {

constexpr char kScheme[] = "file://";
// One pread's bytes: a whole shard streamed (GetStreaming) never holds more.
constexpr uint64_t kChunkBytes = uint64_t{1} << 20;

// Closes a descriptor on every path out.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  const int fd_;
};

// The HttpFetcher interface over local files: the reader, the index and
// DownloadObject read every store through it, so the file store answers it with the
// same errors an HTTP store gives (HttpFetcher::Get's contract). Thread-safe: it holds
// only counters.
class LocalFileFetcher final : public HttpFetcher {
 public:
  absl::StatusOr<std::string> Get(const RangeRequest& request) override {
    std::string out;
    if (!request.to_end) out.reserve(request.length);
    absl::Status status = GetStreaming(request, [&out](absl::string_view chunk) {
      out.append(chunk.data(), chunk.size());
      return absl::OkStatus();
    });
    if (!status.ok()) return status;
    return out;
  }

  absl::Status GetStreaming(const RangeRequest& request,
                            const std::function<absl::Status(absl::string_view)>& sink) override {
    if (!request.to_end && request.length == 0) return absl::OkStatus();  // no request
    ++counters_.requests;
    absl::Status status = Stream(request, sink);
    // (No latency: a pread's time is the disk's, and no figure shows this fetcher's.)
    if (status.ok()) {
      ++counters_.requests_ok;
    } else if (!(request.may_be_absent && absl::IsNotFound(status)) && !absl::IsCancelled(status)) {
      ++counters_.failures;
    }
    return status;
  }

  absl::StatusOr<ObjectHead> Head(const std::string& url, const std::optional<SigV4>&) override {
    ++counters_.requests;
    struct stat st;
    if (::stat(PathOf(url).c_str(), &st) != 0) {
      const int error = errno;
      ++counters_.failures;
      return OpenError(url, "stat failed", error, /*may_be_absent=*/false);
    }
    ++counters_.requests_ok;
    return ObjectHead{static_cast<uint64_t>(st.st_size), FileETag(st)};
  }

  // A file:// URL carries no userinfo (ParseDatasetUrl refuses one).
  void AddCredentials(const std::string&, const UrlCredentials&) override {}

  const FetchCounters& counters() const override { return counters_; }

 private:
  static std::string PathOf(const std::string& url) {
    return absl::StartsWith(url, kScheme) ? url.substr(sizeof(kScheme) - 1) : url;
  }

  // NOT_FOUND for a file that is not there (unmarked when the request allows it, as a
  // 404 is), else the host's error.
  static absl::Status OpenError(const std::string& url, absl::string_view what, int error,
                                bool may_be_absent) {
    if (error == ENOENT) {
      absl::Status missing = absl::NotFoundError(absl::StrCat(url, ": no such file"));
      return may_be_absent ? missing : AsHostIoError(std::move(missing));
    }
    return HostIoError(url, what, error);
  }

  absl::Status Stream(const RangeRequest& request,
                      const std::function<absl::Status(absl::string_view)>& sink) {
    const auto cancelled = [&request] {
      return request.cancel != nullptr && request.cancel->cancelled();
    };
    if (cancelled()) return absl::CancelledError(absl::StrCat(request.url, ": cancelled"));
    // O_NONBLOCK: a FIFO put where a shard was must not hang the reader in open().
    const Fd fd(::open(PathOf(request.url).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (fd.get() < 0) return OpenError(request.url, "open failed", errno, request.may_be_absent);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return HostIoError(request.url, "fstat failed", errno);
    if (!S_ISREG(st.st_mode)) {
      return AsHostIoError(absl::InvalidArgumentError(absl::StrCat(request.url, ": not a file")));
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (request.size != 0 && size != request.size) {
      return ShardChangedError(request.url, absl::StrCat("its size is ", size, ", not the ",
                                                         request.size, " bytes indexed"));
    }
    if (!request.etag.empty() && FileETag(st) != request.etag) {
      return ShardChangedError(request.url, absl::StrCat("its ETag is ", FileETag(st), ", not ",
                                                         request.etag, " as indexed"));
    }
    const uint64_t end = request.to_end ? size : request.offset + request.length;
    if (request.offset > size || end > size || end < request.offset) {
      return AsHostIoError(
          absl::InvalidArgumentError(absl::StrCat(request.url, ": bytes [", request.offset, ", ",
                                                  end, ") are not within its ", size, " bytes")));
    }
    std::string buffer(std::min(kChunkBytes, end - request.offset), '\0');
    for (uint64_t at = request.offset; at < end;) {
      if (cancelled()) return absl::CancelledError(absl::StrCat(request.url, ": cancelled"));
      const size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), end - at));
      const ssize_t n = ::pread(fd.get(), buffer.data(), want, static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return HostIoError(request.url, "read failed", errno);
      if (n == 0) return ShardChangedError(request.url, "it shrank while being read");
      counters_.bytes += n;
      at += static_cast<uint64_t>(n);
      absl::Status taken = sink(absl::string_view(buffer.data(), static_cast<size_t>(n)));
      if (!taken.ok()) return taken;
    }
    return absl::OkStatus();
  }

  FetchCounters counters_;
};

class FileStore final : public internal::UnsignedUrlStore {
 public:
  explicit FileStore(const std::string& dir)
      : UnsignedUrlStore(absl::StrCat(kScheme, dir)), dir_(dir) {}

  absl::StatusOr<std::vector<RemoteObject>> ListShards() override {
    DIR* listing = ::opendir(dir_.c_str());
    if (listing == nullptr) {
      const int error = errno;
      if (error == ENOENT || error == ENOTDIR) {
        return absl::NotFoundError(absl::StrCat(root_, ": no such directory"));
      }
      return HostIoError(root_, "opendir failed", error);
    }
    std::vector<std::string> names;
    errno = 0;
    while (const struct dirent* entry = ::readdir(listing)) {
      if (internal::IsShardName(entry->d_name)) names.push_back(entry->d_name);
    }
    const int read_error = errno;
    ::closedir(listing);
    if (read_error != 0) return HostIoError(root_, "readdir failed", read_error);
    std::vector<RemoteObject> shards;
    for (const std::string& name : names) {
      struct stat st;
      if (::stat((dir_ + name).c_str(), &st) != 0) {
        return HostIoError(root_ + name, "stat failed", errno);
      }
      // Sub-directories named like shards are left out, as a local dataset leaves them.
      if (!S_ISREG(st.st_mode)) continue;
      shards.push_back(Object(name, static_cast<uint64_t>(st.st_size), FileETag(st)));
    }
    if (shards.empty()) return internal::NoShardsError(root_);
    return shards;
  }

  HttpFetcher& fetcher() override { return fetcher_; }

 private:
  const std::string dir_;  // with its trailing '/'
  LocalFileFetcher fetcher_;
};

absl::StatusOr<OpenedStore> OpenFromFlags(const DatasetUrl& url, const StoreFlags&, HttpFetcher*,
                                          const internal::ObjectStoreTuning&) {
  absl::StatusOr<std::unique_ptr<ObjectStore>> store = OpenFileStore(url);
  if (!store.ok()) return store.status();
  return OpenedStore{*std::move(store), ""};
}

}  // namespace

std::string FileETag(const struct stat& st) {
  const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return absl::StrFormat("\"%x-%x\"", static_cast<uint64_t>(st.st_size),
                         static_cast<uint64_t>(mtime_ns));
}

const StoreKind& FileStoreKind() {
  static constexpr StoreKind kKind{DatasetUrl::Kind::kFile, "file", nullptr, OpenFromFlags};
  return kKind;
}

absl::StatusOr<std::unique_ptr<ObjectStore>> OpenFileStore(const DatasetUrl& url) {
  if (url.kind != DatasetUrl::Kind::kFile) {
    return absl::InvalidArgumentError(absl::StrCat(url.text, ": not a file:// URL"));
  }
  std::string dir = url.dir;
  if (!absl::EndsWith(dir, "/")) dir.push_back('/');
  return std::make_unique<FileStore>(std::move(dir));
}

}  // namespace shardcast::remote

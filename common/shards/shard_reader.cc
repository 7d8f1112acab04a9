// Member reads for the serve path: one pread per member of a plain tar on a cached
// descriptor; gzip shards through a per-shard GzipIndex; every read checked against the
// shard's indexed identity afterwards.
#include "common/shards/shard_reader.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/shards/gzip_index.h"
#include "common/shards/shard_problems.h"

namespace shardcast {
namespace {

// Open descriptors kept: a dataset may have thousands of shards, more than the fd limit.
size_t MaxOpenFiles() {
  struct rlimit limit;
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 256;
  return std::clamp<size_t>(static_cast<size_t>(limit.rlim_cur) / 4, 8, 4096);
}

// Closed when the last reader drops it, so eviction never closes an fd mid-pread.
struct OpenFile {
  explicit OpenFile(int fd) : fd(fd) {}
  ~OpenFile() { ::close(fd); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  const int fd;
};

struct IndexedGzip {
  absl::Mutex mu;  // held by the one thread building the index; others wait on it
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::optional<GzipIndex> index;  // immutable once `done` with an OK status
  size_t bytes = 0;                // index->memory_bytes(), for the LRU's budget
};

template <typename T>
struct LruSlot {
  std::shared_ptr<T> value;
  uint64_t last_use = 0;
};

// Drops least recently used slots while `over(map)` says the map is too big (never
// the last one: the slot just used is needed).
template <typename T, typename Over>
void EvictWhile(std::map<uint32_t, LruSlot<T>>* map, Over over) {
  while (map->size() > 1 && over(*map)) {
    auto oldest = map->begin();
    for (auto it = map->begin(); it != map->end(); ++it) {
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    }
    map->erase(oldest);
  }
}

}  // namespace

class ShardReader::Impl {
 public:
  Impl(const DatasetIndex& index, size_t max_gzip_index_bytes)
      : index_(index),
        max_open_files_(MaxOpenFiles()),
        max_gzip_index_bytes_(max_gzip_index_bytes),
        problems_(index) {}

  absl::StatusOr<std::string> ReadMember(uint32_t shard, const MemberRef& member) {
    if (shard >= index_.shards.size()) {
      return absl::OutOfRangeError(absl::StrCat("shard number ", shard, " out of range (",
                                                index_.shards.size(), " shards)"));
    }
    const ShardInfo& info = index_.shards[shard];
    if (absl::Status changed = problems_.KnownChange(shard); !changed.ok()) return changed;
    absl::StatusOr<std::shared_ptr<OpenFile>> file = File(shard, info);
    if (!file.ok()) return NoteHostError(shard, info, file.status());
    absl::StatusOr<std::string> bytes =
        info.compressed ? ReadGzip(shard, info, **file, member) : ReadPlain(info, **file, member);
    // Checked after the read: the bytes are the indexed ones only if the file still is.
    if (absl::Status unchanged = CheckUnchanged(shard, info, **file); !unchanged.ok()) {
      return NoteHostError(shard, info, unchanged);
    }
    if (!bytes.ok()) return NoteHostError(shard, info, bytes.status());
    problems_.NoteReadable(shard);
    return bytes;
  }

  std::vector<UnreadableShard> UnreadableShards() const { return problems_.Unreadable(); }
  std::vector<ChangedShard> ChangedShards() const { return problems_.Changed(); }

 private:
  std::string ShardPath(const ShardInfo& info) const { return index_.root + "/" + info.path; }

  // Lists the shard as unreadable when `status` is a HostIoError; returns `status`.
  absl::Status NoteHostError(uint32_t shard, const ShardInfo& info, absl::Status status) {
    if (!IsHostIoError(status)) return status;
    std::string error(status.message());
    if (absl::StartsWith(error, ShardPath(info))) error.erase(0, ShardPath(info).size() + 2);
    problems_.NoteUnreadable(shard, std::move(error));
    return status;
  }

  std::string Where(const ShardInfo& info, const MemberRef& member) const {
    return absl::StrCat(ShardPath(info), ": member '.", member.ext, "' at offset ", member.offset,
                        " (", member.size, " bytes)");
  }

  absl::StatusOr<std::shared_ptr<OpenFile>> File(uint32_t shard, const ShardInfo& info) {
    {
      absl::MutexLock lock(&mu_);
      auto it = files_.find(shard);
      if (it != files_.end()) {
        it->second.last_use = ++clock_;
        return it->second.value;
      }
    }
    // Opened outside the lock: a slow filesystem must not stall reads of other shards.
    // O_NONBLOCK: a FIFO put in the shard's place must not block the open (it has
    // another identity, which CheckUnchanged reports); a regular file reads the same.
    const std::string path = ShardPath(info);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT) return RecordChange(shard, info, "the file was removed");
    if (fd < 0) {
      return HostIoError(path, "cannot open", errno);
    }
    auto file = std::make_shared<OpenFile>(fd);
    if (absl::Status unchanged = CheckUnchanged(shard, info, *file); !unchanged.ok()) {
      return unchanged;
    }
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = files_.emplace(shard, LruSlot<OpenFile>{file, ++clock_});
    if (!inserted) return it->second.value;  // another thread won the race: use its fd
    EvictWhile(&files_, [this](const auto& map) { return map.size() > max_open_files_; });
    return file;
  }

  absl::Status CheckUnchanged(uint32_t shard, const ShardInfo& info, const OpenFile& file) {
    struct stat st;
    if (::fstat(file.fd, &st) != 0) {
      return HostIoError(ShardPath(info), "cannot stat", errno);
    }
    std::string change = ShardChange(info, st);
    if (change.empty()) return absl::OkStatus();
    return RecordChange(shard, info, std::move(change));
  }

  // Makes the shard's change sticky (the first one found is kept) and returns its error.
  absl::Status RecordChange(uint32_t shard, const ShardInfo& info, std::string change) {
    absl::Status error = ShardChangedError(ShardPath(info), change);
    return problems_.RecordChange(shard, std::move(change), std::move(error));
  }

  absl::StatusOr<std::string> ReadPlain(const ShardInfo& info, const OpenFile& file,
                                        const MemberRef& member) {
    if (member.offset > info.file_size || member.size > info.file_size - member.offset) {
      return absl::DataLossError(absl::StrCat(Where(info, member), ": past the end of the ",
                                              info.file_size, "-byte shard"));
    }
    std::string out(member.size, '\0');
    size_t got = 0;
    while (got < member.size) {
      const ssize_t n = ::pread(file.fd, out.data() + got, member.size - got,
                                static_cast<off_t>(member.offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return HostIoError(Where(info, member), "read failed", errno);
      }
      if (n == 0) {
        return absl::DataLossError(absl::StrCat(Where(info, member), ": short read (", got,
                                                " bytes): the file shrank since indexing"));
      }
      got += static_cast<size_t>(n);
    }
    return out;
  }

  absl::StatusOr<std::string> ReadGzip(uint32_t shard, const ShardInfo& info, const OpenFile& file,
                                       const MemberRef& member) {
    std::shared_ptr<IndexedGzip> indexed;
    {
      absl::MutexLock lock(&mu_);
      LruSlot<IndexedGzip>& slot = gzip_[shard];
      if (slot.value == nullptr) slot.value = std::make_shared<IndexedGzip>();
      slot.last_use = ++clock_;
      indexed = slot.value;
    }
    {
      absl::MutexLock lock(&indexed->mu);
      if (!indexed->done) {
        absl::StatusOr<GzipIndex> built = GzipIndex::Build(file.fd);
        indexed->done = true;
        if (built.ok()) {
          indexed->bytes = built->memory_bytes();
          indexed->index.emplace(*std::move(built));
        } else {
          indexed->status = built.status();
        }
      }
      if (!indexed->status.ok()) {
        Forget(shard, indexed);  // let a later read try again
        return absl::Status(indexed->status.code(),
                            absl::StrCat(Where(info, member), ": ", indexed->status.message()));
      }
    }
    {
      absl::MutexLock lock(&mu_);
      EvictWhile(&gzip_, [this](const auto& map) {
        size_t total = 0;
        for (const auto& [unused, slot] : map) total += slot.value->bytes;
        return total > max_gzip_index_bytes_;
      });
    }
    // Checked before the buffer is allocated: the size comes from the index.
    const uint64_t stream_size = indexed->index->uncompressed_size();
    if (member.offset > stream_size || member.size > stream_size - member.offset) {
      return absl::DataLossError(absl::StrCat(Where(info, member), ": past the end of the ",
                                              stream_size, "-byte uncompressed stream"));
    }
    std::string out(member.size, '\0');
    absl::Status read = indexed->index->Read(file.fd, member.offset, member.size, out.data());
    if (!read.ok()) {
      return absl::Status(read.code(), absl::StrCat(Where(info, member), ": ", read.message()));
    }
    return out;
  }

  void Forget(uint32_t shard, const std::shared_ptr<IndexedGzip>& entry) {
    absl::MutexLock lock(&mu_);
    auto it = gzip_.find(shard);
    if (it != gzip_.end() && it->second.value == entry) gzip_.erase(it);
  }

  const DatasetIndex& index_;
  const size_t max_open_files_;
  const size_t max_gzip_index_bytes_;
  mutable absl::Mutex mu_;
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;  // LRU time: bumped on every use
  std::map<uint32_t, LruSlot<OpenFile>> files_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, LruSlot<IndexedGzip>> gzip_ ABSL_GUARDED_BY(mu_);
  ShardProblems problems_;
};

ShardReader::ShardReader(const DatasetIndex& index, size_t max_gzip_index_bytes)
    : impl_(std::make_unique<Impl>(index, max_gzip_index_bytes)) {}
ShardReader::~ShardReader() = default;

absl::StatusOr<std::string> ShardReader::ReadMember(uint32_t shard, const MemberRef& member) {
  return impl_->ReadMember(shard, member);
}

std::vector<ChangedShard> ShardReader::ChangedShards() const { return impl_->ChangedShards(); }

std::vector<UnreadableShard> ShardReader::UnreadableShards() const {
  return impl_->UnreadableShards();
}

}  // namespace shardcast

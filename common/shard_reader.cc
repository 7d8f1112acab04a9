// Member reads for the serve path: one pread per member of a plain tar on a cached
// descriptor; compressed shards are inflated once and kept in a small LRU.
#include "common/shard_reader.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/tar_reader.h"

namespace shardcast {
namespace {

// Inflated shards kept in memory. Each is a whole uncompressed shard (often hundreds of
// MB), so a few only; serve plain .tar shards where that matters.
constexpr size_t kMaxInflatedShards = 3;

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

struct InflatedShard {
  absl::Mutex mu;  // held by the one thread inflating; others wait on it
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::string data;  // immutable once `done`
};

template <typename T>
struct LruSlot {
  std::shared_ptr<T> value;
  uint64_t last_use = 0;
};

// Drops the least recently used slot when `map` holds more than `cap`.
template <typename T>
void EvictOver(std::map<uint32_t, LruSlot<T>>* map, size_t cap) {
  while (map->size() > cap) {
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
  explicit Impl(const DatasetIndex& index) : index_(index), max_open_files_(MaxOpenFiles()) {}

  absl::StatusOr<std::string> ReadMember(uint32_t shard, const MemberRef& member) {
    if (shard >= index_.shards.size()) {
      return absl::OutOfRangeError(absl::StrCat("shard number ", shard, " out of range (",
                                                index_.shards.size(), " shards)"));
    }
    const ShardInfo& info = index_.shards[shard];
    return info.compressed ? ReadInflated(shard, info, member) : ReadPlain(shard, info, member);
  }

 private:
  std::string ShardPath(const ShardInfo& info) const { return index_.root + "/" + info.path; }

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
    const std::string path = ShardPath(info);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return absl::UnavailableError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
    }
    auto file = std::make_shared<OpenFile>(fd);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      return absl::UnavailableError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
    }
    if (static_cast<uint64_t>(st.st_size) != info.file_size) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": changed since indexing (size ",
                                                        info.file_size, ", now ", st.st_size,
                                                        " bytes); rebuild the index"));
    }
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = files_.emplace(shard, LruSlot<OpenFile>{file, ++clock_});
    if (!inserted) return it->second.value;  // another thread won the race: use its fd
    EvictOver(&files_, max_open_files_);
    return file;
  }

  absl::StatusOr<std::string> ReadPlain(uint32_t shard, const ShardInfo& info,
                                        const MemberRef& member) {
    absl::StatusOr<std::shared_ptr<OpenFile>> file = File(shard, info);
    if (!file.ok()) return file.status();
    std::string out(member.size, '\0');
    size_t got = 0;
    while (got < member.size) {
      const ssize_t n = ::pread((*file)->fd, out.data() + got, member.size - got,
                                static_cast<off_t>(member.offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return absl::UnavailableError(
            absl::StrCat(Where(info, member), ": read failed: ", std::strerror(errno)));
      }
      if (n == 0) {
        return absl::DataLossError(absl::StrCat(Where(info, member), ": short read (", got,
                                                " bytes): the file shrank since indexing"));
      }
      got += static_cast<size_t>(n);
    }
    return out;
  }

  absl::StatusOr<std::string> ReadInflated(uint32_t shard, const ShardInfo& info,
                                           const MemberRef& member) {
    std::shared_ptr<InflatedShard> inflated;
    {
      absl::MutexLock lock(&mu_);
      LruSlot<InflatedShard>& slot = inflated_[shard];
      if (slot.value == nullptr) slot.value = std::make_shared<InflatedShard>();
      slot.last_use = ++clock_;
      inflated = slot.value;
      EvictOver(&inflated_, kMaxInflatedShards);
    }
    {
      absl::MutexLock lock(&inflated->mu);
      if (!inflated->done) {
        absl::StatusOr<std::string> data = InflateUnchanged(info);
        inflated->done = true;
        if (data.ok()) {
          inflated->data = *std::move(data);
        } else {
          inflated->status = data.status();
        }
      }
      if (!inflated->status.ok()) {
        Forget(shard, inflated);  // let a later read try again
        return absl::Status(inflated->status.code(),
                            absl::StrCat(Where(info, member), ": ", inflated->status.message()));
      }
    }
    const std::string& data = inflated->data;
    if (member.offset > data.size() || member.size > data.size() - member.offset) {
      return absl::DataLossError(absl::StrCat(Where(info, member), ": past the end of the ",
                                              data.size(), "-byte uncompressed stream"));
    }
    return data.substr(member.offset, member.size);
  }

  // The shard's uncompressed stream, provided the file still has its indexed size (a
  // replaced file would otherwise be served as if the old offsets still applied).
  absl::StatusOr<std::string> InflateUnchanged(const ShardInfo& info) const {
    const std::string path = ShardPath(info);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return absl::UnavailableError(absl::StrCat("cannot stat: ", std::strerror(errno)));
    }
    if (static_cast<uint64_t>(st.st_size) != info.file_size) {
      return absl::FailedPreconditionError(absl::StrCat("shard changed since indexing (size ",
                                                        info.file_size, ", now ", st.st_size,
                                                        " bytes); rebuild the index"));
    }
    return ReadUncompressedStream(path);
  }

  void Forget(uint32_t shard, const std::shared_ptr<InflatedShard>& entry) {
    absl::MutexLock lock(&mu_);
    auto it = inflated_.find(shard);
    if (it != inflated_.end() && it->second.value == entry) inflated_.erase(it);
  }

  const DatasetIndex& index_;
  const size_t max_open_files_;
  absl::Mutex mu_;
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;  // LRU time: bumped on every use
  std::map<uint32_t, LruSlot<OpenFile>> files_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, LruSlot<InflatedShard>> inflated_ ABSL_GUARDED_BY(mu_);
};

ShardReader::ShardReader(const DatasetIndex& index) : impl_(std::make_unique<Impl>(index)) {}
ShardReader::~ShardReader() = default;

absl::StatusOr<std::string> ShardReader::ReadMember(uint32_t shard, const MemberRef& member) {
  return impl_->ReadMember(shard, member);
}

}  // namespace shardcast

// The disk cache of remote bytes (see disk_cache.h).
#include "common/remote/disk_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/shards/shard_reader.h"
#include "common/util/digest.h"

namespace shardcast::remote {
namespace fs = std::filesystem;

namespace {
constexpr char kEntrySuffix[] = ".bin";
constexpr char kTemporaryPrefix[] = "tmp-";
constexpr size_t kHexDigits = 32;  // of a digest, and of a temporary name's random part

bool AllLowerHex(absl::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f'); });
}

// 128 random bits as hex: a name no other writer draws, whatever its host or PID.
std::string RandomHex() {
  uint64_t bits[2] = {0, 0};
  if (::getrandom(bits, sizeof(bits), 0) != static_cast<ssize_t>(sizeof(bits))) {
    std::random_device device;  // (getrandom missing: an old kernel)
    for (uint64_t& b : bits) b = (uint64_t{device()} << 32) ^ device();
  }
  return absl::StrFormat("%016x%016x", bits[0], bits[1]);
}
}  // namespace

absl::StatusOr<std::unique_ptr<DiskCache>> DiskCache::Open(const std::string& dir,
                                                           int64_t max_bytes) {
  if (max_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache size must be positive, not ", max_bytes, " bytes"));
  }
  const std::string own = absl::StrCat(dir, "/", kSubdirectory);
  std::error_code ec;
  fs::create_directories(own, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cache dir ", own, ": ", ec.message()));
  if (::access(own.c_str(), W_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cache dir ", own, ": not writable: ", std::strerror(errno)));
  }
  std::unique_ptr<DiskCache> cache(new DiskCache(dir, max_bytes));
  cache->LoadExisting();
  return cache;
}

DiskCache::DiskCache(std::string dir, int64_t max_bytes)
    : dir_(std::move(dir)),
      own_dir_(absl::StrCat(dir_, "/", kSubdirectory)),
      max_bytes_(max_bytes) {}

bool DiskCache::IsEntryName(const std::string& name) {
  return name.size() == kHexDigits + std::strlen(kEntrySuffix) &&
         absl::EndsWith(name, kEntrySuffix) &&
         AllLowerHex(absl::string_view(name).substr(0, kHexDigits));
}

bool DiskCache::IsTemporaryName(const std::string& name) {
  return name.size() == std::strlen(kTemporaryPrefix) + kHexDigits &&
         absl::StartsWith(name, kTemporaryPrefix) &&
         AllLowerHex(absl::string_view(name).substr(std::strlen(kTemporaryPrefix)));
}

void DiskCache::RemoveIfAbandoned(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) ::unlink(path.c_str());
  ::close(fd);  // (drops the lock)
}

std::string DiskCache::NameOf(const std::string& key) {
  Digest128 h;
  h.AddString("shardcast-cache");
  h.AddString(key);
  return h.Hex() + kEntrySuffix;
}

std::string DiskCache::PathOf(const std::string& name) const { return own_dir_ + "/" + name; }

void DiskCache::LoadExisting() {
  struct Found {
    std::string name;
    uint64_t size;
    int64_t mtime;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (fs::directory_iterator it(own_dir_, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (IsTemporaryName(name)) {
      RemoveIfAbandoned(it->path());  // a write a crashed run did not finish
      continue;
    }
    if (!IsEntryName(name)) continue;  // not the cache's: left alone
    found.push_back(Found{name, static_cast<uint64_t>(st.st_size), st.st_mtim.tv_sec});
  }
  // Oldest first, so that the newest end up at the front of the LRU.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  absl::MutexLock lock(&mu_);
  for (const Found& f : found) Insert(f.name, f.size);
  EvictFor(0);
}

void DiskCache::Touch(Entry& entry, const std::string& name) {
  lru_.erase(entry.lru);
  lru_.push_front(name);
  entry.lru = lru_.begin();
}

void DiskCache::Insert(const std::string& name, uint64_t size) {
  lru_.push_front(name);
  entries_[name] = Entry{PathOf(name), size, lru_.begin()};
  held_ += static_cast<int64_t>(size);
  counters_.bytes.store(held_, std::memory_order_relaxed);
  counters_.entries.store(static_cast<int64_t>(entries_.size()), std::memory_order_relaxed);
}

void DiskCache::Remove(const std::string& name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return;
  std::error_code ec;
  fs::remove(it->second.path, ec);
  held_ -= static_cast<int64_t>(it->second.size);
  lru_.erase(it->second.lru);
  entries_.erase(it);
  counters_.bytes.store(held_, std::memory_order_relaxed);
  counters_.entries.store(static_cast<int64_t>(entries_.size()), std::memory_order_relaxed);
}

void DiskCache::EvictFor(uint64_t size) {
  while (!lru_.empty() && held_ + static_cast<int64_t>(size) > max_bytes_) {
    Remove(lru_.back());
    counters_.evictions.fetch_add(1, std::memory_order_relaxed);
  }
}

std::optional<std::string> DiskCache::Get(const std::string& key, uint64_t size) {
  const std::string name = NameOf(key);
  std::string path;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (it == entries_.end() || it->second.size != size) {
      if (it != entries_.end()) Remove(name);
      counters_.misses.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    Touch(it->second, name);
    path = it->second.path;
  }
  std::string bytes(size, '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (!in || in.gcount() != static_cast<std::streamsize>(size) || in.peek() != EOF) {
    // Evicted meanwhile by another thread, or changed on disk: a miss.
    absl::MutexLock lock(&mu_);
    Remove(name);
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  counters_.hits.fetch_add(1, std::memory_order_relaxed);
  return bytes;
}

bool DiskCache::Contains(const std::string& key, uint64_t size) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(NameOf(key));
  return it != entries_.end() && it->second.size == size;
}

absl::StatusOr<DiskCache::Temporary> DiskCache::CreateTemporary() {
  Temporary made;
  made.path = absl::StrCat(own_dir_, "/", kTemporaryPrefix, RandomHex());
  // O_EXCL: a name drawn twice (it will not be) fails rather than shares a file.
  made.fd = ::open(made.path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (made.fd < 0) return HostIoError(made.path, "cannot create a cache file", errno);
  if (::flock(made.fd, LOCK_EX) != 0) {
    const int error = errno;
    ::close(made.fd);
    ::unlink(made.path.c_str());
    return HostIoError(made.path, "cannot lock a cache file", error);
  }
  return made;
}

void DiskCache::CountWriteError(const std::string& what) {
  counters_.write_errors.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  if (!warned_write_error_) {
    warned_write_error_ = true;
    std::fprintf(stderr,
                 "shardcast: warning: cache dir %s: %s (disk full?); "
                 "serving without caching what does not fit\n",
                 own_dir_.c_str(), what.c_str());
  }
}

void DiskCache::Put(const std::string& key, absl::string_view bytes) {
  if (static_cast<int64_t>(bytes.size()) > max_bytes_) return;
  absl::StatusOr<Temporary> temporary = CreateTemporary();
  if (!temporary.ok()) {
    CountWriteError(std::string(temporary.status().message()));
    return;
  }
  absl::string_view left = bytes;
  while (!left.empty()) {
    const ssize_t n = ::write(temporary->fd, left.data(), left.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      CountWriteError(absl::StrCat("write failed: ", std::strerror(errno)));
      ::unlink(temporary->path.c_str());
      ::close(temporary->fd);
      return;
    }
    left.remove_prefix(static_cast<size_t>(n));
  }
  Adopt(key, temporary->path);
  ::close(temporary->fd);  // after the rename: the lock covered the whole write
}

void DiskCache::Adopt(const std::string& key, const std::string& temporary_path) {
  const std::string name = NameOf(key);
  struct stat st;
  if (::stat(temporary_path.c_str(), &st) != 0) return;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  absl::MutexLock lock(&mu_);
  Remove(name);  // an older copy (never a different version: the key names it)
  if (static_cast<int64_t>(size) > max_bytes_) {
    std::error_code ec;
    fs::remove(temporary_path, ec);
    return;
  }
  EvictFor(size);
  if (std::rename(temporary_path.c_str(), PathOf(name).c_str()) != 0) {
    std::error_code ec;
    fs::remove(temporary_path, ec);
    counters_.write_errors.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Insert(name, size);
}

std::optional<std::string> DiskCache::Find(const std::string& key) {
  const std::string name = NameOf(key);
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  Touch(it->second, name);
  counters_.hits.fetch_add(1, std::memory_order_relaxed);
  return it->second.path;
}

}  // namespace shardcast::remote

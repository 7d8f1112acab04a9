// The disk cache of remote bytes (see disk_cache.h).
#include "common/remote/disk_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/util/digest.h"

namespace shardcast::remote {
namespace fs = std::filesystem;

namespace {
constexpr char kEntrySuffix[] = ".bin";
constexpr char kTemporaryPrefix[] = "tmp-";
}  // namespace

absl::StatusOr<std::unique_ptr<DiskCache>> DiskCache::Open(const std::string& dir,
                                                           int64_t max_bytes) {
  if (max_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache size must be positive, not ", max_bytes, " bytes"));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cache dir ", dir, ": ", ec.message()));
  if (::access(dir.c_str(), W_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cache dir ", dir, ": not writable: ", std::strerror(errno)));
  }
  std::unique_ptr<DiskCache> cache(new DiskCache(dir, max_bytes));
  cache->LoadExisting();
  return cache;
}

DiskCache::DiskCache(std::string dir, int64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {}

std::string DiskCache::NameOf(const std::string& key) {
  Digest128 h;
  h.AddString("shardcast-cache");
  h.AddString(key);
  return h.Hex() + kEntrySuffix;
}

std::string DiskCache::PathOf(const std::string& name) const { return dir_ + "/" + name; }

void DiskCache::LoadExisting() {
  struct Found {
    std::string name;
    uint64_t size;
    int64_t mtime;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    struct stat st;
    if (::stat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (absl::StartsWith(name, kTemporaryPrefix)) {
      fs::remove(it->path(), ec);  // a write the last run did not finish
      continue;
    }
    if (!absl::EndsWith(name, kEntrySuffix)) continue;
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

std::string DiskCache::TemporaryPath() {
  return absl::StrCat(dir_, "/", kTemporaryPrefix, ::getpid(), "-",
                      temporaries_.fetch_add(1, std::memory_order_relaxed));
}

void DiskCache::Put(const std::string& key, absl::string_view bytes) {
  if (static_cast<int64_t>(bytes.size()) > max_bytes_) return;
  const std::string temporary = TemporaryPath();
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(temporary, ec);
      counters_.write_errors.fetch_add(1, std::memory_order_relaxed);
      absl::MutexLock lock(&mu_);
      if (!warned_write_error_) {
        warned_write_error_ = true;
        std::fprintf(stderr, "shardcast: warning: cache dir %s: write failed (disk full?); "
                     "serving without caching what does not fit\n", dir_.c_str());
      }
      return;
    }
  }
  Adopt(key, temporary);
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

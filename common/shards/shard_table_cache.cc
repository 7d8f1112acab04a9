// The bounded LRU of decoded shard tables (see shard_table_cache.h).
#include "common/shards/shard_table_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/shards/shard_reader.h"

namespace shardcast {

IndexTables::~IndexTables() {
  if (fd >= 0) close(fd);
}

absl::Status IndexTables::Open(const std::string& file, uint64_t expected_size) {
  path = file;
  fd = open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return HostIoError(file, "open", errno);
  struct stat st;
  if (fstat(fd, &st) != 0) return HostIoError(file, "stat", errno);
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != expected_size) {
    return absl::FailedPreconditionError(
        absl::StrCat(file, ": not the index cache just read or written (", st.st_size,
                     " bytes, not ", expected_size, ")"));
  }
  return absl::OkStatus();
}

namespace {

// A table whose bytes changed under the server (the file ends early, fails a check)
// stays changed: retries read the same bytes. The cache file is set aside, renamed to
// PATH.corrupt, so the next start finds no cache and indexes the shards again (issue 46:
// "the cache entry is rebuilt at the next start"), while this server keeps reading the
// descriptor it has. Only the file this server opened is renamed: one another server
// already rebuilt (renamed over the path) is a sound cache and is left alone. Returns
// what the error message adds.
std::string SetAsideChangedCache(const IndexTables& tables) {
  struct stat opened;
  struct stat at_path;
  if (fstat(tables.fd, &opened) != 0 || stat(tables.path.c_str(), &at_path) != 0 ||
      opened.st_dev != at_path.st_dev || opened.st_ino != at_path.st_ino) {
    return "";
  }
  const std::string aside = tables.path + ".corrupt";
  if (rename(tables.path.c_str(), aside.c_str()) != 0) {
    return absl::StrCat("; setting the cache file aside failed (", strerror(errno),
                        "): remove it to have it rebuilt");
  }
  return absl::StrCat("; the cache file is set aside as ", aside, " and rebuilt at the next start");
}

absl::Status ChangedTableError(const IndexTables& tables, absl::string_view what) {
  return AsHostIoError(absl::UnavailableError(absl::StrCat(what, SetAsideChangedCache(tables))));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const LoadedShardTable>> ReadShardTable(
    std::shared_ptr<const IndexTables> tables, uint32_t shard) {
  if (shard >= tables->shards.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("shard ", shard, " of ", tables->shards.size(), " in the index tables"));
  }
  const ShardTableLocation& at = tables->shards[shard];
  const std::string where = absl::StrCat(tables->path, " (the table of shard ", shard, ")");
  // The size came from a file that was sound at start; bounded anyway, as nothing read
  // is trusted past its checks.
  if (at.size > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return AsHostIoError(absl::UnavailableError(absl::StrCat(where, ": ", at.size, " bytes")));
  }
  auto loaded = std::make_shared<LoadedShardTable>();
  loaded->bytes_.resize(at.size);
  size_t done = 0;
  while (done < at.size) {
    const ssize_t n = pread(tables->fd, loaded->bytes_.data() + done, at.size - done,
                            static_cast<off_t>(at.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return HostIoError(where, "read", errno);
    if (n == 0) {
      return ChangedTableError(
          *tables,
          absl::StrCat(where, ": the file ends before the table (", done, " of ", at.size,
                       " bytes read at ", at.offset, "): truncated since the server started"));
    }
    done += static_cast<size_t>(n);
  }
  loaded->exts_ = tables->exts;
  absl::StatusOr<CompactShardTable> opened =
      CompactShardTable::Open(loaded->bytes_, loaded->exts_.get(), at.limits);
  if (!opened.ok()) {
    return ChangedTableError(*tables, absl::StrCat(where, ": ", opened.status().message(),
                                                   " (the file changed since the server started)"));
  }
  if (opened->size() != at.samples) {
    return ChangedTableError(
        *tables, absl::StrCat(where, ": ", opened->size(), " samples, not ", at.samples));
  }
  loaded->table_.emplace(*std::move(opened));
  return loaded;
}

ShardTableCache::ShardTableCache(std::shared_ptr<const IndexTables> tables,
                                 int64_t memory_limit_bytes)
    : tables_(std::move(tables)), limit_(memory_limit_bytes) {
  stats_.limit_bytes = limit_;
}

void ShardTableCache::InsertLocked(uint32_t shard, std::shared_ptr<const LoadedShardTable> table) {
  if (held_.contains(shard)) return;  // loaded by another thread meanwhile
  stats_.memory_bytes += table->memory_bytes();
  lru_.emplace_front(shard, std::move(table));
  held_[shard] = lru_.begin();
  // The least recently used go first; the one just read stays even alone over the limit
  // (its caller holds it anyway), and goes at the next insert.
  while (stats_.memory_bytes > limit_ && lru_.size() > 1) {
    stats_.memory_bytes -= lru_.back().second->memory_bytes();
    held_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

absl::StatusOr<std::shared_ptr<const LoadedShardTable>> ShardTableCache::GetCounted(uint32_t shard,
                                                                                    bool count) {
  if (shard >= tables_->shards.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("shard ", shard, " of ", tables_->shards.size(), " in the index tables"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (auto it = held_.find(shard); it != held_.end()) {
      if (count) ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
    if (count) ++stats_.misses;
  }
  // Read outside the lock: other shards' lookups go on meanwhile. Two threads missing
  // the same shard at once both read it; the second insert finds it there.
  absl::StatusOr<std::shared_ptr<const LoadedShardTable>> loaded = ReadShardTable(tables_, shard);
  absl::MutexLock lock(&mu_);
  if (!loaded.ok()) {
    ++stats_.load_failures;
    return loaded.status();
  }
  ++stats_.loads;
  InsertLocked(shard, *loaded);
  return loaded;
}

absl::StatusOr<std::shared_ptr<const LoadedShardTable>> ShardTableCache::Get(uint32_t shard) {
  return GetCounted(shard, /*count=*/true);
}

absl::Status ShardTableCache::Prefetch(uint32_t shard) {
  return GetCounted(shard, /*count=*/false).status();
}

ShardTableCacheStats ShardTableCache::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace shardcast

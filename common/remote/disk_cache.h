// A bounded local disk cache of remote bytes (--cache-dir, --cache-size): the image
// members fetched from object storage, and whole .tar.gz objects, so that an epoch
// after the first reads nothing remote when the data fits. Least recently used entries
// go first.
#ifndef SHARDCAST_COMMON_REMOTE_DISK_CACHE_H_
#define SHARDCAST_COMMON_REMOTE_DISK_CACHE_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace shardcast::remote {

struct DiskCacheCounters {
  std::atomic<int64_t> hits{0};
  std::atomic<int64_t> misses{0};
  std::atomic<int64_t> bytes{0};    // gauge: bytes held
  std::atomic<int64_t> entries{0};  // gauge
  std::atomic<int64_t> evictions{0};
  std::atomic<int64_t> write_errors{0};  // a full or failing disk: the read still succeeds
};

// Thread-safe. Entries are files named by a digest of their key, so a key that names
// the object's identity (URL, ETag, size) and the range never returns bytes of
// another version. A file whose size is not the one asked for (a crash while writing
// is impossible: files are renamed into place, but the disk may lie) is dropped.
// Entries found at Open are kept (oldest modification first to go): a restarted
// server starts warm.
//
// The cache owns only its own files: they live in its own subdirectory of `dir`
// (kSubdirectory), and only names of its own patterns there (32 hex digits + ".bin",
// "tmp-" + 32 hex digits) are ever counted, evicted or removed; anything else in `dir`
// or the subdirectory is left alone. Temporary names carry 128 random bits, so caches
// sharing the directory (servers on other hosts, or in other PID namespaces) never
// write one file, and a temporary file is locked (flock) while it is written, so
// another cache's start removes only those a crash left.
class DiskCache {
 public:
  static constexpr char kSubdirectory[] = "shardcast-bytes";

  // Creates `dir` and its subdirectory when missing. INVALID_ARGUMENT for
  // max_bytes <= 0.
  static absl::StatusOr<std::unique_ptr<DiskCache>> Open(const std::string& dir, int64_t max_bytes);
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  // The entry's bytes when it is there with `size` bytes (a hit); nullopt otherwise.
  std::optional<std::string> Get(const std::string& key, uint64_t size);
  // Whether Get would hit, without reading or counting.
  bool Contains(const std::string& key, uint64_t size) const;
  // Stores `bytes` under `key`, evicting the least recently used entries to make room.
  // Entries larger than the whole cache are not kept. Never fails the caller: a write
  // error is counted and logged once.
  void Put(const std::string& key, absl::string_view bytes);

  // Whole files (a .tar.gz object): a new file to write the entry into, open for
  // reading and writing and locked until `fd` is closed; Adopt(key, path) moves it in
  // (close `fd` after: the lock keeps other caches' cleanup away until then). Open the
  // path Find returns; an entry evicted while open stays readable through the open
  // descriptor (unlinked, not truncated). A host error (UNAVAILABLE) when the file
  // cannot be made.
  struct Temporary {
    std::string path;
    int fd = -1;
  };
  absl::StatusOr<Temporary> CreateTemporary();
  void Adopt(const std::string& key, const std::string& temporary_path);
  std::optional<std::string> Find(const std::string& key);  // counts a hit or miss

  const DiskCacheCounters& counters() const { return counters_; }
  const std::string& dir() const { return dir_; }  // as given to Open
  int64_t max_bytes() const { return max_bytes_; }

 private:
  DiskCache(std::string dir, int64_t max_bytes);
  static bool IsEntryName(const std::string& name);
  static bool IsTemporaryName(const std::string& name);
  // Removes a temporary file nobody writes (its lock is free): a crashed writer's.
  static void RemoveIfAbandoned(const std::string& path);
  void CountWriteError(const std::string& what);
  struct Entry {
    std::string path;
    uint64_t size = 0;
    std::list<std::string>::iterator lru;  // position in lru_ (front = most recent)
  };
  std::string PathOf(const std::string& name) const;
  static std::string NameOf(const std::string& key);
  void LoadExisting();
  // Moves `name` to the front of the LRU.
  void Touch(Entry& entry, const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Insert(const std::string& name, uint64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Remove(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictFor(uint64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const std::string own_dir_;  // dir_/kSubdirectory: every file of the cache is here
  const int64_t max_bytes_;
  DiskCacheCounters counters_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);  // by file name
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  bool warned_write_error_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace shardcast::remote

#endif  // SHARDCAST_COMMON_REMOTE_DISK_CACHE_H_

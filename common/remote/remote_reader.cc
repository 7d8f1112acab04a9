// Reads of remote shards with read-ahead, coalescing and the disk cache (see
// remote_reader.h).
#include "common/remote/remote_reader.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/shards/gzip_index.h"
#include "common/shards/shard_problems.h"
#include "common/shards/shard_reader.h"

namespace shardcast::remote {
namespace {

// A member fetched ahead that nobody read for this long (its stream went away) gives
// its memory up to newer read-ahead.
constexpr absl::Duration kUnreadReadAheadAge = absl::Seconds(10);
// .tar.gz copies kept open at once (each a descriptor, and a seek index in memory).
constexpr size_t kMaxOpenCompressedCopies = 64;

using MemberKey = std::pair<uint32_t, uint64_t>;  // (shard, offset)

// A member being fetched ahead, or fetched and not yet read.
struct ReadAhead {
  uint64_t size = 0;
  bool done = false;
  absl::Status status;
  std::string bytes;
  absl::Time finished;
};

// One coalesced request: a range of one shard and the members inside it.
struct FetchJob {
  uint32_t shard = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::vector<MemberRef> members;
  bool whole_object = false;  // a .tar.gz: the object, into a local copy
};

// A .tar.gz shard copied whole to local disk, with its seek index.
struct CompressedCopy {
  absl::Mutex mu;  // held while the copy is made; readers wait on it
  bool ready ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  int fd = -1;  // immutable once ready; its seek index is in Impl::gzip_indexes_
  ~CompressedCopy() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

class RemoteReader::Impl {
 public:
  Impl(const DatasetIndex& index, std::unique_ptr<ObjectStore> store, DiskCache* cache,
       const RemoteReadOptions& options)
      : index_(index),
        store_(std::move(store)),
        cache_(cache),
        options_(options),
        gzip_indexes_(options.max_gzip_index_bytes),
        problems_(index) {
    for (int i = 0; i < std::max(1, options_.read_ahead_threads); ++i) {
      threads_.emplace_back([this] { FetchLoop(); });
    }
  }

  ~Impl() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    stop_.Cancel();
    for (std::thread& t : threads_) t.join();
  }

  absl::StatusOr<std::string> ReadMember(uint32_t shard, const MemberRef& member) {
    if (shard >= index_.shards.size()) {
      return absl::OutOfRangeError(absl::StrCat("shard number ", shard, " out of range (",
                                                index_.shards.size(), " shards)"));
    }
    const ShardInfo& info = index_.shards[shard];
    if (absl::Status changed = problems_.KnownChange(shard); !changed.ok()) return changed;
    if (!info.compressed &&
        (member.offset > info.file_size || member.size > info.file_size - member.offset)) {
      return absl::DataLossError(absl::StrCat(Where(info, member), ": past the end of the ",
                                              info.file_size, "-byte object"));
    }
    absl::StatusOr<std::string> bytes =
        info.compressed ? ReadCompressed(shard, info, member) : ReadPlain(shard, info, member);
    return Note(shard, std::move(bytes));
  }

  void Prefetch(absl::Span<const MemberLocation> members) {
    std::vector<MemberLocation> wanted;
    {
      absl::MutexLock lock(&mu_);
      ReleaseUnreadLocked();
      for (const MemberLocation& m : members) {
        if (m.shard >= index_.shards.size()) continue;
        const ShardInfo& info = index_.shards[m.shard];
        if (!problems_.KnownChange(m.shard).ok()) continue;
        if (info.compressed) {
          if (copies_.count(m.shard) == 0 && whole_queued_.insert(m.shard).second) {
            FetchJob job;
            job.shard = m.shard;
            job.whole_object = true;
            queue_.push_back(std::move(job));
          }
          continue;
        }
        if (m.member.size == 0) continue;  // read without a request (ReadPlain)
        const MemberKey key(m.shard, m.member.offset);
        if (read_ahead_.count(key) > 0) continue;
        if (cache_ != nullptr && cache_->Contains(CacheKey(info, m.member), m.member.size)) {
          continue;
        }
        if (held_ + static_cast<int64_t>(m.member.size) > options_.read_ahead_memory_bytes) {
          counters_.read_ahead_dropped.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        auto entry = std::make_shared<ReadAhead>();
        entry->size = m.member.size;
        read_ahead_.emplace(key, entry);
        held_ += static_cast<int64_t>(m.member.size);
        wanted.push_back(m);
      }
      counters_.read_ahead_bytes.store(held_, std::memory_order_relaxed);
      counters_.read_ahead_members.fetch_add(static_cast<int64_t>(wanted.size()),
                                             std::memory_order_relaxed);
      for (FetchJob& job : Coalesce(std::move(wanted))) queue_.push_back(std::move(job));
    }
  }

  std::vector<ChangedShard> ChangedShards() const { return problems_.Changed(); }
  std::vector<UnreadableShard> UnreadableShards() const { return problems_.Unreadable(); }

  const RemoteReadCounters& counters() const { return counters_; }

 private:
  std::string Where(const ShardInfo& info, const MemberRef& member) const {
    return absl::StrCat(index_.root, info.path, ": member '.", member.ext, "' at offset ",
                        member.offset, " (", member.size, " bytes)");
  }

  // The object's identity and the range: bytes of another version never match.
  std::string CacheKey(const ShardInfo& info, const MemberRef& member) const {
    return absl::StrCat(index_.root, info.path, "\n", info.etag, "\n", info.file_size, "\n",
                        member.offset, "\n", member.size);
  }

  RemoteObject ObjectOf(const ShardInfo& info) const {
    return store_->Object(info.path, info.file_size, info.etag);
  }

  // The request for a range of `info`, cancelled when the reader stops.
  RangeRequest RequestOf(const ShardInfo& info, uint64_t offset, uint64_t length) const {
    RangeRequest request = store_->Request(ObjectOf(info), offset, length);
    request.cancel = &stop_;
    return request;
  }

  // Records what the outcome says about the shard (changed, unreadable, fine again).
  absl::StatusOr<std::string> Note(uint32_t shard, absl::StatusOr<std::string> bytes) {
    if (bytes.ok()) {
      problems_.NoteReadable(shard);
    } else if (IsShardChanged(bytes.status())) {
      return problems_.RecordChange(shard, std::string(bytes.status().message()), bytes.status());
    } else if (IsHostIoError(bytes.status())) {
      problems_.NoteUnreadable(shard, std::string(bytes.status().message()));
    }
    return bytes;
  }

  absl::StatusOr<std::string> ReadPlain(uint32_t shard, const ShardInfo& info,
                                        const MemberRef& member) {
    // An empty member is its empty bytes: nothing to fetch, cache or fetch ahead.
    if (member.size == 0) return std::string();
    if (std::shared_ptr<ReadAhead> ahead = TakeReadAhead(MemberKey(shard, member.offset))) {
      if (ahead->status.ok()) {
        counters_.read_ahead_hits.fetch_add(1, std::memory_order_relaxed);
        return std::move(ahead->bytes);
      }
      if (IsShardChanged(ahead->status)) return ahead->status;
      // Another failure of the read-ahead: the read below tries again on its own.
    }
    const std::string key = CacheKey(info, member);
    if (cache_ != nullptr) {
      if (std::optional<std::string> cached = cache_->Get(key, member.size)) return *cached;
    }
    counters_.direct_reads.fetch_add(1, std::memory_order_relaxed);
    absl::StatusOr<std::string> bytes =
        store_->fetcher().Get(RequestOf(info, member.offset, member.size));
    if (!bytes.ok()) {
      return WithPayloads(bytes.status(),
                          absl::StrCat(Where(info, member), ": ", bytes.status().message()));
    }
    if (cache_ != nullptr) cache_->Put(key, *bytes);
    return bytes;
  }

  // `status` with `message` instead of its own, its payloads (changed, host I/O) kept.
  static absl::Status WithPayloads(const absl::Status& status, const std::string& message) {
    absl::Status out(status.code(), message);
    status.ForEachPayload(
        [&out](absl::string_view type, const absl::Cord& value) { out.SetPayload(type, value); });
    return out;
  }

  // The read-ahead entry of `key` once it is done (removed, its memory released), or
  // null when there is none.
  std::shared_ptr<ReadAhead> TakeReadAhead(const MemberKey& key) {
    absl::MutexLock lock(&mu_);
    auto it = read_ahead_.find(key);
    if (it == read_ahead_.end()) return nullptr;
    std::shared_ptr<ReadAhead> entry = it->second;
    const auto done = [&entry]() { return entry->done; };
    mu_.Await(absl::Condition(&done));
    // Erased by key again: a wait lets other threads change the map.
    auto again = read_ahead_.find(key);
    if (again != read_ahead_.end() && again->second == entry) {
      read_ahead_.erase(again);
      held_ -= static_cast<int64_t>(entry->size);
      counters_.read_ahead_bytes.store(held_, std::memory_order_relaxed);
    }
    return entry;
  }

  // Drops finished read-ahead nobody read for kUnreadReadAheadAge (a stream that was
  // cancelled), so that its memory serves the streams that read.
  void ReleaseUnreadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = options_.clock->Now();
    for (auto it = read_ahead_.begin(); it != read_ahead_.end();) {
      if (it->second->done && now - it->second->finished > kUnreadReadAheadAge) {
        held_ -= static_cast<int64_t>(it->second->size);
        it = read_ahead_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Sorted by place, neighbours merged into requests of at most max_request_bytes.
  std::vector<FetchJob> Coalesce(std::vector<MemberLocation> members) {
    std::sort(members.begin(), members.end(), [](const MemberLocation& a, const MemberLocation& b) {
      return std::make_pair(a.shard, a.member.offset) < std::make_pair(b.shard, b.member.offset);
    });
    std::vector<FetchJob> jobs;
    for (const MemberLocation& m : members) {
      const uint64_t end = m.member.offset + m.member.size;
      if (!jobs.empty()) {
        FetchJob& last = jobs.back();
        const uint64_t last_end = last.offset + last.length;
        if (last.shard == m.shard && m.member.offset >= last_end &&
            m.member.offset - last_end <= options_.coalesce_gap_bytes &&
            end - last.offset <= options_.max_request_bytes) {
          last.length = end - last.offset;
          last.members.push_back(m.member);
          continue;
        }
      }
      FetchJob job;
      job.shard = m.shard;
      job.offset = m.member.offset;
      job.length = m.member.size;
      job.members.push_back(m.member);
      jobs.push_back(std::move(job));
    }
    counters_.read_ahead_requests.fetch_add(static_cast<int64_t>(jobs.size()),
                                            std::memory_order_relaxed);
    return jobs;
  }

  void FetchLoop() {
    while (true) {
      FetchJob job;
      {
        absl::MutexLock lock(&mu_);
        const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || !queue_.empty();
        };
        mu_.Await(absl::Condition(&ready));
        if (stopping_) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      if (job.whole_object) {
        (void)Copy(job.shard);
      } else {
        RunFetch(job);
      }
    }
  }

  void RunFetch(const FetchJob& job) {
    const ShardInfo& info = index_.shards[job.shard];
    absl::StatusOr<std::string> range =
        store_->fetcher().Get(RequestOf(info, job.offset, job.length));
    if (!range.ok()) (void)Note(job.shard, range.status());
    std::vector<absl::StatusOr<std::string>> results;
    for (const MemberRef& member : job.members) {
      absl::StatusOr<std::string> bytes =
          range.ok()
              ? absl::StatusOr<std::string>(range->substr(member.offset - job.offset, member.size))
              : absl::StatusOr<std::string>(range.status());
      if (bytes.ok() && cache_ != nullptr) cache_->Put(CacheKey(info, member), *bytes);
      results.push_back(std::move(bytes));
    }
    absl::MutexLock lock(&mu_);
    const absl::Time now = options_.clock->Now();
    for (size_t i = 0; i < job.members.size(); ++i) {
      auto it = read_ahead_.find(MemberKey(job.shard, job.members[i].offset));
      if (it == read_ahead_.end() || it->second->done) continue;
      ReadAhead& entry = *it->second;
      entry.done = true;
      entry.finished = now;
      if (results[i].ok()) {
        entry.bytes = *std::move(results[i]);
      } else {
        entry.status = results[i].status();
      }
    }
  }

  // ---- .tar.gz shards: gzip has no random access without an index of the whole
  // stream, so the object is copied whole (into the disk cache when there is one),
  // once, and read as a local .tar.gz is.

  absl::StatusOr<std::string> ReadCompressed(uint32_t shard, const ShardInfo& info,
                                             const MemberRef& member) {
    absl::StatusOr<std::shared_ptr<CompressedCopy>> copy = Copy(shard);
    if (!copy.ok()) {
      return WithPayloads(copy.status(),
                          absl::StrCat(Where(info, member), ": ", copy.status().message()));
    }
    absl::StatusOr<std::shared_ptr<const GzipIndex>> index = GzipIndexOf(shard, (*copy)->fd);
    if (!index.ok()) {
      return WithPayloads(index.status(),
                          absl::StrCat(Where(info, member), ": ", index.status().message()));
    }
    const uint64_t stream_size = (*index)->uncompressed_size();
    if (member.offset > stream_size || member.size > stream_size - member.offset) {
      return absl::DataLossError(absl::StrCat(Where(info, member), ": past the end of the ",
                                              stream_size, "-byte uncompressed stream"));
    }
    std::string out(member.size, '\0');
    absl::Status read = (*index)->Read((*copy)->fd, member.offset, member.size, out.data());
    if (!read.ok())
      return WithPayloads(read, absl::StrCat(Where(info, member), ": ", read.message()));
    return out;
  }

  absl::StatusOr<std::shared_ptr<CompressedCopy>> Copy(uint32_t shard) {
    std::shared_ptr<CompressedCopy> copy;
    {
      absl::MutexLock lock(&mu_);
      std::shared_ptr<CompressedCopy>& slot = copies_[shard];
      if (slot == nullptr) slot = std::make_shared<CompressedCopy>();
      copy = slot;
      copy_use_[shard] = ++copy_clock_;
      while (copies_.size() > kMaxOpenCompressedCopies) {
        auto oldest =
            std::min_element(copy_use_.begin(), copy_use_.end(),
                             [](const auto& a, const auto& b) { return a.second < b.second; });
        copies_.erase(oldest->first);  // readers that hold it keep it alive
        copy_use_.erase(oldest);
      }
    }
    absl::MutexLock lock(&copy->mu);
    if (!copy->ready) {
      copy->status = MakeCopy(shard, copy.get());
      copy->ready = true;
    }
    if (!copy->status.ok()) {
      absl::Status failed = copy->status;
      absl::MutexLock map_lock(&mu_);
      auto it = copies_.find(shard);
      if (it != copies_.end() && it->second == copy)
        copies_.erase(it);  // the next read tries again
      whole_queued_.erase(shard);
      return failed;
    }
    return copy;
  }

  absl::Status MakeCopy(uint32_t shard, CompressedCopy* copy) {
    const ShardInfo& info = index_.shards[shard];
    const std::string key =
        absl::StrCat(index_.root, info.path, "\n", info.etag, "\n", info.file_size, "\nwhole");
    int fd = -1;
    if (cache_ != nullptr) {
      if (std::optional<std::string> path = cache_->Find(key)) {
        fd = ::open(path->c_str(), O_RDONLY | O_CLOEXEC);
      }
    }
    if (fd < 0) {
      absl::StatusOr<int> fetched = FetchWhole(info, key);
      if (!fetched.ok()) {
        (void)Note(shard, fetched.status());
        return fetched.status();
      }
      fd = *fetched;
    }
    copy->fd = fd;
    return GzipIndexOf(shard, fd).status();  // a copy that does not inflate is no copy
  }

  // The shard's seek index, within --gzip-index-memory with the other shards'.
  absl::StatusOr<std::shared_ptr<const GzipIndex>> GzipIndexOf(uint32_t shard, int fd) {
    absl::StatusOr<std::shared_ptr<const GzipIndex>> index = gzip_indexes_.Get(shard, fd);
    counters_.gzip_index_bytes.store(static_cast<int64_t>(gzip_indexes_.bytes()),
                                     std::memory_order_relaxed);
    return index;
  }

  // The object streamed into a new file: the cache's, or an unlinked temporary file
  // that lives as long as its descriptor. Returns the descriptor.
  absl::StatusOr<int> FetchWhole(const ShardInfo& info, const std::string& key) {
    std::string path;
    int fd = -1;
    if (cache_ != nullptr) {
      absl::StatusOr<DiskCache::Temporary> temporary = cache_->CreateTemporary();
      if (!temporary.ok()) return temporary.status();
      path = temporary->path;
      fd = temporary->fd;
    } else {
      const char* tmp = std::getenv("TMPDIR");
      path = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/shardcast-XXXXXX");
      fd = ::mkstemp(path.data());
      if (fd < 0) return HostIoError(path, "cannot create a local copy", errno);
      ::unlink(path.c_str());
    }
    absl::Status fetched =
        DownloadObject(*store_, ObjectOf(info), fd, path, /*hasher=*/nullptr, &stop_);
    if (!fetched.ok()) {
      ::close(fd);
      if (cache_ != nullptr) ::unlink(path.c_str());
      return fetched;
    }
    if (cache_ != nullptr) cache_->Adopt(key, path);  // the open descriptor stays valid
    return fd;
  }

  const DatasetIndex& index_;
  const std::unique_ptr<ObjectStore> store_;
  DiskCache* const cache_;
  const RemoteReadOptions options_;
  RemoteReadCounters counters_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // wakes FetchLoop's wait on mu_
  // Cancelled with stopping_: ends the fetches in flight (RangeRequest::cancel).
  util::CancelToken stop_;
  std::deque<FetchJob> queue_ ABSL_GUARDED_BY(mu_);
  std::map<MemberKey, std::shared_ptr<ReadAhead>> read_ahead_ ABSL_GUARDED_BY(mu_);
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of read_ahead_ entries
  std::map<uint32_t, std::shared_ptr<CompressedCopy>> copies_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, uint64_t> copy_use_ ABSL_GUARDED_BY(mu_);
  uint64_t copy_clock_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<uint32_t> whole_queued_ ABSL_GUARDED_BY(mu_);
  GzipIndexCache gzip_indexes_;
  ShardProblems problems_;
  std::vector<std::thread> threads_;  // last: started after everything they use
};

RemoteReader::RemoteReader(const DatasetIndex& index, std::unique_ptr<ObjectStore> store,
                           DiskCache* cache, const RemoteReadOptions& options)
    : impl_(std::make_unique<Impl>(index, std::move(store), cache, options)) {}
RemoteReader::~RemoteReader() = default;

absl::StatusOr<std::string> RemoteReader::ReadMember(uint32_t shard, const MemberRef& member) {
  return impl_->ReadMember(shard, member);
}
void RemoteReader::Prefetch(absl::Span<const MemberLocation> members) { impl_->Prefetch(members); }
std::vector<ChangedShard> RemoteReader::ChangedShards() const { return impl_->ChangedShards(); }
std::vector<UnreadableShard> RemoteReader::UnreadableShards() const {
  return impl_->UnreadableShards();
}
const RemoteReadCounters& RemoteReader::counters() const { return impl_->counters(); }

}  // namespace shardcast::remote

// Remote datasets of the server (see remote_storage.h).
#include "server/assembly/remote_storage.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/remote/object_store.h"
#include "common/remote/store_table.h"
#include "server/base/log.h"

namespace shardcast::server {

RemoteStorage::RemoteStorage(RemoteStorageOptions options) : options_(std::move(options)) {}
RemoteStorage::~RemoteStorage() = default;

absl::Status RemoteStorage::StartLocked() {
  if (fetcher_ != nullptr) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<remote::HttpFetcher>> fetcher =
      remote::HttpFetcher::Create(options_.fetch);
  if (!fetcher.ok()) return fetcher.status();
  if (!options_.cache_dir.empty()) {
    absl::StatusOr<std::unique_ptr<remote::DiskCache>> cache =
        remote::DiskCache::Open(options_.cache_dir, options_.cache_size_bytes);
    if (!cache.ok()) return cache.status();
    cache_ = *std::move(cache);
    LogInfo("cache",
            absl::StrCat("disk cache ", options_.cache_dir, ": ", cache_->counters().entries.load(),
                         " entries, ", cache_->counters().bytes.load(), " of ",
                         options_.cache_size_bytes, " bytes held from before"));
  }
  fetcher_ = *std::move(fetcher);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ServedDataset>> RemoteStorage::Load(const remote::DatasetUrl& url,
                                                                   const IndexOptions& options,
                                                                   size_t gzip_index_memory_bytes,
                                                                   int64_t index_memory_bytes) {
  remote::HttpFetcher* fetcher = nullptr;
  remote::DiskCache* cache = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status started = StartLocked(); !started.ok()) return started;
    fetcher = fetcher_.get();
    cache = cache_.get();
  }
  absl::StatusOr<remote::RemoteDataset> opened =
      remote::OpenRemoteDataset(url, options_.stores, fetcher, options,
                                [&url](const std::string& kind, const std::string& source) {
                                  LogInfo(kind, absl::StrCat(url.text, ": ", source));
                                });
  if (!opened.ok()) return opened.status();
  std::unique_ptr<remote::ObjectStore> store = std::move(opened->store);
  DatasetIndex index = std::move(opened->index);
  if (index.loaded_from_index_file) {
    LogInfo("index", absl::StrCat(url.text, ": loaded from ", index.root, kIndexFileName));
  }
  remote::RemoteReader* reader = nullptr;
  auto dataset = std::make_unique<ServedDataset>(
      std::move(index),
      [&](const DatasetIndex& served_index) {
        // One read-ahead thread per connection: each holds one request in flight, so
        // fewer threads would leave connections idle (8 capped a 50 ms store at 8
        // requests per round trip, docs/BENCHMARKS.md).
        remote::RemoteReadOptions read = options_.read;
        read.read_ahead_threads = options_.fetch.max_connections;
        read.max_gzip_index_bytes = gzip_index_memory_bytes;
        auto made =
            std::make_unique<remote::RemoteReader>(served_index, std::move(store), cache, read);
        reader = made.get();
        return made;
      },
      index_memory_bytes);
  absl::MutexLock lock(&mu_);
  readers_.push_back(reader);
  return dataset;
}

RemoteFigures RemoteStorage::Figures() const {
  absl::MutexLock lock(&mu_);
  RemoteFigures out;
  if (fetcher_ != nullptr) {
    const remote::FetchCounters& f = fetcher_->counters();
    out.fetching = true;
    out.requests = f.requests.load();
    out.bytes = f.bytes.load();
    out.retries = f.retries.load();
    out.failures = f.failures.load();
    out.requests_ok = f.requests_ok.load();
    out.fetch_seconds = static_cast<double>(f.latency_sum_us.load()) / 1e6;
    out.connections_in_use = f.connections_in_use.load();
  }
  for (const remote::RemoteReader* reader : readers_) {
    const remote::RemoteReadCounters& r = reader->counters();
    out.read_ahead_members += r.read_ahead_members.load();
    out.read_ahead_requests += r.read_ahead_requests.load();
    out.read_ahead_hits += r.read_ahead_hits.load();
    out.read_ahead_dropped += r.read_ahead_dropped.load();
    out.direct_reads += r.direct_reads.load();
    out.read_ahead_bytes += r.read_ahead_bytes.load();
  }
  if (cache_ != nullptr) {
    const remote::DiskCacheCounters& c = cache_->counters();
    out.caching = true;
    out.cache_limit_bytes = cache_->max_bytes();
    out.cache_bytes = c.bytes.load();
    out.cache_hits = c.hits.load();
    out.cache_misses = c.misses.load();
    out.cache_evictions = c.evictions.load();
    out.cache_write_errors = c.write_errors.load();
  }
  return out;
}

}  // namespace shardcast::server

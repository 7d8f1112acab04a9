// Datasets in object storage, as the server holds them (issue 27): the one HTTP
// fetcher and the one disk cache all remote datasets share, made when the first remote
// dataset is loaded (a server without one never touches libcurl), and their figures
// (serving/status_reply.cc puts them in the status reply).
#ifndef SHARDCAST_SERVER_ASSEMBLY_REMOTE_STORAGE_H_
#define SHARDCAST_SERVER_ASSEMBLY_REMOTE_STORAGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/remote/dataset_url.h"
#include "common/remote/disk_cache.h"
#include "common/remote/http_fetcher.h"
#include "common/remote/remote_reader.h"
#include "common/remote/s3_settings.h"
#include "server/assembly/remote_storage_options.h"
#include "server/assembly/served_dataset.h"

namespace shardcast::server {

// The remote reads' figures at one moment, summed over the datasets loaded.
struct RemoteFigures {
  bool fetching = false;  // the fetcher was made (a remote dataset was loaded)
  // The fetcher's FetchCounters, valid with `fetching`.
  int64_t requests = 0;
  int64_t bytes = 0;
  int64_t retries = 0;
  int64_t failures = 0;
  int64_t requests_ok = 0;
  double fetch_seconds = 0;  // the successful requests' time, summed
  int64_t connections_in_use = 0;
  // The readers' RemoteReadCounters, summed.
  int64_t read_ahead_members = 0;
  int64_t read_ahead_requests = 0;
  int64_t read_ahead_hits = 0;
  int64_t read_ahead_dropped = 0;
  int64_t direct_reads = 0;
  int64_t read_ahead_bytes = 0;
  bool caching = false;  // a disk cache is open (--cache-dir)
  // The disk cache's DiskCacheCounters and limit, valid with `caching`.
  int64_t cache_limit_bytes = 0;
  int64_t cache_bytes = 0;
  int64_t cache_hits = 0;
  int64_t cache_misses = 0;
  int64_t cache_evictions = 0;
  int64_t cache_write_errors = 0;
};

// Thread-safe.
class RemoteStorage {
 public:
  explicit RemoteStorage(RemoteStorageOptions options);
  ~RemoteStorage();
  RemoteStorage(const RemoteStorage&) = delete;
  RemoteStorage& operator=(const RemoteStorage&) = delete;

  // Lists and indexes the dataset at `url` (s3://..., http(s)://...) and returns it
  // with a reader of its shards. Errors name the URL: bad settings or cache dir
  // (INVALID_ARGUMENT), the store's refusal, no shard there. The seek indexes of its
  // .tar.gz shards are held to `gzip_index_memory_bytes`, and its shard tables (with an
  // index cache) to `index_memory_bytes`, as a local dataset's are.
  absl::StatusOr<std::unique_ptr<ServedDataset>> Load(const remote::DatasetUrl& url,
                                                      const IndexOptions& options,
                                                      size_t gzip_index_memory_bytes,
                                                      int64_t index_memory_bytes = 0);

  RemoteFigures Figures() const;

 private:
  // The fetcher and the cache, made on first use.
  absl::Status StartLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RemoteStorageOptions options_;
  mutable absl::Mutex mu_;
  std::unique_ptr<remote::HttpFetcher> fetcher_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<remote::DiskCache> cache_ ABSL_GUARDED_BY(mu_);
  // The readers of the datasets loaded (owned by their ServedDataset, which the
  // service keeps for the server's life), for their counters.
  std::vector<const remote::RemoteReader*> readers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_ASSEMBLY_REMOTE_STORAGE_H_

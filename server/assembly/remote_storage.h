// Datasets in object storage, as the server holds them (issue 27): the one HTTP
// fetcher and the one disk cache all remote datasets share, made when the first remote
// dataset is loaded (a server without one never touches libcurl), and their figures in
// the status reply.
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
#include "server/assembly/served_dataset.h"
#include "server/base/server_options.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::server {

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
  // .tar.gz shards are held to `gzip_index_memory_bytes`, as a local dataset's are.
  absl::StatusOr<std::unique_ptr<ServedDataset>> Load(const remote::DatasetUrl& url,
                                                      const IndexOptions& options,
                                                      size_t gzip_index_memory_bytes);

  void FillStatus(shardcast::v1::GetStatusResponse* response) const;

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

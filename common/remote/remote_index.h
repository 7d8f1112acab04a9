// The index of a dataset in object storage: listed with the store, then loaded from the
// local index cache, or from the dataset index file next to the shards (one GET), or
// built by streaming each shard once (in parallel) to a temporary file and scanning it
// as a local shard is scanned. The fingerprint is of the content, as for a directory:
// the same shards served from a directory and from a bucket plan the same batches.
#ifndef SHARDCAST_COMMON_REMOTE_REMOTE_INDEX_H_
#define SHARDCAST_COMMON_REMOTE_REMOTE_INDEX_H_

#include "absl/status/statusor.h"
#include "common/remote/object_store.h"
#include "common/shards/dataset_index.h"

namespace shardcast::remote {

// The index file is used when it lists exactly the listed names and sizes, for the
// shards whose listed ETag vouches for its record (BuildIndexFromListing); shards get
// the listing's ETags, which every later read is pinned to. An index file larger than
// an index of the listed shards can be (MaxIndexFileBytes, at most kMaxIndexFileBytes)
// is refused as it arrives, with a warning, and the shards are scanned. Temporary
// copies go to $TMPDIR and are removed after their scan (never more than
// IndexOptions::threads at once, default 8), each digested as it is downloaded. A
// shard the store fails to serve (after the fetcher's retries) fails indexing, naming
// the object and the status: it is never remembered as skipped. Errors name the
// store's root.
absl::StatusOr<DatasetIndex> BuildRemoteDatasetIndex(ObjectStore& store,
                                                     const IndexOptions& options);

// The largest index file accepted from a store.
inline constexpr uint64_t kMaxIndexFileBytes = uint64_t{1} << 30;

}  // namespace shardcast::remote

#endif  // SHARDCAST_COMMON_REMOTE_REMOTE_INDEX_H_

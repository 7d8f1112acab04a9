// The parts of a dataset's index that its cache file stores besides the samples: a
// shard's record, what was left out, and how the index is built. Below both
// dataset_index (the index in memory) and index_cache_format (its file), so that the
// file's format does not include the index it is read into.
#ifndef SHARDCAST_COMMON_SHARDS_INDEX_PARTS_H_
#define SHARDCAST_COMMON_SHARDS_INDEX_PARTS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/shards/sample_entry.h"

namespace shardcast {

struct ShardInfo {
  std::string path;  // relative to the dataset root, e.g. "shard-000001.tar"
  // The file's identity when it was indexed. The serve path compares all of it after
  // every read, so bytes of a file rewritten since are never served under the index's
  // offsets and labels (see ShardChange).
  uint64_t file_size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  uint64_t inode = 0;
  uint64_t device = 0;
  // A shard in object storage: its ETag when it was listed ("" for a local file, and for
  // a store that sends none); the reader pins every request to it and to file_size.
  std::string etag;
  // Lowercase hex MD5 of the file's bytes as they were indexed (a single-part S3
  // upload's ETag is the same digest). In the fingerprint: replicas whose bytes differ
  // anywhere, sizes equal, get different fingerprints. "" only for shards skipped
  // before their bytes could be read.
  std::string content_digest;
  bool compressed = false;  // .tar.gz / .tgz
  std::vector<SampleEntry> samples;
};

// A sample (or stray member) that did not make it into the index.
struct SkippedSample {
  std::string shard;   // shard path
  std::string key;     // sample key, or member name when no key could be formed
  std::string reason;  // e.g. "no image member", "duplicate extension 'jpg'"
};

// A shard file left out of the index as a whole (empty, unreadable, not a tar); the
// other shards are served.
struct SkippedShard {
  std::string path;        // relative to the dataset root, as ShardInfo::path
  std::string reason;      // e.g. "empty file (0 bytes)"
  uint64_t file_size = 0;  // when it was listed (0 when it could not be stat'ed)
  // What the skip was decided on (ShardInfo's fields; "" when unknown): an index file
  // keeps them so that its skip is trusted only for these bytes.
  std::string etag;
  std::string content_digest;
};

struct IndexOptions {
  // Field of the .json member holding the integer label (when there is no .cls).
  std::string label_field = "label";
  // A sample whose label is outside [0, max_classes) is skipped with that reason, and
  // an info.json "num_classes" above it is ignored: num_classes sizes the class-name
  // list and the trainer's last layer, so it is never taken from data unbounded.
  int32_t max_classes = kDefaultMaxClasses;
  // Where the index cache lives; empty = no cache. Never inside the dataset dir.
  std::string cache_dir;
  // Scanner threads; 0 = one per shard up to hardware concurrency.
  int threads = 0;
  // A server that reads samples back from the index cache as it serves them (its
  // --index-memory): a valid cache is read header first and its tables are left on
  // disk (DatasetIndex::samples_released, DatasetIndex::tables), so the start takes
  // time and memory that grow with the shards, not the samples.
  bool samples_on_disk = false;
  // When set and it becomes true, the scan stops within one tar member and
  // BuildDatasetIndex returns CANCELLED (a server told to stop while indexing).
  const std::atomic<bool>* cancelled = nullptr;
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARDS_INDEX_PARTS_H_

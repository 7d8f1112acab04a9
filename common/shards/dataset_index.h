// The dataset index: every usable sample of a directory of WebDataset shards, in the
// order the server and the planner see them, plus what was skipped and why.
#ifndef SHARDCAST_COMMON_SHARDS_DATASET_INDEX_H_
#define SHARDCAST_COMMON_SHARDS_DATASET_INDEX_H_

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/shards/index_parts.h"
#include "common/shards/sample_entry.h"

namespace shardcast {

struct IndexTables;  // shard_table_cache.h

struct DatasetIndex {
  // Absolute path of the dataset directory, or the URL of a remote dataset's root
  // ("s3://bucket/prefix/", "https://host/d/"): ShardInfo::path is relative to it.
  std::string root;
  std::vector<ShardInfo> shards;  // natural sorted order ("2" before "10")
  int64_t num_samples = 0;        // sum of shard sample counts
  int32_t num_classes = 0;        // info.json's, else max label + 1; 0 without labels
  // Whether the samples have images / labels. A dataset is served either way, but all
  // its samples are alike: when any sample has an image (a label), those without one
  // are skipped; when none has, all are kept with kNoImageMember (label -1). Image jobs
  // on a dataset without images, and classification on one without labels, are refused.
  bool has_images = false;
  bool has_labels = false;
  // By label, from json "class" when present: empty when no sample names its class,
  // else num_classes entries ("" for labels never named; the first name seen wins).
  std::vector<std::string> class_names;
  std::vector<SkippedSample> skipped;
  std::vector<SkippedShard> skipped_shards;  // in natural order; not in `shards`
  std::vector<std::string> warnings;         // e.g. info.json disagrees with the scan
  // Hex digest of the content the plan and the serve path use (shard names and sizes,
  // sample keys, labels, member offsets, label field); not of mtimes.
  std::string fingerprint;
  bool loaded_from_cache = false;
  bool loaded_from_index_file = false;  // the index file next to the shards (remote)
  // Where each served shard's compact table lies in the index cache file (by shard, in
  // `shards`' order), when the index was read from or written to its cache; nullptr
  // without a cache. What lets a server keep only counts in memory (ReleaseSamples) and
  // read a shard's samples back from the file (shard_table_cache.h).
  std::shared_ptr<const IndexTables> tables;
  // Set by ReleaseSamples: every ShardInfo::samples is empty, and what was derived from
  // them is kept below (the accessors read these then).
  bool samples_released = false;
  std::vector<uint32_t> released_sample_counts;
  std::map<std::string, int64_t> released_extension_counts;
  uint64_t released_largest_image_bytes = 0;

  // Per-shard sample counts, in shard order: all the planner needs.
  std::vector<uint32_t> ShardSampleCounts() const;
  // Samples holding each member extension ("jpg", "txt", "seg.png"; a sample holds an
  // extension at most once): what a job may ask for as fields.
  std::map<std::string, int64_t> MemberExtensionCounts() const;
  // The largest image member's size (0 without images).
  uint64_t LargestImageBytes() const;
};

// Keeps of `index` only what planning needs in memory (each shard's sample count, the
// extension counts, the largest image's size) and drops every ShardInfo::samples, when
// its samples can be read back from the index cache (index->tables); false (nothing
// dropped) without tables. Afterwards a shard's samples are read with ForEachSample or
// through a ShardTableCache.
bool ReleaseSamples(DatasetIndex* index);

// Calls fn(j, sample) for each sample of shard `shard` of `index` in order: from memory,
// or (released) from its table in the index cache file, read whole and checked. An
// error (a host error, IsHostIoError) when the table cannot be read or fails its checks.
absl::Status ForEachSample(const DatasetIndex& index, uint32_t shard,
                           absl::FunctionRef<void(uint32_t, const SampleEntry&)> fn);

// What scanning one shard's bytes found; BuildIndexFromListing merges them in shard
// order, so the index does not depend on which scan finished first.
struct ShardScanResult {
  // The shard could not be read at all: it is skipped with this reason (bad data: a
  // skip the index cache remembers), or, with `host_error`, indexing fails with it.
  absl::Status fatal;
  // `fatal` is the fault of the store or the host (a failed download, a read error),
  // not of the bytes: nothing is remembered, the next start asks again.
  bool host_error = false;
  std::string content_digest;  // ShardInfo::content_digest of the bytes scanned
  // Every sound sample, with or without an image or a label: whether those without are
  // served depends on the other shards (see DatasetIndex::has_images).
  std::vector<SampleEntry> samples;
  std::vector<std::string> class_names;  // by sample: its json "class", "" when none
  std::vector<SkippedSample> skipped;
  // By skipped sample: how many of `samples` precede it in the shard, so that the
  // samples the dataset's rules skip join `skipped` in archive order.
  std::vector<size_t> skipped_before;
  std::vector<std::string> warnings;
  bool compressed = false;
};

// Scans the tar (plain or gzip) at `path` holding the bytes of `shard`. With
// `check_identity`, the file at `path` is stat'ed afterwards and a shard that changed
// during the scan is fatal (a local dataset); a downloaded copy has no such identity.
// `content_digest` is the file's digest when the caller hashed the bytes as it wrote
// them (a download); when empty the file is read once more to digest it.
ShardScanResult ScanShardFile(const std::string& path, const ShardInfo& shard,
                              const IndexOptions& options, bool check_identity,
                              const std::string& content_digest = "");

// The shards of a dataset as listed, before they are scanned: a local directory
// (BuildDatasetIndex) or an object store (common/remote/remote_index.h).
struct ShardListing {
  std::string root;                    // DatasetIndex::root; keys the index cache
  std::vector<ShardInfo> shards;       // identities, no samples; any order (sorted here)
  std::vector<SkippedShard> unlisted;  // names that could not even be listed
  // Scans one listed shard (called from `IndexOptions::threads` threads at once).
  std::function<ShardScanResult(const ShardInfo&)> scan;
  // The dataset index file found next to the shards (SerializeIndexFile's format), if
  // any: used when it lists exactly these names and sizes, for the shards whose listed
  // ETag vouches for its record (see BuildIndexFromListing); the others are scanned.
  std::optional<std::string> index_file;
  // Why an index file that was there is not in `index_file` (too large, say): warned.
  std::string index_file_problem;
  bool local = false;  // a directory: info.json is read, the cache kept outside it
};

// The index of `listing`: from the index cache when it is valid for these shards
// (names, sizes, file identities or ETags), else from `listing.index_file` when that
// fits, else by scanning every shard; the cache is written afterwards. A shard's
// record in the index file is trusted only when the listing's ETag vouches for it: the
// ETag is the MD5 the file recorded (a single-part upload's), or the very ETag the file
// recorded (`shardcast-ctl index URL` records the ETags it saw); any other shard is
// scanned as without an index file. A name listed twice is an error (its samples would
// be served twice an epoch). A scan that fails for the store's or host's fault
// (ShardScanResult::host_error) fails indexing, naming the shard, and nothing is
// cached. Where some shards are scanned and the others taken from the file, class
// names are the file's first, a scanned shard's filling the labels the file did not
// name. Over all of it, scanned or read, the dataset's rules on samples without an
// image or a label apply (DatasetIndex::has_images). Errors and warnings otherwise as
// BuildDatasetIndex.
absl::StatusOr<DatasetIndex> BuildIndexFromListing(ShardListing listing,
                                                   const IndexOptions& options);

// The dataset index file that may be put next to the shards (shardcast-pack writes
// one, `shardcast-ctl index` makes one for shards that exist): the index's content
// (shard names and sizes, samples, skipped samples and shards, class names) without
// file identities or root, so it serves any copy of the same bytes, with each shard's
// content digest and (for an index of a store) the ETag it had. Its checksum and
// every offset are checked again when it is loaded. INVALID_ARGUMENT for samples no
// scan makes (SerializeScanOutcome).
// Written a piece at a time through `write`, one shard's samples in memory at most
// (read with ForEachSample: from the index cache when the index's samples are
// released), so that an index file of any dataset takes memory that grows with its
// shards.
absl::Status WriteIndexFile(const DatasetIndex& index, const IndexOptions& options,
                            absl::FunctionRef<absl::Status(absl::string_view)> write);
// The same, as one string.
absl::StatusOr<std::string> SerializeIndexFile(const DatasetIndex& index,
                                               const IndexOptions& options);
// The same, written to a temporary name and renamed to `path`.
absl::Status WriteIndexFileAt(const DatasetIndex& index, const IndexOptions& options,
                              const std::string& path);

// The most bytes an index file (or index cache) of `shards` can take: a sample's record
// is its key and a few numbers, and in a tar every sample takes at least two 512-byte
// headers holding the member names, so the records of a plain tar are smaller than the
// tar (a gzip shard gets room for a stream 64 times its size). A larger file is not an
// index of these shards and is refused before it is read.
uint64_t MaxIndexFileBytes(const std::vector<ShardInfo>& shards);

// The name of the dataset index file next to a remote dataset's shards.
inline constexpr char kIndexFileName[] = "shardcast-index.bin";

// Records the identity of the file `st` describes (size, mtime, ctime, inode, device)
// in `shard`.
void SetShardIdentity(const struct stat& st, ShardInfo* shard);

// Empty when `st` still describes the file indexed as `shard`; otherwise what changed,
// e.g. "mtime 1700000000.000000123 -> 1700000005.000000000". Timestamps are as fine as
// the filesystem keeps them: a rewrite within the same clock tick as the indexing stat
// keeps them (ext4's tick is a few milliseconds).
std::string ShardChange(const ShardInfo& shard, const struct stat& st);

// Scans (or loads from cache) the shards directly inside `dir`.
// Errors: the directory is missing/unreadable, contains no shard, or no shard could be
// read; CANCELLED when `options.cancelled` was set.
// A shard that cannot be read at all (0 bytes, unreadable, not a tar, changed while it
// was scanned) is left out, recorded in `skipped_shards` and warned about; a read that
// fails with an I/O error (EIO: the host's fault, not the data's) fails indexing
// instead, naming the shard, and is not cached; a bad sample
// is skipped and recorded in `skipped`. A cache whose contents do not fit the shard
// files (offsets past a file's end, impossible labels or counts) is ignored with a
// warning and rebuilt. A shard that breaks part-way (truncated, corrupt header)
// keeps the samples read completely before the break and adds a warning naming the
// shard and member; its last sample is skipped too unless the member cut short is
// known to begin another sample. Warnings are also logged to stderr, one line each.
absl::StatusOr<DatasetIndex> BuildDatasetIndex(const std::string& dir, const IndexOptions& options);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARDS_DATASET_INDEX_H_

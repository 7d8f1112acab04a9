// The compact per-shard sample table of issue 46: one shard's samples (keys, labels,
// members' offsets and sizes) in about 20 bytes per sample instead of the ~390 that
// SampleEntry holds in memory, checksummed on its own so that the serve path can read
// one shard's table from the index cache by offset, check it and look up sample j.
//
// The index cache holds one per shard (index_cache_format.h), and the server reads
// them back through a bounded cache (shard_table_cache.h).
//
// Layout of a shard table (varint = LEB128 of a uint64, at most 10 bytes, never
// overlong; fixed32 = 4 bytes little-endian). The encoding is one-to-one: the samples
// and the restart interval give exactly one table, which the decoder insists on.
//
//   "SCST" kTableVersion(1 byte)  magic and layout version
//   varint sample_count           <= 2^32 - 1
//   varint restart_interval       in [1, kMaxRestartInterval]
//   fixed32 restarts[ceil(sample_count / restart_interval)]
//                                 byte offset of sample k * interval in `records`
//   records                       sample_count records, back to back
//   16 bytes                      Digest128 (common/util/digest.h) of the binding (a
//                                 number the caller chooses, not stored) and all bytes
//                                 above
//
// A record:
//   varint shared      bytes of the previous key that this key starts with, all of
//                      them (0 at a restart, so a restart's record stands alone)
//   varint suffix_len, suffix bytes
//   varint zigzag(label)
//   varint image       0 = kNoImageMember, else image_member + 1
//   varint member_count
//   member_count x (varint ext_id, varint zigzag(offset - predicted), varint size)
//     predicted = RoundUp512(prev_end) + 512, the start of the next member's data in a
//     tar whose next header follows the previous member's padded data; prev_end is
//     the end (offset + size) of the previous member of the table, 0 at a restart. In a
//     tar written by GNU tar or webdataset's writer the difference is 0: one byte. The
//     arithmetic is modulo 2^64 so that every offset round-trips.
//
// Extensions are not stored in the table: members name them by their id in the
// dataset's ExtensionTable, which is serialised once per dataset (layout below).
#ifndef SHARDCAST_COMMON_SHARDS_COMPACT_SHARD_TABLE_H_
#define SHARDCAST_COMMON_SHARDS_COMPACT_SHARD_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/shards/sample_entry.h"

namespace shardcast {

inline constexpr uint8_t kTableVersion = 1;
// 8, not 16: a batch split by sample holds few samples of each shard, far apart, so
// each lookup decodes half an interval; at 16 that cost the server 3-5% of its rate
// against samples in memory, at 8 none measurable, for 1-1.7 more bytes a sample on
// disk (BENCHMARKS.md, "Serving rate from the tables"). Each table records its own.
inline constexpr uint32_t kDefaultRestartInterval = 8;
inline constexpr uint32_t kMaxRestartInterval = 1024;
// The Digest128 closing a table or an extension table.
inline constexpr size_t kTableChecksumBytes = 16;

// A dataset's member extensions, each stored once; members refer to one by its id (its
// position, in the order first interned). Ids never change once given, so tables
// encoded before an extension is added stay valid against the grown table.
//
// Serialised as "SCXT" kTableVersion, varint count, count x (varint length, bytes), and
// the Digest128 of all of it.
class ExtensionTable {
 public:
  ExtensionTable() = default;

  // The id of `ext`, added if new.
  uint32_t Intern(absl::string_view ext);
  // The id of `ext`, or -1 if it was never interned.
  int64_t Find(absl::string_view ext) const;
  // REQUIRES: id < size().
  const std::string& ext(uint32_t id) const { return exts_[id]; }
  uint32_t size() const { return static_cast<uint32_t>(exts_.size()); }

  std::string Serialize() const;
  // DATA_LOSS ("corrupt extension table: ...") for bytes that Serialize did not write:
  // a bad checksum or magic, a count or length past the bytes, trailing bytes, an
  // extension listed twice.
  static absl::StatusOr<ExtensionTable> Parse(absl::string_view bytes);

 private:
  std::vector<std::string> exts_;                   // by id
  absl::flat_hash_map<std::string, uint32_t> ids_;  // ext -> id
};

// `body` followed by its Digest128 under `binding`, as a table (an extension table:
// binding 0) closes: for the tests and the fuzzer, which edit tables on purpose and
// re-seal them so that what is tested is the validation behind the checksum.
std::string SealWithTableChecksum(std::string body, uint64_t binding = 0);

struct ShardTableEncodeOptions {
  // Samples per restart: a lookup decodes at most this many records.
  uint32_t restart_interval = kDefaultRestartInterval;
  // Hashed into the checksum, not stored: the caller's name for this table (say, a hash
  // of the index cache's identity and the shard's ordinal), given again to Open, so
  // that a sound table read from the wrong place (another shard's offset, a cache file
  // replaced while the server runs) fails the checksum instead of serving another
  // shard's samples.
  uint64_t binding = 0;
};

// The table of one shard's `samples` (in their order), interning their extensions into
// `*exts`. INVALID_ARGUMENT for samples that a decoder would refuse: an empty key, a
// label below -1, an image member that is not one of the sample's members, more than
// 2^32 - 1 samples or 4 GiB of records, a restart interval outside
// [1, kMaxRestartInterval].
absl::StatusOr<std::string> EncodeShardTable(absl::Span<const SampleEntry> samples,
                                             ExtensionTable* exts,
                                             const ShardTableEncodeOptions& options = {});

// What a decoded table must agree with: what the caller knows of the shard outside
// the table.
struct ShardTableLimits {
  // No member may end past this: the shard's size for a plain tar, its bound on the
  // uncompressed stream for a .tar.gz (index_cache_format.cc's kMaxDeflateRatio).
  uint64_t data_size = 0;
  // Labels lie in [-1, max_classes).
  int64_t max_classes = kDefaultMaxClasses;
  // The binding the table was encoded with (ShardTableEncodeOptions::binding).
  uint64_t binding = 0;
};

// A validated view of an encoded shard table. Open checks the whole table once (the
// checksum first, then every record), so lookups afterwards only fail on a j past the
// end; they still decode defensively and return DATA_LOSS rather than read out of range.
// Every count is bounded by the bytes left before anything is sized by it (a member
// takes at least 3 bytes, a record 5), so a table of N bytes never makes a sample of more
// than a small multiple of N bytes.
//
// The view holds pointers: `bytes` and `exts` must outlive it and stay unchanged.
class CompactShardTable {
 public:
  // DATA_LOSS ("corrupt shard table: ...") for bytes that EncodeShardTable did not
  // write for these extensions and limits: too short, bad checksum (another binding
  // included), magic or version,
  // a count, length, varint, restart offset or extension id out of range, an overlong
  // varint, a key that shares more than the previous key has (or less than it could),
  // an empty key, a label outside
  // [-1, max_classes), an image member that is not a member, a member past
  // limits.data_size, trailing bytes.
  static absl::StatusOr<CompactShardTable> Open(absl::string_view bytes, const ExtensionTable* exts,
                                                const ShardTableLimits& limits);

  uint32_t size() const { return count_; }
  uint32_t restart_interval() const { return interval_; }

  // Where the last lookup through it stopped, so that the next lookup of a later
  // sample of the same restart interval decodes on from there instead of from the
  // restart: a batch's samples of one shard looked up in increasing order (the serve
  // path sorts them) then decode about one record each, not up to restart_interval.
  // Bound to the table it was last used with; a cursor of another table (or a default
  // one) is ignored and overwritten.
  struct Cursor {
    const CompactShardTable* table = nullptr;
    uint32_t next = 0;      // the sample after the one last decoded
    size_t pos = 0;         // where its record starts in the records
    uint64_t prev_end = 0;  // the decoder's state there (DecodeState)
    std::string key;        // the key decoded last, which the next record's shares from
  };

  // Sample j, decoding at most one restart interval. OUT_OF_RANGE for j >= size().
  absl::StatusOr<SampleEntry> Lookup(uint32_t j) const;
  // Lookup into `*out`, reusing its allocations. With `cursor`, starts from it when it
  // stopped before j in j's restart interval, and leaves it after j: the same records
  // are decoded with the same checks, only fewer of them.
  absl::Status LookupInto(uint32_t j, SampleEntry* out, Cursor* cursor = nullptr) const;
  // Calls fn(j, sample) for every sample in order; `sample` is reused between calls.
  absl::Status ForEach(absl::FunctionRef<void(uint32_t, const SampleEntry&)> fn) const;

 private:
  CompactShardTable() = default;

  const ExtensionTable* exts_ = nullptr;  // the dataset's, not owned
  ShardTableLimits limits_;
  uint32_t count_ = 0;
  uint32_t interval_ = 1;
  absl::string_view restarts_;  // fixed32 offsets into records_
  absl::string_view records_;   // the records, checksum excluded
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARDS_COMPACT_SHARD_TABLE_H_

// The binary format of a scan's outcome, shared by the local index cache and the
// dataset index file next to a remote dataset's shards (kIndexFileName): a magic, the
// format version, length-prefixed little-endian fields, then a checksum of all of it.
// Parsing checks the checksum first, then every count and offset against the bytes
// left and the listed shards, so a file of N bytes never sizes more than a small
// multiple of N bytes of records and never points a read past a shard's end.
//
// This is the one place a field is added to the format (issue 37 adds member
// offsets): write it in SerializeScanOutcome, read and bound it in ParseScanOutcome,
// and bump kIndexVersion so that files of the old layout are rebuilt without
// complaint. Where the cache lives, when it is stale and how it is written are
// dataset_index.cc's.
#ifndef SHARDCAST_COMMON_SHARDS_INDEX_CACHE_FORMAT_H_
#define SHARDCAST_COMMON_SHARDS_INDEX_CACHE_FORMAT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/shards/compact_shard_table.h"
#include "common/shards/index_parts.h"
#include "common/shards/sample_entry.h"

namespace shardcast {

// Bump when the scan's rules or the format's layout change: old caches and index
// files are then rebuilt.
// 2: labels bounded by max_classes; 3: shard identity (ctime, inode), skipped shards;
// 4: ETags of remote shards; 5: content digests (MD5 of each shard's bytes), in the
// fingerprint; 6: samples without an image (kNoImageMember) or a label (-1) in datasets
// where none has one, webp images; 7: each shard's samples as a compact table
// (compact_shard_table.h) with its own checksum, after the shard records
inline constexpr uint32_t kIndexVersion = 7;

// Hashed into the content fingerprint (ContentFingerprint). Bump when what the same
// records mean to the planner or the serve path changes. Version 6 of the index only
// admits more datasets: an image dataset's records, and so its fingerprint and the
// checkpoints that hold it, stay those of version 5.
inline constexpr uint32_t kFingerprintVersion = 5;

// Where one shard's compact table lies in an index cache file, and what it must agree
// with when it is read there alone (ShardTableCache).
struct ShardTableLocation {
  uint64_t offset = 0;  // from the file's first byte
  uint64_t size = 0;    // the table's bytes, its checksum included
  uint32_t samples = 0;
  ShardTableLimits limits;  // the shard's data bound, max_classes, the table's binding
};

// The scan results that the format keeps (info.json checks are redone on every load).
struct ScanOutcome {
  std::vector<ShardInfo> shards;          // every listed shard, skipped ones included
  std::vector<std::string> skip_reasons;  // by shard: why it is left out, "" = served
  std::vector<SkippedSample> skipped;
  std::vector<std::string> class_names;  // by label, "" where unknown
  std::vector<std::string> warnings;
  int64_t max_label = -1;
  // Of an outcome read by ParseScanOutcome: by shard (skipped ones included), where its
  // table lies in the file read; and the dataset's extensions, which the tables name.
  std::vector<ShardTableLocation> tables;
  std::shared_ptr<const ExtensionTable> exts;
  // What the served samples give, kept in the file's header so that a reader that does
  // not decode the tables (ParseDepth::kHeader) has it: the content fingerprint (set by
  // the writer's caller, "" when not known: then a header-only read is refused as
  // stale), whether any sample has an image / a label, the samples holding each member
  // extension, the largest image member. SerializeScanOutcome computes all but the
  // fingerprint from the samples; a full parse checks them against the samples.
  std::string fingerprint;
  bool has_images = false;
  bool has_labels = false;
  std::map<std::string, int64_t> extension_counts;
  uint64_t largest_image_bytes = 0;
};

// How much of a file ParseScanOutcome reads.
enum class ParseDepth {
  kFull,    // the whole file's checksum, every table decoded into ShardInfo::samples
  kHeader,  // the header's own checksum and records; tables located, not read (a server
            // that reads them later, each checked against its own checksum)
};

// How a file's shard records are held against the listing.
enum class IndexRecordKind {
  kCache,      // the local index cache: every identity field must match the listing
  kIndexFile,  // an index file: names and sizes must match; ETags and digests are kept
               // as recorded, for the caller to check shard by shard
};

// A shard's samples as the index holds them (keys, labels, member offsets), written
// field by field into `out` (AddU64, AddString): the format's sample records, and what
// the content fingerprint digests, so both read exactly this.
template <typename Sink>
void AddSampleRecords(const std::vector<SampleEntry>& samples, Sink* out) {
  out->AddU64(samples.size());
  for (const SampleEntry& e : samples) {
    out->AddString(e.key);
    out->AddU64(static_cast<uint64_t>(e.label));
    out->AddU64(e.image_member);
    out->AddU64(e.members.size());
    for (const MemberRef& m : e.members) {
      out->AddString(m.ext);
      out->AddU64(m.offset);
      out->AddU64(m.size);
    }
  }
}

// What the served samples give that a reader of the header alone needs (the header's
// summary): whether any has an image / a label, the samples holding each member
// extension, the largest image member. Added shard by shard, in any order.
struct SampleSummary {
  bool has_images = false;
  bool has_labels = false;
  std::map<std::string, int64_t> extension_counts;
  uint64_t largest_image_bytes = 0;

  void Add(const std::vector<SampleEntry>& samples);
  bool operator==(const SampleSummary& o) const {
    return has_images == o.has_images && has_labels == o.has_labels &&
           extension_counts == o.extension_counts && largest_image_bytes == o.largest_image_bytes;
  }
};

// A cache file written a piece at a time (dataset_index.cc, when the samples stay on
// disk: issue 46's bounded indexing), byte for byte what SerializeScanOutcome writes:
// each shard's table encoded as soon as its samples are known (EncodeCacheTable, in
// shard order, into one ExtensionTable), then the header of the records
// (SerializeCacheHeader: `scan` without samples, its fingerprint set), the tables back
// to back after it, and the checksum record of all of it (SealWithChecksum's).
struct CacheTableRecord {
  uint64_t samples = 0;  // the shard's served samples
  uint64_t size = 0;     // its table's bytes
};
// Shard `ordinal`'s table of `shard.samples`, its extensions interned into `*exts`.
// INVALID_ARGUMENT as SerializeScanOutcome.
absl::StatusOr<std::string> EncodeCacheTable(const std::string& root, const IndexOptions& options,
                                             size_t ordinal, const ShardInfo& shard,
                                             ExtensionTable* exts);
// The header (every byte before the first table), `tables` by shard of `scan`.
std::string SerializeCacheHeader(const std::string& root, const IndexOptions& options,
                                 const ScanOutcome& scan,
                                 const std::vector<CacheTableRecord>& tables,
                                 const SampleSummary& summary, const ExtensionTable& exts);
// Where each table lies in the file whose header is `header_size` bytes.
std::vector<ShardTableLocation> LocateCacheTables(const std::string& root,
                                                  const IndexOptions& options,
                                                  const std::vector<ShardInfo>& shards,
                                                  uint64_t header_size,
                                                  const std::vector<CacheTableRecord>& tables);

// The format's pieces, for the tests and the fuzzer that edit files on purpose: a
// number as the format writes it (8 bytes, little-endian), and `body` closed with the
// checksum record of its bytes (kChecksumRecordBytes), so that a file tampered with
// on purpose passes the checksum and what is tested is the check behind it.
inline constexpr size_t kChecksumRecordBytes = 8 + 32;
std::string EncodeU64(uint64_t value);
std::string SealWithChecksum(std::string body);
// `body` (a file without its closing checksum record) with every shard table that its
// records place inside it sealed again with its own checksum under its binding, as
// SerializeScanOutcome seals it for `root` and `options`: so that a fuzzed table reaches
// the table's decoder, not only its checksum. Records that cannot be read are left as
// they are.
std::string ResealShardTables(std::string body, const std::string& root,
                              const IndexOptions& options);

// `scan` of the dataset at `root` ("" for an index file, which serves any copy) under
// `options` (its label field and max_classes are recorded: a scan under others is
// another scan). `scan.skip_reasons` has one entry per shard. INVALID_ARGUMENT for
// samples that no scan makes and the compact table cannot hold (EncodeShardTable: an
// empty key, a label below -1, an image member that is not a member).
//
// Layout (version 7): the magic and version; the header's size (every byte up to and
// including its checksum record, so that a reader of the header alone reads no more);
// root, label field, max_classes; per shard
// its identity, skip reason, sample count and where its table lies (offset from the
// first table, size); the skipped samples, class names, warnings and max label; the
// dataset's ExtensionTable; the tables' total size; each shard's compact table
// (compact_shard_table.h), back to back in shard order, each closed by its own
// checksum under a binding of the file's header and the shard's record and ordinal;
// then the checksum record of the whole file. A shard's table can so be read and
// checked alone, at its offset, once the records before the tables are read.
// With `tables` set, its `tables` and `exts` are those of the file written (as
// ParseScanOutcome gives them). `scan.fingerprint` is written as it is; the other
// summaries are computed from the samples.
absl::StatusOr<std::string> SerializeScanOutcome(const std::string& root,
                                                 const IndexOptions& options,
                                                 const ScanOutcome& scan,
                                                 ScanOutcome* tables = nullptr);

// SerializeScanOutcome's bytes for `scan`, handed to `write` a piece at a time, with
// each shard's samples fetched by `samples_of(ordinal, &samples)` instead of read from
// `scan.shards[i].samples` (ignored): twice per shard, once to size the tables (the
// header places them) and once to write them, so that one shard's samples at most are
// in memory: an index file of any dataset written in memory that grows with its shards.
// `scan.max_label` must be the samples' (as for SerializeScanOutcome). Errors: those of
// `samples_of` and `write`, and INVALID_ARGUMENT as SerializeScanOutcome.
using ShardSamplesFn = absl::FunctionRef<absl::Status(size_t, std::vector<SampleEntry>*)>;
absl::Status WriteScanOutcome(const std::string& root, const IndexOptions& options,
                              const ScanOutcome& scan, ShardSamplesFn samples_of,
                              absl::FunctionRef<absl::Status(absl::string_view)> write);

// The outcome `data` holds, when it was written for `root` and `options` and its shard
// records match `listed` (in listing order) as `kind` says. nullopt: a sound file of
// another version, root, label field, max_classes or listing (stale: rebuilt without
// complaint). DATA_LOSS ("corrupt index cache: ...") for a file that is not sound: too
// short, bad checksum, bad magic, a truncated record, trailing bytes, or contents that
// cannot be a scan's (a member past its shard's end, a label at or above max_classes,
// a skipped shard with samples, a max label that its samples do not give, samples
// without an image or a label beside samples with one, a shard table that is not where
// the records say or fails its checksum or its decoder's checks). With
// ParseDepth::kHeader, `data` may be the file's first bytes (its header, as its header
// size says) and `file_size` the whole file's size (0: data.size()).
absl::StatusOr<std::optional<ScanOutcome>> ParseScanOutcome(
    absl::string_view data, const std::string& root, const IndexOptions& options,
    const std::vector<ShardInfo>& listed, IndexRecordKind kind,
    ParseDepth depth = ParseDepth::kFull, uint64_t file_size = 0);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARDS_INDEX_CACHE_FORMAT_H_

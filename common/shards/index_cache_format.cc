// The index cache / index file format (see index_cache_format.h): magic, version, then
// length-prefixed fields, then a checksum of everything before it.
#include "common/shards/index_cache_format.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/shards/compact_shard_table.h"
#include "common/util/digest.h"

namespace shardcast {
namespace {

constexpr char kCacheMagic[8] = {'S', 'C', 'I', 'D', 'X', '\n', '\0', '\1'};
// Deflate cannot expand data more than about 1032:1, so no member of a gzip shard ends
// past this multiple of the compressed size: the bound a recorded offset is checked
// against where the uncompressed size is not known without inflating.
constexpr uint64_t kMaxDeflateRatio = 1032;

// The fewest bytes each record can take (its length prefixes and numbers, a non-empty
// name where one is required): a count read from the file is bounded by the bytes left
// divided by these before anything is sized by it, so a file of N bytes never makes
// more than a small multiple of N bytes of records.
constexpr size_t kMinShardRecordBytes = 12 * 8;
constexpr size_t kMinSkippedRecordBytes = 3 * 8;

class CacheWriter {
 public:
  void AddU64(uint64_t v) { out_.append(EncodeU64(v)); }
  void AddString(absl::string_view s) {
    AddU64(s.size());
    AddBytes(s);
  }
  void AddBytes(absl::string_view s) { out_.append(s.data(), s.size()); }
  uint64_t size() const { return out_.size(); }
  absl::string_view bytes() const { return out_; }
  void Patch(size_t at, uint64_t v) { out_.replace(at, 8, EncodeU64(v)); }
  std::string Finish() { return SealWithChecksum(std::move(out_)); }

 private:
  std::string out_;
};

class CacheParser {
 public:
  explicit CacheParser(absl::string_view data) : data_(data) {}
  bool U64(uint64_t* v) {
    if (pos_ + 8 > data_.size()) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i)
      *v |= static_cast<uint64_t>(static_cast<unsigned char>(data_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return true;
  }
  bool Str(std::string* s) {
    uint64_t n = 0;
    if (!U64(&n) || n > data_.size() - pos_) return false;
    s->assign(data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  // A count of items whose records take at least `min_record_bytes` each: bounded by
  // the bytes left, before anything is sized by it.
  bool Count(uint64_t* n, size_t min_record_bytes = 8) {
    return U64(n) && *n <= (data_.size() - pos_) / min_record_bytes;
  }
  size_t pos() const { return pos_; }

 private:
  absl::string_view data_;
  size_t pos_ = 0;
};

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("corrupt index cache: ", what));
}

// Whether the closing checksum is that of the bytes before it. Checked first:
// everything after it can trust lengths not to lie.
absl::Status CheckChecksum(absl::string_view data) {
  if (data.size() < kChecksumRecordBytes) return Corrupt("too short");
  CacheParser tail(data.substr(data.size() - kChecksumRecordBytes));
  std::string stored;
  if (!tail.Str(&stored)) return Corrupt("no checksum");
  Digest128 h;
  h.AddBytes(data.substr(0, data.size() - kChecksumRecordBytes));
  if (stored != h.Hex()) return Corrupt("checksum mismatch");
  return absl::OkStatus();
}

// Where member data of `shard` may lie: inside a plain tar; within deflate's largest
// expansion of a compressed one (the reader checks the exact end when it inflates).
uint64_t MemberDataBound(const ShardInfo& shard) {
  if (!shard.compressed) return shard.file_size;
  return shard.file_size > std::numeric_limits<uint64_t>::max() / kMaxDeflateRatio
             ? std::numeric_limits<uint64_t>::max()
             : shard.file_size * kMaxDeflateRatio;
}

// The binding of shard `ordinal`'s table (ShardTableEncodeOptions::binding): a digest
// of what the file says of the dataset and of that shard, so that a table read at
// another shard's offset, or from a file written for other shards or options, fails
// its checksum instead of decoding into another shard's samples.
// What names a shard's bytes (path, size, times, inode, ETag, digest, compression), in
// the header's order: written to the header's records and to a table's binding alike.
// `Sink` is the header's CacheWriter or a Digest128.
template <typename Sink>
void AddShardIdentity(const ShardInfo& s, Sink* sink) {
  sink->AddString(s.path);
  sink->AddU64(s.file_size);
  sink->AddU64(static_cast<uint64_t>(s.mtime_ns));
  sink->AddU64(static_cast<uint64_t>(s.ctime_ns));
  sink->AddU64(s.inode);
  sink->AddString(s.etag);
  sink->AddString(s.content_digest);
  sink->AddU64(s.compressed ? 1 : 0);
}

uint64_t TableBinding(const std::string& root, const IndexOptions& options, uint64_t ordinal,
                      const ShardInfo& s) {
  Digest128 h;
  h.AddU64(kIndexVersion);
  h.AddString(root);
  h.AddString(options.label_field);
  h.AddU64(static_cast<uint64_t>(options.max_classes));
  h.AddU64(ordinal);
  AddShardIdentity(s, &h);
  uint64_t binding = 0;
  const std::string hex = h.Hex();
  for (size_t i = 16; i < 32; ++i) {
    binding =
        binding << 4 | static_cast<uint64_t>(hex[i] <= '9' ? hex[i] - '0' : hex[i] - 'a' + 10);
  }
  return binding;
}

SampleSummary Summarize(const ScanOutcome& scan) {
  SampleSummary s;
  for (const ShardInfo& shard : scan.shards) s.Add(shard.samples);
  return s;
}

// The header's checksum: the Digest128 (hex) of every byte before it.
std::string HeadChecksum(absl::string_view head) {
  Digest128 h;
  h.AddBytes(head);
  return h.Hex();
}

// Decodes `shard`'s table (its checksum, then every record bounded by the table's
// Open: a key, a label below max_classes, an image member among its members, members
// inside the shard's data) into shard.samples.
absl::Status DecodeShardTable(absl::string_view table, const ExtensionTable& exts,
                              const ShardTableLimits& limits, uint64_t samples, ShardInfo& shard,
                              int64_t* max_label) {
  absl::StatusOr<CompactShardTable> opened = CompactShardTable::Open(table, &exts, limits);
  if (!opened.ok()) return Corrupt(absl::StrCat(shard.path, ": ", opened.status().message()));
  if (opened->size() != samples) {
    return Corrupt(
        absl::StrCat(shard.path, ": a table of ", opened->size(), " samples, not ", samples));
  }
  shard.samples.resize(samples);
  absl::Status decoded = opened->ForEach([&](uint32_t j, const SampleEntry& e) {
    shard.samples[j] = e;
    *max_label = std::max(*max_label, e.label);
  });
  if (!decoded.ok()) return Corrupt(absl::StrCat(shard.path, ": ", decoded.message()));
  return absl::OkStatus();
}

// The dataset rules the scan applied (dataset_index.cc): when any sample has an image
// (a label), every sample has one.
absl::Status CheckDatasetRules(const ScanOutcome& scan) {
  bool images = false, no_images = false, labels = false, no_labels = false;
  for (const ShardInfo& shard : scan.shards) {
    for (const SampleEntry& e : shard.samples) {
      (ImageMember(e) != nullptr ? images : no_images) = true;
      (e.label >= 0 ? labels : no_labels) = true;
    }
  }
  if (images && no_images) return Corrupt("samples without an image beside samples with one");
  if (labels && no_labels) return Corrupt("samples without a label beside samples with one");
  return absl::OkStatus();
}

// Reads the skipped samples, class names, warnings and max label that follow the shard
// records, and checks the class names against the max label (which the caller checks
// against the samples).
absl::Status ParseTrailer(const IndexOptions& options, CacheParser& p, ScanOutcome& scan) {
  uint64_t n = 0;
  if (!p.Count(&n, kMinSkippedRecordBytes)) return Corrupt("skipped count");
  scan.skipped.resize(n);
  for (SkippedSample& s : scan.skipped) {
    if (!p.Str(&s.shard) || !p.Str(&s.key) || !p.Str(&s.reason)) return Corrupt("skipped");
  }
  if (!p.Count(&n)) return Corrupt("class count");
  scan.class_names.resize(n);
  for (std::string& name : scan.class_names) {
    if (!p.Str(&name)) return Corrupt("class name");
  }
  if (!p.Count(&n)) return Corrupt("warning count");
  scan.warnings.resize(n);
  for (std::string& warning : scan.warnings) {
    if (!p.Str(&warning)) return Corrupt("warning");
  }
  uint64_t max_label = 0;
  if (!p.U64(&max_label)) return Corrupt("max label");
  // Checked against the samples' own once their tables are decoded (ParseScanOutcome).
  scan.max_label = static_cast<int64_t>(max_label);
  if (scan.max_label < -1 || scan.max_label >= options.max_classes) return Corrupt("max label");
  if (!scan.class_names.empty() &&
      scan.class_names.size() != static_cast<size_t>(scan.max_label + 1)) {
    return Corrupt(
        absl::StrCat(scan.class_names.size(), " class names for labels up to ", scan.max_label));
  }
  return absl::OkStatus();
}

}  // namespace

void SampleSummary::Add(const std::vector<SampleEntry>& samples) {
  for (const SampleEntry& e : samples) {
    if (const MemberRef* image = ImageMember(e); image != nullptr) {
      has_images = true;
      largest_image_bytes = std::max(largest_image_bytes, image->size);
    }
    has_labels = has_labels || e.label >= 0;
    for (const MemberRef& m : e.members) ++extension_counts[m.ext];
  }
}

absl::StatusOr<std::string> EncodeCacheTable(const std::string& root, const IndexOptions& options,
                                             size_t ordinal, const ShardInfo& shard,
                                             ExtensionTable* exts) {
  ShardTableEncodeOptions table_options;
  table_options.binding = TableBinding(root, options, ordinal, shard);
  absl::StatusOr<std::string> table = EncodeShardTable(shard.samples, exts, table_options);
  if (!table.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(shard.path, ": ", table.status().message()));
  }
  return table;
}

std::string SerializeCacheHeader(const std::string& root, const IndexOptions& options,
                                 const ScanOutcome& scan,
                                 const std::vector<CacheTableRecord>& tables,
                                 const SampleSummary& summary, const ExtensionTable& exts) {
  CacheWriter w;
  w.AddString(absl::string_view(kCacheMagic, sizeof(kCacheMagic)));
  w.AddU64(kIndexVersion);
  const size_t head_size_at = w.size();
  w.AddU64(0);  // the header's size, known once it is written
  w.AddString(root);
  w.AddString(options.label_field);
  w.AddU64(static_cast<uint64_t>(options.max_classes));
  w.AddU64(scan.shards.size());
  uint64_t table_offset = 0;
  for (size_t i = 0; i < scan.shards.size(); ++i) {
    const ShardInfo& s = scan.shards[i];
    AddShardIdentity(s, &w);
    w.AddString(scan.skip_reasons[i]);
    w.AddU64(tables[i].samples);
    w.AddU64(table_offset);
    w.AddU64(tables[i].size);
    table_offset += tables[i].size;
  }
  w.AddU64(scan.skipped.size());
  for (const SkippedSample& s : scan.skipped) {
    w.AddString(s.shard);
    w.AddString(s.key);
    w.AddString(s.reason);
  }
  w.AddU64(scan.class_names.size());
  for (const std::string& name : scan.class_names) w.AddString(name);
  w.AddU64(scan.warnings.size());
  for (const std::string& warning : scan.warnings) w.AddString(warning);
  w.AddU64(static_cast<uint64_t>(scan.max_label));
  w.AddString(scan.fingerprint);
  w.AddU64((summary.has_images ? 1 : 0) | (summary.has_labels ? 2 : 0));
  w.AddU64(summary.largest_image_bytes);
  w.AddU64(summary.extension_counts.size());
  for (const auto& [ext, count] : summary.extension_counts) {
    w.AddString(ext);
    w.AddU64(static_cast<uint64_t>(count));
  }
  w.AddString(exts.Serialize());
  w.AddU64(table_offset);
  w.Patch(head_size_at, w.size() + 8 + 32);  // the checksum record closes the header
  w.AddString(HeadChecksum(w.bytes()));
  return std::string(w.bytes());
}

std::vector<ShardTableLocation> LocateCacheTables(const std::string& root,
                                                  const IndexOptions& options,
                                                  const std::vector<ShardInfo>& shards,
                                                  uint64_t header_size,
                                                  const std::vector<CacheTableRecord>& tables) {
  std::vector<ShardTableLocation> located;
  uint64_t at = header_size;
  for (size_t i = 0; i < shards.size(); ++i) {
    ShardTableLimits limits;
    limits.data_size = MemberDataBound(shards[i]);
    limits.max_classes = options.max_classes;
    limits.binding = TableBinding(root, options, i, shards[i]);
    located.push_back(
        ShardTableLocation{at, tables[i].size, static_cast<uint32_t>(tables[i].samples), limits});
    at += tables[i].size;
  }
  return located;
}

absl::StatusOr<std::string> SerializeScanOutcome(const std::string& root,
                                                 const IndexOptions& options,
                                                 const ScanOutcome& scan, ScanOutcome* tables_out) {
  // The tables first: the shard records say where each lies and how long it is.
  ExtensionTable exts;
  std::vector<std::string> tables(scan.shards.size());
  std::vector<CacheTableRecord> records;
  for (size_t i = 0; i < scan.shards.size(); ++i) {
    absl::StatusOr<std::string> table = EncodeCacheTable(root, options, i, scan.shards[i], &exts);
    if (!table.ok()) return table.status();
    tables[i] = *std::move(table);
    records.push_back(CacheTableRecord{scan.shards[i].samples.size(), tables[i].size()});
  }
  CacheWriter w;
  w.AddBytes(SerializeCacheHeader(root, options, scan, records, Summarize(scan), exts));
  if (tables_out != nullptr) {
    tables_out->tables = LocateCacheTables(root, options, scan.shards, w.size(), records);
    tables_out->exts = std::make_shared<const ExtensionTable>(exts);
  }
  for (const std::string& table : tables) w.AddBytes(table);
  return w.Finish();
}

absl::Status WriteScanOutcome(const std::string& root, const IndexOptions& options,
                              const ScanOutcome& scan, ShardSamplesFn samples_of,
                              absl::FunctionRef<absl::Status(absl::string_view)> write) {
  ExtensionTable exts;  // ids never change: both passes encode with the same ones
  SampleSummary summary;
  // Shard i's table; its sample count in `*samples` and, on the first pass, its
  // samples added to the header's summary.
  auto encode = [&](size_t i, bool first_pass, uint64_t* samples) -> absl::StatusOr<std::string> {
    ShardInfo shard = scan.shards[i];
    if (absl::Status got = samples_of(i, &shard.samples); !got.ok()) return got;
    if (first_pass) summary.Add(shard.samples);
    *samples = shard.samples.size();
    return EncodeCacheTable(root, options, i, shard, &exts);
  };
  // First pass: each table's size and the summary, for the header.
  std::vector<CacheTableRecord> records(scan.shards.size());
  for (size_t i = 0; i < scan.shards.size(); ++i) {
    absl::StatusOr<std::string> table = encode(i, /*first_pass=*/true, &records[i].samples);
    if (!table.ok()) return table.status();
    records[i].size = table->size();
  }
  Digest128 h;
  auto emit = [&](absl::string_view piece) {
    h.AddBytes(piece);
    return write(piece);
  };
  if (absl::Status s = emit(SerializeCacheHeader(root, options, scan, records, summary, exts));
      !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < scan.shards.size(); ++i) {
    uint64_t samples = 0;
    absl::StatusOr<std::string> table = encode(i, /*first_pass=*/false, &samples);
    if (!table.ok()) return table.status();
    if (samples != records[i].samples || table->size() != records[i].size) {
      return absl::FailedPreconditionError(absl::StrCat(
          scan.shards[i].path, ": its samples changed while the index file was written"));
    }
    if (absl::Status s = emit(*table); !s.ok()) return s;
  }
  const std::string hex = h.Hex();
  return write(EncodeU64(hex.size()) + hex);
}

namespace {

// Reads the header's opening: the magic, the version, the header's size, and whose
// index it is. False (nothing to complain of: the cache is rebuilt) for another layout
// or another dataset; a corrupt header is an error.
absl::StatusOr<bool> ParseHeaderOpening(CacheParser& p, const std::string& root,
                                        const IndexOptions& options,
                                        const std::vector<ShardInfo>& listed, uint64_t total,
                                        uint64_t* head_size, uint64_t* n) {
  std::string magic, stored_root, label_field;
  uint64_t version = 0, max_classes = 0;
  if (!p.Str(&magic) || magic != absl::string_view(kCacheMagic, sizeof(kCacheMagic))) {
    return Corrupt("bad magic");
  }
  if (!p.U64(&version) || version != kIndexVersion) {
    return false;  // another layout: rebuild without complaint
  }
  if (!p.U64(head_size) || *head_size > total - kChecksumRecordBytes) {
    return Corrupt("header size");
  }
  if (!p.Str(&stored_root) || !p.Str(&label_field) || !p.U64(&max_classes) ||
      !p.Count(n, kMinShardRecordBytes)) {
    return Corrupt("header");
  }
  return stored_root == root && label_field == options.label_field &&
         max_classes == static_cast<uint64_t>(options.max_classes) && *n == listed.size();
}

// Per shard: its sample count and where its table lies among the tables.
struct RecordedTables {
  std::vector<uint64_t> sample_counts, table_sizes;
  uint64_t end = 0;  // the tables' bytes, all of them
};

// Whether the record `s` is of the shard `listed` names, as `kind` compares them.
bool RecordIsOfListedShard(const ShardInfo& s, const ShardInfo& listed, IndexRecordKind kind) {
  const bool identity_matches = kind == IndexRecordKind::kIndexFile ||
                                (s.mtime_ns == listed.mtime_ns && s.ctime_ns == listed.ctime_ns &&
                                 s.inode == listed.inode && s.etag == listed.etag);
  return s.path == listed.path && s.file_size == listed.file_size && identity_matches;
}

// Checks what a shard record says of its shard and of its table, which should start at
// `tables_end`.
absl::Status CheckShardRecord(const ShardInfo& s, const std::string& skip_reason,
                              uint64_t compressed, uint64_t samples, uint64_t table_offset,
                              uint64_t table_size, uint64_t tables_end, uint64_t total) {
  if (compressed > 1) return Corrupt(absl::StrCat(s.path, ": compression flag ", compressed));
  if (!skip_reason.empty() && samples != 0) {
    return Corrupt(absl::StrCat(s.path, ": a skipped shard with samples"));
  }
  // A record takes at least a byte of its table.
  if (samples > std::numeric_limits<uint32_t>::max() || samples > table_size) {
    return Corrupt(absl::StrCat(s.path, ": ", samples, " samples"));
  }
  // The tables follow one another in shard order, with nothing between them.
  if (table_offset != tables_end || table_size > total) {
    return Corrupt(absl::StrCat(s.path, ": table at ", table_offset, " (", table_size, " bytes)"));
  }
  return absl::OkStatus();
}

// Reads the `n` shard records into `scan` and `tables`. False when one is not of the
// shard `listed` names (the cache is stale); a corrupt record is an error.
absl::StatusOr<bool> ParseShardRecords(CacheParser& p, const std::vector<ShardInfo>& listed,
                                       IndexRecordKind kind, uint64_t total, uint64_t n,
                                       ScanOutcome* scan, RecordedTables* tables) {
  scan->shards.resize(n);
  scan->skip_reasons.resize(n);
  tables->sample_counts.resize(n);
  tables->table_sizes.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    ShardInfo& s = scan->shards[i];
    uint64_t size = 0, mtime = 0, ctime = 0, inode = 0, compressed = 0, table_offset = 0;
    if (!p.Str(&s.path) || !p.U64(&size) || !p.U64(&mtime) || !p.U64(&ctime) || !p.U64(&inode) ||
        !p.Str(&s.etag) || !p.Str(&s.content_digest) || !p.U64(&compressed) ||
        !p.Str(&scan->skip_reasons[i]) || !p.U64(&tables->sample_counts[i]) ||
        !p.U64(&table_offset) || !p.U64(&tables->table_sizes[i])) {
      return Corrupt("shard record");
    }
    s.file_size = size;
    s.mtime_ns = static_cast<int64_t>(mtime);
    s.ctime_ns = static_cast<int64_t>(ctime);
    s.inode = inode;
    s.device = listed[i].device;  // not kept: device numbers may change across reboots
    s.compressed = compressed != 0;
    if (!RecordIsOfListedShard(s, listed[i], kind)) return false;
    if (absl::Status checked =
            CheckShardRecord(s, scan->skip_reasons[i], compressed, tables->sample_counts[i],
                             table_offset, tables->table_sizes[i], tables->end, total);
        !checked.ok()) {
      return checked;
    }
    tables->end += tables->table_sizes[i];
  }
  return true;
}

// Reads the header's summary of the samples, and the fingerprint before it.
absl::Status ParseSummary(CacheParser& p, std::string* fingerprint, SampleSummary* stated) {
  uint64_t flags = 0, extensions = 0;
  if (!p.Str(fingerprint) || !p.U64(&flags) || flags > 3 || !p.U64(&stated->largest_image_bytes) ||
      !p.Count(&extensions, 8 + 1 + 8)) {
    return Corrupt("summary");
  }
  stated->has_images = (flags & 1) != 0;
  stated->has_labels = (flags & 2) != 0;
  for (uint64_t i = 0; i < extensions; ++i) {
    std::string ext;
    uint64_t count = 0;
    if (!p.Str(&ext) || !p.U64(&count) || ext.empty() ||
        !stated->extension_counts.emplace(std::move(ext), static_cast<int64_t>(count)).second) {
      return Corrupt("summary");
    }
  }
  return absl::OkStatus();
}

// Reads the header's close: the extension table, the tables' size and the header's
// checksum, which must end the header where it said; the tables must then fill the
// file to its checksum record.
absl::StatusOr<ExtensionTable> ParseHeaderClose(CacheParser& p, absl::string_view data,
                                                uint64_t head_size, uint64_t tables_end,
                                                uint64_t total) {
  std::string ext_bytes;
  uint64_t tables_size = 0;
  if (!p.Str(&ext_bytes) || !p.U64(&tables_size)) return Corrupt("extension table");
  const size_t head_end = p.pos();
  std::string head_checksum;
  if (!p.Str(&head_checksum)) return Corrupt("header checksum");
  if (head_checksum != HeadChecksum(data.substr(0, head_end))) {
    return Corrupt("header checksum mismatch");
  }
  if (p.pos() != head_size) return Corrupt("header size");
  absl::StatusOr<ExtensionTable> exts = ExtensionTable::Parse(ext_bytes);
  if (!exts.ok()) return Corrupt(exts.status().message());
  for (uint32_t id = 0; id < exts->size(); ++id) {
    if (exts->ext(id).empty()) return Corrupt("an empty extension");
  }
  if (tables_size != tables_end || tables_size != total - kChecksumRecordBytes - p.pos()) {
    return Corrupt(absl::StrCat("tables of ", tables_end, " bytes where ",
                                total - kChecksumRecordBytes - p.pos(), " are left"));
  }
  return exts;
}

// Where each of the scan's shard tables lies in the file, its tables starting at
// `tables_at`, and the limits it is read under.
void LocateTables(const std::string& root, const IndexOptions& options, uint64_t tables_at,
                  const RecordedTables& recorded, ScanOutcome* scan) {
  scan->tables.resize(scan->shards.size());
  uint64_t at = 0;
  for (size_t i = 0; i < scan->shards.size(); ++i) {
    ShardTableLimits limits;
    limits.data_size = MemberDataBound(scan->shards[i]);
    limits.max_classes = options.max_classes;
    limits.binding = TableBinding(root, options, i, scan->shards[i]);
    scan->tables[i] = ShardTableLocation{tables_at + at, recorded.table_sizes[i],
                                         static_cast<uint32_t>(recorded.sample_counts[i]), limits};
    at += recorded.table_sizes[i];
  }
}

// Reads each shard's samples from its table in `tables`, and checks what the header
// said of them (`stated`, and the max label ParseTrailer read).
absl::Status DecodeTables(absl::string_view tables, const RecordedTables& recorded,
                          const SampleSummary& stated, ScanOutcome* scan) {
  // The file's max label is checked against the samples' own (ParseTrailer read it).
  const int64_t stated_max_label = scan->max_label;
  scan->max_label = -1;
  uint64_t table_offset = 0;
  for (size_t i = 0; i < scan->shards.size(); ++i) {
    if (absl::Status read = DecodeShardTable(
            tables.substr(table_offset, recorded.table_sizes[i]), *scan->exts,
            scan->tables[i].limits, recorded.sample_counts[i], scan->shards[i], &scan->max_label);
        !read.ok()) {
      return read;
    }
    table_offset += recorded.table_sizes[i];
  }
  // Recomputed from the samples, never trusted: it sizes num_classes.
  if (stated_max_label != scan->max_label) return Corrupt("max label");
  if (absl::Status ruled = CheckDatasetRules(*scan); !ruled.ok()) return ruled;
  // What the header says of the samples must be what they give: a header-only read
  // trusts it.
  if (!(Summarize(*scan) == stated)) return Corrupt("summary does not match the samples");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<ScanOutcome>> ParseScanOutcome(absl::string_view data,
                                                            const std::string& root,
                                                            const IndexOptions& options,
                                                            const std::vector<ShardInfo>& listed,
                                                            IndexRecordKind kind, ParseDepth depth,
                                                            uint64_t file_size) {
  // A header-only read trusts the header's own checksum (below) and leaves each table
  // to its own: the whole file is not hashed, and `data` may be its header alone.
  const uint64_t total = depth == ParseDepth::kHeader && file_size != 0 ? file_size : data.size();
  if (depth == ParseDepth::kFull) {
    if (absl::Status sealed = CheckChecksum(data); !sealed.ok()) return sealed;
  } else if (total < kChecksumRecordBytes || data.size() > total) {
    return Corrupt("too short");
  }
  CacheParser p(data.substr(0, std::min<uint64_t>(data.size(), total - kChecksumRecordBytes)));
  uint64_t head_size = 0, n = 0;
  absl::StatusOr<bool> ours = ParseHeaderOpening(p, root, options, listed, total, &head_size, &n);
  if (!ours.ok()) return ours.status();
  if (!*ours) return std::nullopt;
  ScanOutcome scan;
  RecordedTables recorded;
  absl::StatusOr<bool> same = ParseShardRecords(p, listed, kind, total, n, &scan, &recorded);
  if (!same.ok()) return same.status();
  if (!*same) return std::nullopt;
  if (absl::Status trailer = ParseTrailer(options, p, scan); !trailer.ok()) return trailer;
  SampleSummary stated;
  if (absl::Status summary = ParseSummary(p, &scan.fingerprint, &stated); !summary.ok()) {
    return summary;
  }
  absl::StatusOr<ExtensionTable> exts = ParseHeaderClose(p, data, head_size, recorded.end, total);
  if (!exts.ok()) return exts.status();
  const uint64_t tables_at = p.pos();
  scan.exts = std::make_shared<const ExtensionTable>(*std::move(exts));
  scan.has_images = stated.has_images;
  scan.has_labels = stated.has_labels;
  scan.extension_counts = stated.extension_counts;
  scan.largest_image_bytes = stated.largest_image_bytes;
  LocateTables(root, options, tables_at, recorded, &scan);
  if (depth == ParseDepth::kHeader) {
    // The tables are located, not read: each is checked when it is (ShardTableCache).
    // The header's figures stand for the samples, under the header's checksum.
    if (!stated.has_images && stated.largest_image_bytes > 0) return Corrupt("summary");
    return scan;
  }
  if (absl::Status read =
          DecodeTables(data.substr(tables_at, recorded.end), recorded, stated, &scan);
      !read.ok()) {
    return read;
  }
  return scan;
}

std::string ResealShardTables(std::string body, const std::string& root,
                              const IndexOptions& options) {
  // Reads as ParseScanOutcome does, without its checks: where a record cannot be read,
  // nothing after it is resealed.
  CacheParser p(body);
  std::string text;
  uint64_t n = 0, skip = 0;
  if (!p.Str(&text) || !p.U64(&n) || !p.U64(&n) || !p.Str(&text) || !p.Str(&text) || !p.U64(&n) ||
      !p.Count(&n, kMinShardRecordBytes)) {
    return body;
  }
  struct Table {
    ShardInfo shard;
    uint64_t offset = 0, size = 0;
  };
  std::vector<Table> tables(n);
  for (Table& t : tables) {
    ShardInfo& s = t.shard;
    uint64_t mtime = 0, ctime = 0, compressed = 0, samples = 0;
    if (!p.Str(&s.path) || !p.U64(&s.file_size) || !p.U64(&mtime) || !p.U64(&ctime) ||
        !p.U64(&s.inode) || !p.Str(&s.etag) || !p.Str(&s.content_digest) || !p.U64(&compressed) ||
        !p.Str(&text) || !p.U64(&samples) || !p.U64(&t.offset) || !p.U64(&t.size)) {
      return body;
    }
    s.mtime_ns = static_cast<int64_t>(mtime);
    s.ctime_ns = static_cast<int64_t>(ctime);
    s.compressed = compressed != 0;
  }
  // The skipped samples (three strings each), class names, warnings, max label.
  if (!p.Count(&n)) return body;
  for (uint64_t i = 0; i < 3 * n; ++i) {
    if (!p.Str(&text)) return body;
  }
  for (int list = 0; list < 2; ++list) {
    if (!p.Count(&n)) return body;
    for (uint64_t i = 0; i < n; ++i) {
      if (!p.Str(&text)) return body;
    }
  }
  // The max label, the summary, the extension table, the tables' size.
  if (!p.U64(&skip) || !p.Str(&text) || !p.U64(&skip) || !p.U64(&skip) || !p.Count(&n)) {
    return body;
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (!p.Str(&text) || !p.U64(&skip)) return body;
  }
  if (!p.Str(&text) || !p.U64(&skip)) return body;
  // The header's checksum, sealed again over the header as it is.
  const size_t head_end = p.pos();
  if (!p.Str(&text) || text.size() != 32) return body;
  body.replace(head_end + 8, 32, HeadChecksum(absl::string_view(body).substr(0, head_end)));
  const size_t tables_at = p.pos();
  for (size_t i = 0; i < tables.size(); ++i) {
    const Table& t = tables[i];
    if (t.size < kTableChecksumBytes || t.offset > body.size() - tables_at ||
        t.size > body.size() - tables_at - t.offset) {
      continue;
    }
    const size_t at = tables_at + t.offset;
    const std::string sealed = SealWithTableChecksum(body.substr(at, t.size - kTableChecksumBytes),
                                                     TableBinding(root, options, i, t.shard));
    body.replace(at, t.size, sealed);
  }
  return body;
}

std::string EncodeU64(uint64_t value) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(value >> (8 * i));
  return out;
}

std::string SealWithChecksum(std::string body) {
  Digest128 h;
  h.AddBytes(body);
  const std::string hex = h.Hex();
  body.append(EncodeU64(hex.size()));
  body.append(hex);
  return body;
}

}  // namespace shardcast

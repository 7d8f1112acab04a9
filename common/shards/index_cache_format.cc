// The index cache / index file format (see index_cache_format.h): magic, version, then
// length-prefixed fields, then a checksum of everything before it.
#include "common/shards/index_cache_format.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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
constexpr size_t kMinShardRecordBytes = 10 * 8;
constexpr size_t kMinMemberRecordBytes = 8 + 1 + 8 + 8;
constexpr size_t kMinSampleRecordBytes = 8 + 1 + 3 * 8 + kMinMemberRecordBytes;
constexpr size_t kMinSkippedRecordBytes = 3 * 8;

class CacheWriter {
 public:
  void AddU64(uint64_t v) { out_.append(EncodeU64(v)); }
  void AddString(absl::string_view s) {
    AddU64(s.size());
    out_.append(s.data(), s.size());
  }
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

// Reads `shard`'s samples (already sized) and bounds each: a key, a label below
// max_classes, an image member among its members, members inside the shard's data.
absl::Status ParseSampleRecords(const IndexOptions& options, CacheParser& p, ShardInfo& shard,
                                int64_t* max_label) {
  // Where member data may lie: inside a plain tar; within deflate's largest expansion
  // of a compressed one (the reader checks the exact end when it inflates).
  const uint64_t data_end = shard.compressed ? shard.file_size * kMaxDeflateRatio : shard.file_size;
  for (SampleEntry& e : shard.samples) {
    uint64_t label = 0, image = 0, members = 0;
    if (!p.Str(&e.key) || !p.U64(&label) || !p.U64(&image) ||
        !p.Count(&members, kMinMemberRecordBytes)) {
      return Corrupt("sample record");
    }
    const std::string where = absl::StrCat(shard.path, " sample '", e.key, "': ");
    if (e.key.empty()) return Corrupt(absl::StrCat(shard.path, ": a sample without a key"));
    // The scan admits labels in [0, max_classes) only (and max_classes matched the
    // header), or -1 for none.
    e.label = static_cast<int64_t>(label);
    if (e.label < -1 || e.label >= options.max_classes) {
      return Corrupt(absl::StrCat(where, "label ", e.label));
    }
    if (image >= members && image != kNoImageMember) {
      return Corrupt(absl::StrCat(where, "image member out of range"));
    }
    e.image_member = static_cast<uint32_t>(image);
    e.members.resize(members);
    for (MemberRef& m : e.members) {
      if (!p.Str(&m.ext) || !p.U64(&m.offset) || !p.U64(&m.size)) return Corrupt("member");
      if (m.ext.empty() || m.offset > data_end || m.size > data_end - m.offset) {
        return Corrupt(absl::StrCat(where, "member '.", m.ext, "' at ", m.offset, " (", m.size,
                                    " bytes) lies past the shard's end (", shard.file_size,
                                    shard.compressed ? " bytes compressed)" : " bytes)"));
      }
    }
    *max_label = std::max(*max_label, e.label);
  }
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
// records, and checks the max label and class names against the samples read.
absl::Status ParseTrailer(CacheParser& p, ScanOutcome& scan) {
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
  // Recomputed from the samples, never trusted: it sizes num_classes.
  if (static_cast<int64_t>(max_label) != scan.max_label) return Corrupt("max label");
  if (!scan.class_names.empty() &&
      scan.class_names.size() != static_cast<size_t>(scan.max_label + 1)) {
    return Corrupt(
        absl::StrCat(scan.class_names.size(), " class names for labels up to ", scan.max_label));
  }
  return absl::OkStatus();
}

}  // namespace

std::string SerializeScanOutcome(const std::string& root, const IndexOptions& options,
                                 const ScanOutcome& scan) {
  CacheWriter w;
  w.AddString(absl::string_view(kCacheMagic, sizeof(kCacheMagic)));
  w.AddU64(kIndexVersion);
  w.AddString(root);
  w.AddString(options.label_field);
  w.AddU64(static_cast<uint64_t>(options.max_classes));
  w.AddU64(scan.shards.size());
  for (size_t i = 0; i < scan.shards.size(); ++i) {
    const ShardInfo& s = scan.shards[i];
    w.AddString(s.path);
    w.AddU64(s.file_size);
    w.AddU64(static_cast<uint64_t>(s.mtime_ns));
    w.AddU64(static_cast<uint64_t>(s.ctime_ns));
    w.AddU64(s.inode);
    w.AddString(s.etag);
    w.AddString(s.content_digest);
    w.AddU64(s.compressed ? 1 : 0);
    w.AddString(scan.skip_reasons[i]);
    AddSampleRecords(s.samples, &w);
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
  return w.Finish();
}

absl::StatusOr<std::optional<ScanOutcome>> ParseScanOutcome(absl::string_view data,
                                                            const std::string& root,
                                                            const IndexOptions& options,
                                                            const std::vector<ShardInfo>& listed,
                                                            IndexRecordKind kind) {
  if (absl::Status sealed = CheckChecksum(data); !sealed.ok()) return sealed;
  CacheParser p(data.substr(0, data.size() - kChecksumRecordBytes));
  std::string magic, stored_root, label_field;
  uint64_t version = 0, n = 0, max_classes = 0;
  if (!p.Str(&magic) || magic != absl::string_view(kCacheMagic, sizeof(kCacheMagic))) {
    return Corrupt("bad magic");
  }
  if (!p.U64(&version) || version != kIndexVersion) {
    return std::nullopt;  // another layout: rebuild without complaint
  }
  if (!p.Str(&stored_root) || !p.Str(&label_field) || !p.U64(&max_classes) ||
      !p.Count(&n, kMinShardRecordBytes)) {
    return Corrupt("header");
  }
  if (stored_root != root || label_field != options.label_field ||
      max_classes != static_cast<uint64_t>(options.max_classes) || n != listed.size()) {
    return std::nullopt;
  }
  ScanOutcome scan;
  scan.shards.resize(n);
  scan.skip_reasons.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    ShardInfo& s = scan.shards[i];
    uint64_t size = 0, mtime = 0, ctime = 0, inode = 0, compressed = 0, samples = 0;
    if (!p.Str(&s.path) || !p.U64(&size) || !p.U64(&mtime) || !p.U64(&ctime) || !p.U64(&inode) ||
        !p.Str(&s.etag) || !p.Str(&s.content_digest) || !p.U64(&compressed) ||
        !p.Str(&scan.skip_reasons[i]) || !p.Count(&samples, kMinSampleRecordBytes)) {
      return Corrupt("shard record");
    }
    s.file_size = size;
    s.mtime_ns = static_cast<int64_t>(mtime);
    s.ctime_ns = static_cast<int64_t>(ctime);
    s.inode = inode;
    s.device = listed[i].device;  // not kept: device numbers may change across reboots
    s.compressed = compressed != 0;
    const bool identity_matches =
        kind == IndexRecordKind::kIndexFile ||
        (s.mtime_ns == listed[i].mtime_ns && s.ctime_ns == listed[i].ctime_ns &&
         s.inode == listed[i].inode && s.etag == listed[i].etag);
    if (s.path != listed[i].path || s.file_size != listed[i].file_size || !identity_matches) {
      return std::nullopt;
    }
    if (compressed > 1) return Corrupt(absl::StrCat(s.path, ": compression flag ", compressed));
    if (!scan.skip_reasons[i].empty() && samples != 0) {
      return Corrupt(absl::StrCat(s.path, ": a skipped shard with samples"));
    }
    if (samples > std::numeric_limits<uint32_t>::max()) {
      return Corrupt(absl::StrCat(s.path, ": ", samples, " samples"));
    }
    s.samples.resize(samples);
    if (absl::Status read = ParseSampleRecords(options, p, s, &scan.max_label); !read.ok()) {
      return read;
    }
  }
  if (absl::Status trailer = ParseTrailer(p, scan); !trailer.ok()) return trailer;
  if (absl::Status ruled = CheckDatasetRules(scan); !ruled.ok()) return ruled;
  if (p.pos() != data.size() - kChecksumRecordBytes) return Corrupt("trailing bytes");
  return scan;
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

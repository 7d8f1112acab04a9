// The compact per-shard table codec (see compact_shard_table.h for the layout): an
// encoder of a shard's samples and a decoder that trusts no byte of what it reads.
#include "common/shards/compact_shard_table.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/util/digest.h"

namespace shardcast {
namespace {

constexpr char kTableMagic[4] = {'S', 'C', 'S', 'T'};
constexpr char kExtMagic[4] = {'S', 'C', 'X', 'T'};
// The fewest bytes of a record (shared, suffix length, label, image, member count: one
// byte each) and of a member (three one-byte varints): a count read from the bytes is
// bounded by the bytes left divided by these before anything is sized by it.
constexpr size_t kMinRecordBytes = 5;
constexpr size_t kMinMemberBytes = 3;
constexpr uint64_t kTarBlock = 512;

absl::Status CorruptTable(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("corrupt shard table: ", what));
}
absl::Status CorruptExts(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("corrupt extension table: ", what));
}

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutFixed32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t GetFixed32(absl::string_view bytes, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return v;
}

uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
int64_t UnZigZag(uint64_t v) { return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1)); }

// Where the next member's data starts in a tar after a member ending at `prev_end`:
// past its padding and one 512-byte header. Wraps modulo 2^64 like the offsets it
// predicts, identically in the encoder and the decoder.
uint64_t PredictedOffset(uint64_t prev_end) {
  return ((prev_end + kTarBlock - 1) & ~(kTarBlock - 1)) + kTarBlock;
}

// The Digest128 of `binding` and `bytes` as 16 raw bytes, most significant first (Hex's
// order).
std::string Checksum(uint64_t binding, absl::string_view bytes) {
  Digest128 h;
  h.AddU64(binding);
  h.AddBytes(bytes);
  const std::string hex = h.Hex();
  std::string raw(kTableChecksumBytes, '\0');
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i < kTableChecksumBytes; ++i) {
    raw[i] = static_cast<char>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  }
  return raw;
}

// The bytes before the checksum, when the checksum is theirs.
bool Unseal(absl::string_view bytes, uint64_t binding, absl::string_view* body) {
  if (bytes.size() < kTableChecksumBytes) return false;
  *body = bytes.substr(0, bytes.size() - kTableChecksumBytes);
  return Checksum(binding, *body) == bytes.substr(body->size());
}

// Reads varints and byte strings from a span, never past its end.
class ByteReader {
 public:
  explicit ByteReader(absl::string_view data) : data_(data) {}

  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return false;
      const uint64_t byte = static_cast<unsigned char>(data_[pos_++]);
      // The tenth byte holds bit 63 alone: more would not fit in 64 bits. A last byte
      // of 0 after the first is an overlong form: refused, so that every number has one
      // encoding and a table one set of bytes (the fuzzer re-encodes what it decodes).
      if (shift == 63 && byte > 1) return false;
      if (byte == 0 && shift > 0) return false;
      *v |= (byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }
  bool Bytes(size_t n, absl::string_view* out) {
    if (n > left()) return false;
    *out = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  size_t left() const { return data_.size() - pos_; }
  size_t pos() const { return pos_; }

 private:
  absl::string_view data_;
  size_t pos_ = 0;
};

// What decoding a record needs from the record before it.
struct DecodeState {
  uint64_t prev_end = 0;  // end of the previous member, 0 at a restart
};

// Decodes the record at the reader into `*e` (whose key is the previous record's, or
// anything at a restart, where `restart` makes it share nothing) and bounds it.
// kWhole false (a record passed on the way to the one looked up): the same checks, but
// only the key and `state` are kept, which the next record is decoded against; the
// label, image and members of `*e` are left as they were.
template <bool kWhole = true>
absl::Status DecodeRecord(ByteReader& r, bool restart, const ExtensionTable& exts,
                          const ShardTableLimits& limits, DecodeState* state, SampleEntry* e) {
  uint64_t shared = 0, suffix_len = 0;
  absl::string_view suffix;
  if (!r.Varint(&shared) || !r.Varint(&suffix_len) || !r.Bytes(suffix_len, &suffix)) {
    return CorruptTable("a truncated key");
  }
  if (restart ? shared != 0 : shared > e->key.size()) {
    return CorruptTable(absl::StrCat("a key shares ", shared, " bytes with a key of ",
                                     restart ? 0 : e->key.size()));
  }
  // The encoder shares all it can; a record that shares less is not one it wrote.
  if (!restart && shared < e->key.size() && !suffix.empty() && suffix[0] == e->key[shared]) {
    return CorruptTable(absl::StrCat("a key shares ", shared, " bytes but could share more"));
  }
  e->key.resize(shared);
  e->key.append(suffix.data(), suffix.size());
  if (e->key.empty()) return CorruptTable("a sample without a key");
  // Built only for an error: the happy path allocates nothing per record.
  auto where = [e] { return absl::StrCat("sample '", e->key, "': "); };

  uint64_t label = 0, image = 0, member_count = 0;
  if (!r.Varint(&label) || !r.Varint(&image) || !r.Varint(&member_count)) {
    return CorruptTable(absl::StrCat(where(), "truncated"));
  }
  const int64_t decoded_label = UnZigZag(label);
  if (decoded_label < -1 || decoded_label >= limits.max_classes) {
    return CorruptTable(absl::StrCat(where(), "label ", decoded_label, " out of range"));
  }
  // Also below kNoImageMember, so that every image index fits SampleEntry's uint32.
  if (member_count > r.left() / kMinMemberBytes || member_count >= kNoImageMember) {
    return CorruptTable(absl::StrCat(where(), member_count, " members in ", r.left(), " bytes"));
  }
  if (image > member_count) {
    return CorruptTable(absl::StrCat(where(), "image member ", image - 1, " of ", member_count));
  }
  if constexpr (kWhole) {
    e->label = decoded_label;
    e->image_member = image == 0 ? kNoImageMember : static_cast<uint32_t>(image - 1);
    e->members.resize(member_count);
  }
  for (uint64_t k = 0; k < member_count; ++k) {
    uint64_t ext_id = 0, delta = 0, size = 0;
    if (!r.Varint(&ext_id) || !r.Varint(&delta) || !r.Varint(&size)) {
      return CorruptTable(absl::StrCat(where(), "a truncated member"));
    }
    if (ext_id >= exts.size()) {
      return CorruptTable(absl::StrCat(where(), "extension id ", ext_id, " of ", exts.size()));
    }
    const uint64_t offset =
        PredictedOffset(state->prev_end) + static_cast<uint64_t>(UnZigZag(delta));
    if (offset > limits.data_size || size > limits.data_size - offset) {
      return CorruptTable(
          absl::StrCat(where(), "member .", exts.ext(static_cast<uint32_t>(ext_id)), " at ", offset,
                       " (", size, " bytes) lies past the shard's end (", limits.data_size, ")"));
    }
    if constexpr (kWhole) {
      MemberRef& m = e->members[k];
      m.ext = exts.ext(static_cast<uint32_t>(ext_id));
      m.offset = offset;
      m.size = size;
    }
    state->prev_end = offset + size;
  }
  return absl::OkStatus();
}

// Appends the record of `e` after `prev_key` (nullptr at a restart).
void EncodeRecord(const SampleEntry& e, const std::string* prev_key, ExtensionTable* exts,
                  uint64_t* prev_end, std::string* out) {
  size_t shared = 0;
  if (prev_key != nullptr) {
    const size_t n = std::min(prev_key->size(), e.key.size());
    while (shared < n && (*prev_key)[shared] == e.key[shared]) ++shared;
  }
  PutVarint(shared, out);
  PutVarint(e.key.size() - shared, out);
  out->append(e.key, shared, std::string::npos);
  PutVarint(ZigZag(e.label), out);
  PutVarint(e.image_member == kNoImageMember ? 0 : uint64_t{e.image_member} + 1, out);
  PutVarint(e.members.size(), out);
  for (const MemberRef& m : e.members) {
    PutVarint(exts->Intern(m.ext), out);
    PutVarint(ZigZag(static_cast<int64_t>(m.offset - PredictedOffset(*prev_end))), out);
    PutVarint(m.size, out);
    *prev_end = m.offset + m.size;
  }
}

absl::Status CheckEncodable(const SampleEntry& e) {
  if (e.key.empty()) return absl::InvalidArgumentError("a sample without a key");
  if (e.label < -1) {
    return absl::InvalidArgumentError(absl::StrCat("sample '", e.key, "': label ", e.label));
  }
  if (e.image_member != kNoImageMember && e.image_member >= e.members.size()) {
    return absl::InvalidArgumentError(absl::StrCat("sample '", e.key, "': image member ",
                                                   e.image_member, " of ", e.members.size()));
  }
  return absl::OkStatus();
}

}  // namespace

std::string SealWithTableChecksum(std::string body, uint64_t binding) {
  body.append(Checksum(binding, body));
  return body;
}

uint32_t ExtensionTable::Intern(absl::string_view ext) {
  auto [it, added] = ids_.try_emplace(ext, static_cast<uint32_t>(exts_.size()));
  if (added) exts_.emplace_back(ext);
  return it->second;
}

int64_t ExtensionTable::Find(absl::string_view ext) const {
  auto it = ids_.find(ext);
  return it == ids_.end() ? -1 : int64_t{it->second};
}

std::string ExtensionTable::Serialize() const {
  std::string out(kExtMagic, sizeof(kExtMagic));
  out.push_back(static_cast<char>(kTableVersion));
  PutVarint(exts_.size(), &out);
  for (const std::string& ext : exts_) {
    PutVarint(ext.size(), &out);
    out.append(ext);
  }
  return SealWithTableChecksum(std::move(out), /*binding=*/0);
}

absl::StatusOr<ExtensionTable> ExtensionTable::Parse(absl::string_view bytes) {
  absl::string_view body;
  if (!Unseal(bytes, /*binding=*/0, &body)) return CorruptExts("bad checksum or too short");
  ByteReader r(body);
  absl::string_view magic;
  if (!r.Bytes(sizeof(kExtMagic) + 1, &magic) ||
      magic.substr(0, sizeof(kExtMagic)) != absl::string_view(kExtMagic, sizeof(kExtMagic)) ||
      static_cast<uint8_t>(magic[sizeof(kExtMagic)]) != kTableVersion) {
    return CorruptExts("bad magic or version");
  }
  uint64_t count = 0;
  // Each extension takes at least its length's byte.
  if (!r.Varint(&count) || count > r.left()) return CorruptExts("bad count");
  ExtensionTable table;
  table.exts_.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t len = 0;
    absl::string_view ext;
    if (!r.Varint(&len) || !r.Bytes(len, &ext)) return CorruptExts("a truncated extension");
    if (table.Intern(ext) != i) return CorruptExts(absl::StrCat("'", ext, "' listed twice"));
  }
  if (r.left() != 0) return CorruptExts("trailing bytes");
  return table;
}

absl::StatusOr<std::string> EncodeShardTable(absl::Span<const SampleEntry> samples,
                                             ExtensionTable* exts,
                                             const ShardTableEncodeOptions& options) {
  const uint32_t interval = options.restart_interval;
  if (interval < 1 || interval > kMaxRestartInterval) {
    return absl::InvalidArgumentError(absl::StrCat("restart interval ", interval));
  }
  if (samples.size() > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(samples.size(), " samples in one shard"));
  }
  std::string records;
  std::vector<uint32_t> restarts;
  uint64_t prev_end = 0;
  for (size_t j = 0; j < samples.size(); ++j) {
    const SampleEntry& e = samples[j];
    if (absl::Status s = CheckEncodable(e); !s.ok()) return s;
    const bool restart = j % interval == 0;
    if (restart) {
      if (records.size() > std::numeric_limits<uint32_t>::max()) {
        return absl::InvalidArgumentError("more than 4 GiB of records in one shard");
      }
      restarts.push_back(static_cast<uint32_t>(records.size()));
      prev_end = 0;
    }
    EncodeRecord(e, restart ? nullptr : &samples[j - 1].key, exts, &prev_end, &records);
  }
  std::string out(kTableMagic, sizeof(kTableMagic));
  out.push_back(static_cast<char>(kTableVersion));
  PutVarint(samples.size(), &out);
  PutVarint(interval, &out);
  for (uint32_t r : restarts) PutFixed32(r, &out);
  out.append(records);
  return SealWithTableChecksum(std::move(out), options.binding);
}

absl::StatusOr<CompactShardTable> CompactShardTable::Open(absl::string_view bytes,
                                                          const ExtensionTable* exts,
                                                          const ShardTableLimits& limits) {
  absl::string_view body;
  if (!Unseal(bytes, limits.binding, &body)) {
    return CorruptTable("bad checksum (or another shard's table) or too short");
  }
  ByteReader r(body);
  absl::string_view magic;
  if (!r.Bytes(sizeof(kTableMagic) + 1, &magic) ||
      magic.substr(0, sizeof(kTableMagic)) != absl::string_view(kTableMagic, sizeof(kTableMagic)) ||
      static_cast<uint8_t>(magic[sizeof(kTableMagic)]) != kTableVersion) {
    return CorruptTable("bad magic or version");
  }
  uint64_t count = 0, interval = 0;
  if (!r.Varint(&count) || count > r.left() / kMinRecordBytes ||
      count > std::numeric_limits<uint32_t>::max()) {
    return CorruptTable("bad sample count");
  }
  if (!r.Varint(&interval) || interval < 1 || interval > kMaxRestartInterval) {
    return CorruptTable("bad restart interval");
  }
  const uint64_t num_restarts = (count + interval - 1) / interval;
  CompactShardTable table;
  table.exts_ = exts;
  table.limits_ = limits;
  table.count_ = static_cast<uint32_t>(count);
  table.interval_ = static_cast<uint32_t>(interval);
  if (num_restarts > r.left() / 4 || !r.Bytes(num_restarts * 4, &table.restarts_)) {
    return CorruptTable("truncated restart array");
  }
  r.Bytes(r.left(), &table.records_);

  // Every record, once: each restart offset must be where its record starts, and the
  // records must end where the bytes do.
  ByteReader records(table.records_);
  SampleEntry e;
  DecodeState state;
  for (uint32_t j = 0; j < table.count_; ++j) {
    const bool restart = j % table.interval_ == 0;
    if (restart) {
      if (GetFixed32(table.restarts_, 4 * (j / table.interval_)) != records.pos()) {
        return CorruptTable(absl::StrCat("restart ", j / table.interval_, " is not at sample ", j));
      }
      state = DecodeState();
    }
    // Checked, not kept: the same checks as a lookup's, without building the entry.
    if (absl::Status s = DecodeRecord<false>(records, restart, *exts, limits, &state, &e);
        !s.ok()) {
      return s;
    }
  }
  if (records.left() != 0) return CorruptTable("trailing bytes");
  return table;
}

absl::Status CompactShardTable::LookupInto(uint32_t j, SampleEntry* out, Cursor* cursor) const {
  if (j >= count_) {
    return absl::OutOfRangeError(absl::StrCat("sample ", j, " of a shard of ", count_));
  }
  const uint32_t first = j - j % interval_;
  uint32_t i = first;
  size_t start = 0;
  DecodeState state;
  // The cursor stopped at or after `first` and before j: the records in between
  // decode the same from there, the key shared from the one it kept.
  if (cursor != nullptr && cursor->table == this && cursor->next > first && cursor->next <= j) {
    i = cursor->next;
    start = cursor->pos;
    state.prev_end = cursor->prev_end;
    out->key = cursor->key;
  } else {
    start = GetFixed32(restarts_, 4 * (j / interval_));
  }
  if (start > records_.size()) return CorruptTable("restart past the records");
  ByteReader r(records_.substr(start));
  for (; i <= j; ++i) {
    // Only j's record whole: those before it give its key and offsets.
    const absl::Status s = i == j
                               ? DecodeRecord<true>(r, i == first, *exts_, limits_, &state, out)
                               : DecodeRecord<false>(r, i == first, *exts_, limits_, &state, out);
    if (!s.ok()) {
      if (cursor != nullptr) cursor->table = nullptr;
      return s;
    }
  }
  if (cursor != nullptr) {
    cursor->table = this;
    cursor->next = j + 1;
    cursor->pos = start + r.pos();
    cursor->prev_end = state.prev_end;
    cursor->key = out->key;
  }
  return absl::OkStatus();
}

absl::StatusOr<SampleEntry> CompactShardTable::Lookup(uint32_t j) const {
  SampleEntry e;
  if (absl::Status s = LookupInto(j, &e); !s.ok()) return s;
  return e;
}

absl::Status CompactShardTable::ForEach(
    absl::FunctionRef<void(uint32_t, const SampleEntry&)> fn) const {
  ByteReader r(records_);
  SampleEntry e;
  DecodeState state;
  for (uint32_t j = 0; j < count_; ++j) {
    const bool restart = j % interval_ == 0;
    if (restart) state = DecodeState();
    if (absl::Status s = DecodeRecord(r, restart, *exts_, limits_, &state, &e); !s.ok()) return s;
    fn(j, e);
  }
  return absl::OkStatus();
}

}  // namespace shardcast

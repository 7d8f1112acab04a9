// The compact shard table codec (common/shards/compact_shard_table.h): random tables
// round-trip against the samples they were made from, and corrupt or truncated tables
// are refused, never decoded into a different sample.
#include "common/shards/compact_shard_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shardcast {
namespace {

constexpr uint64_t kHugeShard = uint64_t{1} << 42;

bool SameEntry(const SampleEntry& a, const SampleEntry& b) {
  if (a.key != b.key || a.label != b.label || a.image_member != b.image_member ||
      a.members.size() != b.members.size()) {
    return false;
  }
  for (size_t i = 0; i < a.members.size(); ++i) {
    const MemberRef &x = a.members[i], &y = b.members[i];
    if (x.ext != y.ext || x.offset != y.offset || x.size != y.size) return false;
  }
  return true;
}

// Random samples: keys sharing long prefixes (sometimes none), 0..4 members with random
// extensions, labels including -1, samples without an image, offsets either laid out
// as a tar would (each member after the previous one's padded end and a header) or
// anywhere below 2^40, sizes up to 2^40: every member ends below 2^42.
std::vector<SampleEntry> RandomSamples(std::mt19937_64& rng, size_t n) {
  const std::vector<std::string> exts = {"jpg", "txt", "json", "cls", "seg.png", "webp", ""};
  std::vector<SampleEntry> samples(n);
  std::string prefix = absl::StrCat("shard-", rng() % 1000, "/sample_");
  uint64_t end = 0;
  for (size_t j = 0; j < n; ++j) {
    SampleEntry& e = samples[j];
    if (rng() % 10 == 0) prefix = std::string(rng() % 4, static_cast<char>('a' + rng() % 26));
    e.key = absl::StrCat(prefix, rng() % 3 == 0 ? rng() : rng() % 100000);
    const int label_kind = static_cast<int>(rng() % 3);
    e.label = label_kind == 0 ? -1 : static_cast<int64_t>(rng() % (label_kind == 1 ? 10 : 999999));
    e.members.resize(rng() % 5);
    for (MemberRef& m : e.members) {
      m.ext = exts[rng() % exts.size()];
      const bool tar_layout = rng() % 4 != 0 && end < (uint64_t{1} << 40);
      m.size = rng() % 2 == 0 ? rng() % 200000 : rng() % (uint64_t{1} << 40);
      m.offset = tar_layout ? ((end + 511) / 512) * 512 + 512 : rng() % (uint64_t{1} << 40);
      end = m.offset + m.size;
    }
    e.image_member = e.members.empty() || rng() % 4 == 0
                         ? kNoImageMember
                         : static_cast<uint32_t>(rng() % e.members.size());
  }
  return samples;
}

ShardTableLimits Limits(uint64_t data_size = kHugeShard) {
  ShardTableLimits limits;
  limits.data_size = data_size;
  return limits;
}

std::string Encode(const std::vector<SampleEntry>& samples, ExtensionTable* exts,
                   uint32_t interval = kDefaultRestartInterval) {
  ShardTableEncodeOptions options;
  options.restart_interval = interval;
  absl::StatusOr<std::string> bytes = EncodeShardTable(samples, exts, options);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::string();
}

// Every sample by Lookup and by ForEach equals the reference.
void ExpectDecodesTo(const std::string& bytes, const ExtensionTable& exts,
                     const std::vector<SampleEntry>& reference) {
  absl::StatusOr<CompactShardTable> table = CompactShardTable::Open(bytes, &exts, Limits());
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->size(), reference.size());
  for (uint32_t j = 0; j < reference.size(); ++j) {
    absl::StatusOr<SampleEntry> e = table->Lookup(j);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE(SameEntry(*e, reference[j])) << "sample " << j << " key " << e->key;
  }
  uint32_t seen = 0;
  ASSERT_TRUE(table
                  ->ForEach([&](uint32_t j, const SampleEntry& e) {
                    EXPECT_EQ(j, seen);
                    EXPECT_TRUE(SameEntry(e, reference[j])) << "sample " << j;
                    ++seen;
                  })
                  .ok());
  EXPECT_EQ(seen, reference.size());
  EXPECT_EQ(table->Lookup(static_cast<uint32_t>(reference.size())).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(CompactShardTableTest, RandomTablesRoundTrip) {
  std::mt19937_64 rng(46);
  for (uint32_t interval : {1u, 2u, 16u, 32u, kMaxRestartInterval}) {
    for (size_t n : {0, 1, 2, 15, 16, 17, 31, 32, 33, 100, 1000}) {
      SCOPED_TRACE(absl::StrCat("interval ", interval, ", ", n, " samples"));
      ExtensionTable exts;
      const std::vector<SampleEntry> samples = RandomSamples(rng, n);
      ExpectDecodesTo(Encode(samples, &exts, interval), exts, samples);
    }
  }
}

TEST(CompactShardTableTest, EmptyShard) {
  ExtensionTable exts;
  const std::string bytes = Encode({}, &exts);
  absl::StatusOr<CompactShardTable> table = CompactShardTable::Open(bytes, &exts, Limits(0));
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 0u);
  EXPECT_EQ(table->Lookup(0).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(exts.size(), 0u);
}

// Tables encoded against a table that grows later decode against the grown one: ids are
// never reassigned, and the table's serialised form round-trips.
TEST(CompactShardTableTest, ExtensionTableGrowsAndRoundTrips) {
  std::mt19937_64 rng(7);
  ExtensionTable exts;
  const std::vector<SampleEntry> first = RandomSamples(rng, 50), second = RandomSamples(rng, 50);
  const std::string a = Encode(first, &exts), b = Encode(second, &exts);
  exts.Intern("never-used");
  absl::StatusOr<ExtensionTable> parsed = ExtensionTable::Parse(exts.Serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), exts.size());
  for (uint32_t id = 0; id < exts.size(); ++id) EXPECT_EQ(parsed->ext(id), exts.ext(id));
  EXPECT_EQ(parsed->Find("never-used"), exts.size() - 1);
  EXPECT_EQ(parsed->Find("absent"), -1);
  ExpectDecodesTo(a, *parsed, first);
  ExpectDecodesTo(b, *parsed, second);
}

TEST(CompactShardTableTest, ExtensionTableRefusesCorruption) {
  ExtensionTable exts;
  for (const char* e : {"jpg", "txt", "json"}) exts.Intern(e);
  const std::string bytes = exts.Serialize();
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x20;
    EXPECT_FALSE(ExtensionTable::Parse(bad).ok()) << "byte " << i;
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(ExtensionTable::Parse(bytes.substr(0, n)).ok()) << n << " bytes";
  }
  // A duplicate with its checksum fixed up: the check behind the checksum refuses it.
  std::string body = bytes.substr(0, bytes.size() - kTableChecksumBytes);
  body.replace(body.find("txt"), 3, "jpg");
  absl::Status dup = ExtensionTable::Parse(SealWithTableChecksum(body)).status();
  EXPECT_TRUE(absl::StrContains(dup.message(), "listed twice")) << dup;
}

// LevelDB-style restarts: the samples on either side of each restart point, looked up
// alone (no earlier lookup warming anything), are whole.
TEST(CompactShardTableTest, LookupAtRestartBoundaries) {
  std::mt19937_64 rng(3);
  ExtensionTable exts;
  const std::vector<SampleEntry> samples = RandomSamples(rng, 100);
  const std::string bytes = Encode(samples, &exts, 16);
  for (uint32_t j : {0u, 15u, 16u, 17u, 31u, 32u, 47u, 48u, 95u, 96u, 99u}) {
    absl::StatusOr<CompactShardTable> table = CompactShardTable::Open(bytes, &exts, Limits());
    ASSERT_TRUE(table.ok());
    absl::StatusOr<SampleEntry> e = table->Lookup(j);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_TRUE(SameEntry(*e, samples[j])) << j;
  }
}

// Lookups through a cursor equal lookups without one, whatever the order: increasing
// runs (which decode on from the cursor), repeats, steps back, jumps into other
// restart intervals, and a cursor last used on another table.
TEST(CompactShardTableTest, CursorLookupsEqualRandomLookups) {
  std::mt19937_64 rng(47);
  for (uint32_t interval : {1u, 2u, 16u, 64u}) {
    for (size_t n : {1, 17, 100, 1000}) {
      SCOPED_TRACE(absl::StrCat("interval ", interval, ", ", n, " samples"));
      ExtensionTable exts;
      const std::vector<SampleEntry> samples = RandomSamples(rng, n);
      const std::string bytes = Encode(samples, &exts, interval);
      const std::string other_bytes = Encode(RandomSamples(rng, n), &exts, interval);
      absl::StatusOr<CompactShardTable> table = CompactShardTable::Open(bytes, &exts, Limits());
      absl::StatusOr<CompactShardTable> other =
          CompactShardTable::Open(other_bytes, &exts, Limits());
      ASSERT_TRUE(table.ok() && other.ok());
      CompactShardTable::Cursor cursor;
      SampleEntry e;
      uint32_t j = 0;
      for (int step = 0; step < 3000; ++step) {
        switch (rng() % 8) {
          case 0:
            j = static_cast<uint32_t>(rng() % n);  // anywhere
            break;
          case 1:
            break;  // the same sample again
          case 2:
            j = j > 0 ? j - 1 : j;  // one back
            break;
          case 3: {  // the other table, then back to this one
            const uint32_t k = static_cast<uint32_t>(rng() % n);
            ASSERT_TRUE(other->LookupInto(k, &e, &cursor).ok());
            break;
          }
          default:
            j = static_cast<uint32_t>(std::min<uint64_t>(j + 1 + rng() % 3, n - 1));  // on
        }
        ASSERT_TRUE(table->LookupInto(j, &e, &cursor).ok());
        ASSERT_TRUE(SameEntry(e, samples[j])) << "step " << step << " sample " << j;
      }
      EXPECT_EQ(table->LookupInto(static_cast<uint32_t>(n), &e, &cursor).code(),
                absl::StatusCode::kOutOfRange);
    }
  }
}

// A LAION-like shard costs about 20 bytes per sample: the figure the codec is for.
TEST(CompactShardTableTest, LaionLikeSamplesAreSmall) {
  std::vector<SampleEntry> samples(1000);
  uint64_t end = 0;
  for (size_t j = 0; j < samples.size(); ++j) {
    samples[j].key = absl::StrCat(absl::Dec(123000000 + j, absl::kZeroPad9));
    for (auto [ext, size] : {std::pair<const char*, uint64_t>{"jpg", 40000 + j * 37 % 20000},
                             {"txt", 60 + j % 90},
                             {"json", 700 + j % 300}}) {
      const uint64_t offset = (end + 511) / 512 * 512 + 512;
      samples[j].members.push_back({ext, offset, size});
      end = offset + size;
    }
  }
  ExtensionTable exts;
  const std::string bytes = Encode(samples, &exts);
  EXPECT_LE(bytes.size(), 22 * samples.size());
  ExpectDecodesTo(bytes, exts, samples);
}

// Every single-byte change (several values per byte) and every truncation is refused:
// the checksum catches them all, since each step of FNV-1a is a bijection of its state.
TEST(CompactShardTableTest, EveryByteCorruptionAndTruncationIsRefused) {
  std::mt19937_64 rng(11);
  ExtensionTable exts;
  const std::vector<SampleEntry> samples = RandomSamples(rng, 12);
  const std::string bytes = Encode(samples, &exts, 4);
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int x : {0x01, 0x80, 0xff, 0x5a}) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ x);
      EXPECT_FALSE(CompactShardTable::Open(bad, &exts, Limits()).ok()) << "byte " << i;
    }
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(CompactShardTable::Open(bytes.substr(0, n), &exts, Limits()).ok()) << n;
  }
}

// The same edits with the checksum fixed up, so that the validation behind it is what
// is tested: each table is refused, or decodes (by Open, every Lookup and ForEach alike)
// into samples that keep every bound: keys non-empty, labels in range, image members
// among the members, members inside the shard. A change that leaves the bytes'
// meaning intact (none here) would decode to the original.
TEST(CompactShardTableTest, ResealedCorruptionIsRefusedOrStaysInBounds) {
  std::mt19937_64 rng(13);
  ExtensionTable exts;
  std::vector<SampleEntry> samples = RandomSamples(rng, 12);
  const std::string bytes = Encode(samples, &exts, 4);
  const std::string body = bytes.substr(0, bytes.size() - kTableChecksumBytes);
  const ShardTableLimits limits = Limits(uint64_t{1} << 41);
  size_t refused = 0, opened = 0;
  auto check = [&](const std::string& edited) {
    const std::string sealed = SealWithTableChecksum(edited);  // outlives the view
    absl::StatusOr<CompactShardTable> table = CompactShardTable::Open(sealed, &exts, limits);
    if (!table.ok()) {
      EXPECT_EQ(table.status().code(), absl::StatusCode::kDataLoss) << table.status();
      ++refused;
      return;
    }
    ++opened;
    for (uint32_t j = 0; j < table->size(); ++j) {
      absl::StatusOr<SampleEntry> e = table->Lookup(j);
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_FALSE(e->key.empty());
      EXPECT_GE(e->label, -1);
      EXPECT_TRUE(e->image_member == kNoImageMember || e->image_member < e->members.size());
      for (const MemberRef& m : e->members) {
        EXPECT_LE(m.offset, limits.data_size);
        EXPECT_LE(m.size, limits.data_size - m.offset);
      }
    }
  };
  for (size_t i = 0; i < body.size(); ++i) {
    for (int x : {0x01, 0x02, 0x40, 0x80, 0xff}) {
      std::string bad = body;
      bad[i] = static_cast<char>(bad[i] ^ x);
      check(bad);
    }
  }
  for (size_t n = 0; n < body.size(); ++n) check(body.substr(0, n));
  check(body + std::string(1, '\0'));
  EXPECT_GT(refused, body.size());  // truncations alone
  RecordProperty("opened", static_cast<int>(opened));
}

TEST(CompactShardTableTest, DecoderRefusesWhatTheCallerKnowsIsWrong) {
  std::vector<SampleEntry> samples(2);
  samples[0].key = "a";
  samples[0].label = 5;
  samples[0].members = {{"jpg", 512, 100}};
  samples[1].key = "ab";
  samples[1].members = {{"txt", 1024, 10}};
  ExtensionTable exts;
  const std::string bytes = Encode(samples, &exts);
  EXPECT_TRUE(CompactShardTable::Open(bytes, &exts, Limits(1034)).ok());

  absl::Status past = CompactShardTable::Open(bytes, &exts, Limits(1033)).status();
  EXPECT_TRUE(absl::StrContains(past.message(), "past the shard's end")) << past;

  ShardTableLimits few_classes = Limits();
  few_classes.max_classes = 5;
  absl::Status label = CompactShardTable::Open(bytes, &exts, few_classes).status();
  EXPECT_TRUE(absl::StrContains(label.message(), "label 5")) << label;

  ExtensionTable smaller;
  smaller.Intern("jpg");
  absl::Status ext = CompactShardTable::Open(bytes, &smaller, Limits()).status();
  EXPECT_TRUE(absl::StrContains(ext.message(), "extension id 1")) << ext;
}

// A sound table read from the wrong place (another shard's table, another cache file's)
// fails the checksum under the binding the caller expects, instead of serving another
// shard's samples.
TEST(CompactShardTableTest, TableOfAnotherBindingIsRefused) {
  std::mt19937_64 rng(5);
  ExtensionTable exts;
  const std::vector<SampleEntry> samples = RandomSamples(rng, 40);
  ShardTableEncodeOptions options;
  options.binding = 0x5eed0001;
  const std::string bytes = *EncodeShardTable(samples, &exts, options);
  ShardTableLimits limits = Limits();
  limits.binding = options.binding;
  EXPECT_TRUE(CompactShardTable::Open(bytes, &exts, limits).ok());
  for (uint64_t other : {uint64_t{0}, uint64_t{0x5eed0002}, ~uint64_t{0}}) {
    limits.binding = other;
    absl::Status s = CompactShardTable::Open(bytes, &exts, limits).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << other;
    EXPECT_TRUE(absl::StrContains(s.message(), "another shard's table")) << s;
  }
}

// One encoding per table: an overlong varint (found by compact_shard_table_fuzzer in an
// extension table: the length 3 written as 0x83 0x00) and a key that shares less of the
// previous key than it could are refused, though each would decode to the same values.
TEST(CompactShardTableTest, OnlyTheCanonicalEncodingIsAccepted) {
  ExtensionTable exts;
  exts.Intern("jpg");
  std::string ext_body = exts.Serialize();
  ext_body.resize(ext_body.size() - kTableChecksumBytes);
  const size_t len_at = ext_body.find("jpg") - 1;
  ASSERT_EQ(ext_body[len_at], 3);
  std::string overlong = ext_body;
  overlong.replace(len_at, 1, std::string("\x83\x00", 2));
  EXPECT_TRUE(ExtensionTable::Parse(SealWithTableChecksum(ext_body)).ok());
  EXPECT_FALSE(ExtensionTable::Parse(SealWithTableChecksum(overlong)).ok());

  std::vector<SampleEntry> samples(2);
  samples[0].key = "abc";
  samples[1].key = "abd";
  for (SampleEntry& e : samples) e.image_member = kNoImageMember;
  std::string body = Encode(samples, &exts);
  body.resize(body.size() - kTableChecksumBytes);
  ASSERT_TRUE(CompactShardTable::Open(SealWithTableChecksum(body), &exts, Limits()).ok());
  // The second record: shared 2, suffix "d". Rewritten as shared 1, suffix "bd".
  const size_t at =
      body.rfind(std::string("\x02\x01"
                             "d",
                             3));
  ASSERT_NE(at, std::string::npos);
  std::string shares_less = body;
  shares_less.replace(at, 3,
                      std::string("\x01\x02"
                                  "bd",
                                  4));
  const std::string sealed = SealWithTableChecksum(shares_less);
  absl::Status s = CompactShardTable::Open(sealed, &exts, Limits()).status();
  EXPECT_TRUE(absl::StrContains(s.message(), "could share more")) << s;
}

TEST(CompactShardTableTest, EncoderRefusesWhatTheDecoderWould) {
  ExtensionTable exts;
  SampleEntry ok;
  ok.key = "k";
  ok.members = {{"jpg", 512, 1}};
  SampleEntry no_key = ok;
  no_key.key.clear();
  SampleEntry bad_label = ok;
  bad_label.label = -2;
  SampleEntry bad_image = ok;
  bad_image.image_member = 1;
  for (const SampleEntry& e : {no_key, bad_label, bad_image}) {
    EXPECT_EQ(EncodeShardTable({ok, e}, &exts).status().code(), absl::StatusCode::kInvalidArgument);
  }
  for (uint32_t interval : {0u, kMaxRestartInterval + 1}) {
    ShardTableEncodeOptions options;
    options.restart_interval = interval;
    EXPECT_EQ(EncodeShardTable({ok}, &exts, options).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace shardcast

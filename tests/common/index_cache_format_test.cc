// The index cache / index file format on its own (common/shards/index_cache_format.h):
// a round trip, what makes a file stale (rebuilt without complaint) and what makes it
// corrupt (bad magic, checksum, truncation). What the cache's contents are bounded by
// (offsets, labels) and what BuildDatasetIndex does with a bad cache are in
// dataset_index_test.
#include "common/shards/index_cache_format.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/shards/compact_shard_table.h"

namespace shardcast {
namespace {

constexpr char kRoot[] = "/data/set";

ShardInfo Listed(const std::string& path, uint64_t size) {
  ShardInfo shard;
  shard.path = path;
  shard.file_size = size;
  shard.mtime_ns = 1700000000123456789;
  shard.ctime_ns = 1700000001000000000;
  shard.inode = 42;
  shard.device = 7;
  shard.etag = "\"etag-" + path + "\"";
  return shard;
}

// Two shards, the second skipped; one sample with a class name, one without.
ScanOutcome TwoShardOutcome() {
  ScanOutcome scan;
  ShardInfo served = Listed("s-1.tar", 10240);
  served.content_digest = "0123456789abcdef0123456789abcdef";
  SampleEntry a;
  a.key = "a_0";
  a.label = 2;
  a.image_member = 0;
  a.members = {MemberRef{"jpg", 512, 700}, MemberRef{"cls", 1536, 2}};
  SampleEntry b;
  b.key = "a_1";
  b.label = 0;
  b.image_member = 1;
  b.members = {MemberRef{"json", 2560, 30}, MemberRef{"png", 3584, 900}};
  served.samples = {a, b};
  scan.shards.push_back(served);
  scan.skip_reasons.emplace_back();
  scan.shards.push_back(Listed("s-2.tar", 0));
  scan.skip_reasons.push_back("empty file (0 bytes)");
  scan.skipped.push_back(SkippedSample{"s-1.tar", "a_9", "no image member"});
  scan.class_names = {"cat", "", "dog"};
  scan.warnings = {"shard s-2.tar skipped: empty file (0 bytes); serving the other shards"};
  scan.max_label = 2;
  return scan;
}

// The listing the outcome was scanned from: identities without samples.
std::vector<ShardInfo> ListingOf(const ScanOutcome& scan) {
  std::vector<ShardInfo> listed;
  for (const ShardInfo& shard : scan.shards) {
    ShardInfo bare = shard;
    bare.samples.clear();
    bare.content_digest.clear();
    listed.push_back(bare);
  }
  return listed;
}

std::string BodyOf(const std::string& file) {
  return file.substr(0, file.size() - kChecksumRecordBytes);
}

void ExpectCorrupt(const absl::StatusOr<std::optional<ScanOutcome>>& parsed,
                   const std::string& why) {
  ASSERT_FALSE(parsed.ok()) << why;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss) << parsed.status();
  EXPECT_TRUE(absl::StrContains(parsed.status().message(), "corrupt index cache: " + why))
      << parsed.status();
}

TEST(IndexCacheFormatTest, AnOutcomeReadsBackAsItWasWritten) {
  const ScanOutcome scan = TwoShardOutcome();
  const std::string file = SerializeScanOutcome(kRoot, IndexOptions(), scan).value();
  absl::StatusOr<std::optional<ScanOutcome>> parsed =
      ParseScanOutcome(file, kRoot, IndexOptions(), ListingOf(scan), IndexRecordKind::kCache);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->has_value());
  const ScanOutcome& back = **parsed;
  ASSERT_EQ(back.shards.size(), 2u);
  for (size_t i = 0; i < back.shards.size(); ++i) {
    const ShardInfo& want = scan.shards[i];
    const ShardInfo& got = back.shards[i];
    EXPECT_EQ(got.path, want.path);
    EXPECT_EQ(got.file_size, want.file_size);
    EXPECT_EQ(got.mtime_ns, want.mtime_ns);
    EXPECT_EQ(got.ctime_ns, want.ctime_ns);
    EXPECT_EQ(got.inode, want.inode);
    EXPECT_EQ(got.device, want.device);  // from the listing: not kept in the file
    EXPECT_EQ(got.etag, want.etag);
    EXPECT_EQ(got.content_digest, want.content_digest);
    EXPECT_EQ(got.compressed, want.compressed);
    ASSERT_EQ(got.samples.size(), want.samples.size());
    for (size_t s = 0; s < got.samples.size(); ++s) {
      EXPECT_EQ(got.samples[s].key, want.samples[s].key);
      EXPECT_EQ(got.samples[s].label, want.samples[s].label);
      EXPECT_EQ(got.samples[s].image_member, want.samples[s].image_member);
      ASSERT_EQ(got.samples[s].members.size(), want.samples[s].members.size());
      for (size_t m = 0; m < got.samples[s].members.size(); ++m) {
        EXPECT_EQ(got.samples[s].members[m].ext, want.samples[s].members[m].ext);
        EXPECT_EQ(got.samples[s].members[m].offset, want.samples[s].members[m].offset);
        EXPECT_EQ(got.samples[s].members[m].size, want.samples[s].members[m].size);
      }
    }
  }
  EXPECT_EQ(back.skip_reasons, scan.skip_reasons);
  ASSERT_EQ(back.skipped.size(), 1u);
  EXPECT_EQ(back.skipped[0].shard, "s-1.tar");
  EXPECT_EQ(back.skipped[0].key, "a_9");
  EXPECT_EQ(back.skipped[0].reason, "no image member");
  EXPECT_EQ(back.class_names, scan.class_names);
  EXPECT_EQ(back.warnings, scan.warnings);
  EXPECT_EQ(back.max_label, 2);
  // The same outcome writes the same bytes: nothing is lost or reordered.
  EXPECT_EQ(SerializeScanOutcome(kRoot, IndexOptions(), back).value(), file);
}

TEST(IndexCacheFormatTest, AFileForAnotherRootOptionsOrListingIsStaleNotCorrupt) {
  const ScanOutcome scan = TwoShardOutcome();
  const std::vector<ShardInfo> listed = ListingOf(scan);
  const std::string file = SerializeScanOutcome(kRoot, IndexOptions(), scan).value();
  const auto parse = [&](const std::string& root, const IndexOptions& options,
                         const std::vector<ShardInfo>& listing, IndexRecordKind kind) {
    return ParseScanOutcome(file, root, options, listing, kind);
  };
  const auto expect_stale = [](const absl::StatusOr<std::optional<ScanOutcome>>& parsed,
                               const std::string& what) {
    ASSERT_TRUE(parsed.ok()) << what << ": " << parsed.status();
    EXPECT_FALSE(parsed->has_value()) << what;
  };
  expect_stale(parse("/other", IndexOptions(), listed, IndexRecordKind::kCache), "root");
  IndexOptions other_field;
  other_field.label_field = "class";
  expect_stale(parse(kRoot, other_field, listed, IndexRecordKind::kCache), "label field");
  IndexOptions other_max;
  other_max.max_classes = 10;
  expect_stale(parse(kRoot, other_max, listed, IndexRecordKind::kCache), "max_classes");
  std::vector<ShardInfo> fewer = {listed[0]};
  expect_stale(parse(kRoot, IndexOptions(), fewer, IndexRecordKind::kCache), "shard count");
  std::vector<ShardInfo> renamed = listed;
  renamed[1].path = "s-3.tar";
  expect_stale(parse(kRoot, IndexOptions(), renamed, IndexRecordKind::kIndexFile), "name");
  std::vector<ShardInfo> resized = listed;
  resized[0].file_size += 1;
  expect_stale(parse(kRoot, IndexOptions(), resized, IndexRecordKind::kIndexFile), "size");

  // A file identity that changed (a touched shard, another ETag) makes a cache stale;
  // an index file records none to compare, so it still parses.
  std::vector<ShardInfo> touched = listed;
  touched[0].mtime_ns += 1;
  touched[1].etag = "\"new\"";
  expect_stale(parse(kRoot, IndexOptions(), touched, IndexRecordKind::kCache), "mtime");
  absl::StatusOr<std::optional<ScanOutcome>> as_index_file =
      parse(kRoot, IndexOptions(), touched, IndexRecordKind::kIndexFile);
  ASSERT_TRUE(as_index_file.ok()) << as_index_file.status();
  ASSERT_TRUE(as_index_file->has_value());
  EXPECT_EQ((*as_index_file)->shards[1].etag, scan.shards[1].etag);  // as recorded
}

TEST(IndexCacheFormatTest, AnotherFormatVersionIsStale) {
  const ScanOutcome scan = TwoShardOutcome();
  std::string body = BodyOf(SerializeScanOutcome(kRoot, IndexOptions(), scan).value());
  const size_t version_at = 8 + 8;  // after the magic's length prefix and its 8 bytes
  ASSERT_EQ(body.substr(version_at, 8), EncodeU64(kIndexVersion));
  body.replace(version_at, 8, EncodeU64(kIndexVersion - 1));
  absl::StatusOr<std::optional<ScanOutcome>> parsed = ParseScanOutcome(
      SealWithChecksum(body), kRoot, IndexOptions(), ListingOf(scan), IndexRecordKind::kCache);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->has_value());
}

TEST(IndexCacheFormatTest, BadMagicIsCorrupt) {
  const ScanOutcome scan = TwoShardOutcome();
  std::string body = BodyOf(SerializeScanOutcome(kRoot, IndexOptions(), scan).value());
  body[8] = 'X';  // the magic's first byte ("SCIDX...")
  ExpectCorrupt(ParseScanOutcome(SealWithChecksum(body), kRoot, IndexOptions(), ListingOf(scan),
                                 IndexRecordKind::kCache),
                "bad magic");
}

TEST(IndexCacheFormatTest, AnyChangedByteFailsTheChecksum) {
  const ScanOutcome scan = TwoShardOutcome();
  const std::string file = SerializeScanOutcome(kRoot, IndexOptions(), scan).value();
  for (size_t at = 0; at < file.size() - kChecksumRecordBytes; ++at) {
    std::string flipped = file;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x01);
    ExpectCorrupt(
        ParseScanOutcome(flipped, kRoot, IndexOptions(), ListingOf(scan), IndexRecordKind::kCache),
        "checksum mismatch");
  }
}

// A dataset of captions: no sample has an image or a label, so none needs one.
ScanOutcome CaptionOutcome() {
  ScanOutcome scan;
  ShardInfo served = Listed("t-1.tar", 10240);
  served.content_digest = "00112233445566778899aabbccddeeff";
  for (int i = 0; i < 2; ++i) {
    SampleEntry e;
    e.key = "t_" + std::to_string(i);
    e.image_member = kNoImageMember;
    e.members = {MemberRef{"txt", 512u + 2048u * i, 40}, MemberRef{"json", 1536u + 2048u * i, 90}};
    served.samples.push_back(e);
  }
  scan.shards.push_back(served);
  scan.skip_reasons.emplace_back();
  return scan;
}

TEST(IndexCacheFormatTest, SamplesWithoutImagesOrLabelsReadBack) {
  const ScanOutcome scan = CaptionOutcome();
  const std::string file = SerializeScanOutcome(kRoot, IndexOptions(), scan).value();
  absl::StatusOr<std::optional<ScanOutcome>> parsed =
      ParseScanOutcome(file, kRoot, IndexOptions(), ListingOf(scan), IndexRecordKind::kCache);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->has_value());
  const ScanOutcome& back = **parsed;
  EXPECT_EQ(back.max_label, -1);
  ASSERT_EQ(back.shards[0].samples.size(), 2u);
  for (const SampleEntry& e : back.shards[0].samples) {
    EXPECT_EQ(e.label, -1);
    EXPECT_EQ(e.image_member, kNoImageMember);
    EXPECT_EQ(ImageMember(e), nullptr);
  }
  EXPECT_EQ(SerializeScanOutcome(kRoot, IndexOptions(), back).value(), file);
}

// The scan serves a sample without an image (a label) only where no sample has one: a
// file that says otherwise was not written by a scan.
TEST(IndexCacheFormatTest, SamplesWithAndWithoutImagesOrLabelsSideBySideAreCorrupt) {
  ScanOutcome scan = TwoShardOutcome();
  scan.shards[0].samples[1].image_member = kNoImageMember;
  ExpectCorrupt(ParseScanOutcome(SerializeScanOutcome(kRoot, IndexOptions(), scan).value(), kRoot,
                                 IndexOptions(), ListingOf(scan), IndexRecordKind::kCache),
                "samples without an image beside samples with one");
  scan = TwoShardOutcome();
  scan.shards[0].samples[1].label = -1;
  ExpectCorrupt(ParseScanOutcome(SerializeScanOutcome(kRoot, IndexOptions(), scan).value(), kRoot,
                                 IndexOptions(), ListingOf(scan), IndexRecordKind::kCache),
                "samples without a label beside samples with one");
  // Only kNoImageMember stands for "no image", and -1 for "no label": the compact table
  // cannot hold another image index past the members or a label below -1, so such an
  // outcome is not written (its decoder's refusal of such bytes is
  // compact_shard_table_test's).
  for (const uint32_t image : {2u, kNoImageMember - 1}) {
    scan = CaptionOutcome();
    scan.shards[0].samples[0].image_member = image;
    absl::StatusOr<std::string> written = SerializeScanOutcome(kRoot, IndexOptions(), scan);
    ASSERT_FALSE(written.ok());
    EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument) << written.status();
    EXPECT_TRUE(absl::StrContains(written.status().message(), "t-1.tar")) << written.status();
  }
  scan = CaptionOutcome();
  scan.shards[0].samples[0].label = -2;
  scan.max_label = -1;
  EXPECT_EQ(SerializeScanOutcome(kRoot, IndexOptions(), scan).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A label at or above max_classes, or a member past its shard's end, is written (the
// table's encoder knows neither bound) but refused when read: the reader bounds every
// record by the options and the listing it reads against.
TEST(IndexCacheFormatTest, TableRecordsAreBoundedByTheOptionsAndTheShard) {
  ScanOutcome scan = TwoShardOutcome();
  IndexOptions options;
  options.max_classes = 2;  // sample a_0 has label 2
  scan.class_names.clear();
  scan.max_label = 1;  // as the file says, within max_classes: the table's label is not
  ExpectCorrupt(ParseScanOutcome(SerializeScanOutcome(kRoot, options, scan).value(), kRoot, options,
                                 ListingOf(scan), IndexRecordKind::kCache),
                "s-1.tar: corrupt shard table: sample 'a_0': label 2 out of range");
  scan = TwoShardOutcome();
  scan.shards[0].samples[1].members[1].size = 10240;
  ExpectCorrupt(ParseScanOutcome(SerializeScanOutcome(kRoot, IndexOptions(), scan).value(), kRoot,
                                 IndexOptions(), ListingOf(scan), IndexRecordKind::kCache),
                "s-1.tar: corrupt shard table: sample 'a_1': member .png at 3584 (10240 bytes) "
                "lies past the shard's end (10240)");
  scan = TwoShardOutcome();
  scan.max_label = 1;  // the samples' is 2
  scan.class_names = {"cat", ""};
  ExpectCorrupt(ParseScanOutcome(SerializeScanOutcome(kRoot, IndexOptions(), scan).value(), kRoot,
                                 IndexOptions(), ListingOf(scan), IndexRecordKind::kCache),
                "max label");
}

// Where a shard's table lies in the file, as the test finds it: the tables are the last
// bytes before the closing checksum record, in shard order.
std::string TablesOf(const std::string& file, const ScanOutcome& scan) {
  size_t tables = 0;
  for (const ShardInfo& shard : scan.shards) {
    ExtensionTable exts;
    tables += EncodeShardTable(shard.samples, &exts).value().size();
  }
  return file.substr(file.size() - kChecksumRecordBytes - tables, tables);
}

// Each table is checked on its own (the serve path reads one alone): a table whose
// bytes changed fails its checksum even where the whole file was sealed again, and
// a sound table moved to another shard's place fails it too (its binding is the
// shard's), so no shard is ever read with another's keys and offsets.
TEST(IndexCacheFormatTest, EachShardTableHasItsOwnChecksumAndBinding) {
  ScanOutcome scan = TwoShardOutcome();
  scan.skip_reasons[1].clear();  // both served, so both hold a table of samples
  scan.shards[1] = Listed("s-2.tar", 10240);
  scan.shards[1].samples = scan.shards[0].samples;
  scan.warnings.clear();
  const std::string file = SerializeScanOutcome(kRoot, IndexOptions(), scan).value();
  const std::string body = BodyOf(file);
  const std::string tables = TablesOf(file, scan);
  ASSERT_EQ(tables.size() % 2, 0u);
  const size_t tables_at = body.size() - tables.size();
  const size_t half = tables.size() / 2;
  ASSERT_TRUE(
      ParseScanOutcome(file, kRoot, IndexOptions(), ListingOf(scan), IndexRecordKind::kCache).ok());
  for (size_t at = tables_at; at < body.size(); ++at) {
    std::string flipped = body;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x01);
    ExpectCorrupt(ParseScanOutcome(SealWithChecksum(flipped), kRoot, IndexOptions(),
                                   ListingOf(scan), IndexRecordKind::kCache),
                  at < tables_at + half ? "s-1.tar: corrupt shard table: bad checksum"
                                        : "s-2.tar: corrupt shard table: bad checksum");
  }
  // The two tables hold the same samples, of the same size: swapped, each is the other
  // shard's, sound but bound to the other ordinal and record.
  std::string swapped = body.substr(0, tables_at) + tables.substr(half) + tables.substr(0, half);
  ExpectCorrupt(ParseScanOutcome(SealWithChecksum(swapped), kRoot, IndexOptions(), ListingOf(scan),
                                 IndexRecordKind::kCache),
                "s-1.tar: corrupt shard table: bad checksum");
}

// The tables take exactly the bytes the records give them: none missing, none over.
TEST(IndexCacheFormatTest, TablesThatDoNotFillTheirPlaceAreCorrupt) {
  const ScanOutcome scan = TwoShardOutcome();
  const std::string body = BodyOf(SerializeScanOutcome(kRoot, IndexOptions(), scan).value());
  ExpectCorrupt(ParseScanOutcome(SealWithChecksum(body + "x"), kRoot, IndexOptions(),
                                 ListingOf(scan), IndexRecordKind::kCache),
                "tables of");
  ExpectCorrupt(ParseScanOutcome(SealWithChecksum(body.substr(0, body.size() - 1)), kRoot,
                                 IndexOptions(), ListingOf(scan), IndexRecordKind::kCache),
                "tables of");
}

// The fuzzer's helper: a sound body is what it was; a table changed and resealed reaches
// the table's decoder, which refuses what no scan writes.
TEST(IndexCacheFormatTest, ResealedTablesReachTheTableDecoder) {
  const ScanOutcome scan = TwoShardOutcome();
  const std::string file = SerializeScanOutcome(kRoot, IndexOptions(), scan).value();
  const std::string body = BodyOf(file);
  EXPECT_EQ(ResealShardTables(body, kRoot, IndexOptions()), body);
  // The first record of s-1.tar's table: shared 0, suffix length 3, "a_0", zigzag(2) = 4.
  std::string changed = body;
  const size_t label_at = changed.find(std::string("\x00\x03"
                                                   "a_0",
                                                   5)) +
                          5;
  ASSERT_EQ(changed[label_at], 4);
  changed[label_at] = 3;  // zigzag(-2): a label below -1
  ExpectCorrupt(
      ParseScanOutcome(SealWithChecksum(ResealShardTables(changed, kRoot, IndexOptions())), kRoot,
                       IndexOptions(), ListingOf(scan), IndexRecordKind::kCache),
      "s-1.tar: corrupt shard table: sample 'a_0': label -2 out of range");
}

// A server's start reads the header alone: the tables are located and the samples'
// figures read from the header, under its own checksum; a table is checked only when
// it is read (a changed table byte passes here and fails its own checksum there).
TEST(IndexCacheFormatTest, AHeaderOnlyReadLocatesTheTablesAndTrustsOnlyTheHeadersChecksum) {
  ScanOutcome scan = TwoShardOutcome();
  scan.fingerprint = "0123456789abcdef0123456789abcdef";
  const std::string file = SerializeScanOutcome(kRoot, IndexOptions(), scan).value();
  absl::StatusOr<std::optional<ScanOutcome>> full =
      ParseScanOutcome(file, kRoot, IndexOptions(), ListingOf(scan), IndexRecordKind::kCache);
  absl::StatusOr<std::optional<ScanOutcome>> head = ParseScanOutcome(
      file, kRoot, IndexOptions(), ListingOf(scan), IndexRecordKind::kCache, ParseDepth::kHeader);
  ASSERT_TRUE(full.ok() && full->has_value()) << full.status();
  ASSERT_TRUE(head.ok() && head->has_value()) << head.status();
  EXPECT_TRUE((*head)->shards[0].samples.empty());
  EXPECT_EQ((*head)->fingerprint, scan.fingerprint);
  EXPECT_EQ((*full)->fingerprint, scan.fingerprint);
  EXPECT_TRUE((*head)->has_images);
  EXPECT_TRUE((*head)->has_labels);
  EXPECT_EQ((*head)->largest_image_bytes, 900u);
  const std::map<std::string, int64_t> extensions = {
      {"cls", 1}, {"jpg", 1}, {"json", 1}, {"png", 1}};
  EXPECT_EQ((*head)->extension_counts, extensions);
  EXPECT_EQ((*head)->max_label, 2);
  ASSERT_EQ((*head)->tables.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*head)->tables[i].offset, (*full)->tables[i].offset);
    EXPECT_EQ((*head)->tables[i].size, (*full)->tables[i].size);
    EXPECT_EQ((*head)->tables[i].limits.binding, (*full)->tables[i].limits.binding);
  }
  EXPECT_EQ((*head)->tables[0].samples, 2u);

  // Every header byte is under the header's checksum (the whole file's is not read).
  const size_t head_end = (*head)->tables[0].offset;
  for (size_t at = 8 + 8 + 8; at < head_end; ++at) {
    std::string flipped = file;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x01);
    absl::StatusOr<std::optional<ScanOutcome>> parsed =
        ParseScanOutcome(flipped, kRoot, IndexOptions(), ListingOf(scan), IndexRecordKind::kCache,
                         ParseDepth::kHeader);
    // A changed root, label field, count or shard identity is another file's (stale).
    if (parsed.ok()) {
      EXPECT_FALSE(parsed->has_value()) << at;
    } else {
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss) << at;
    }
  }
  // The header alone (as a server reads it: the header's size is its third number),
  // with the file's size, locates the same tables; a prefix short of it is corrupt.
  ASSERT_EQ(file.substr(8 + 8 + 8, 8), EncodeU64(head_end));
  absl::StatusOr<std::optional<ScanOutcome>> prefix =
      ParseScanOutcome(file.substr(0, head_end), kRoot, IndexOptions(), ListingOf(scan),
                       IndexRecordKind::kCache, ParseDepth::kHeader, file.size());
  ASSERT_TRUE(prefix.ok() && prefix->has_value()) << prefix.status();
  EXPECT_EQ((*prefix)->tables[1].offset, (*full)->tables[1].offset);
  EXPECT_EQ((*prefix)->fingerprint, scan.fingerprint);
  EXPECT_FALSE(ParseScanOutcome(file.substr(0, head_end - 1), kRoot, IndexOptions(),
                                ListingOf(scan), IndexRecordKind::kCache, ParseDepth::kHeader,
                                file.size())
                   .ok());
  // The file's size must be the header's and the tables' and the closing checksum's.
  EXPECT_FALSE(ParseScanOutcome(file.substr(0, head_end), kRoot, IndexOptions(), ListingOf(scan),
                                IndexRecordKind::kCache, ParseDepth::kHeader, file.size() - 1)
                   .ok());
  std::string table_changed = file;
  table_changed[head_end + 6] ^= 0x01;
  EXPECT_TRUE(ParseScanOutcome(table_changed, kRoot, IndexOptions(), ListingOf(scan),
                               IndexRecordKind::kCache, ParseDepth::kHeader)
                  .ok());
}

// A full read checks the header's figures against the samples: a header that says
// otherwise (written by no scan) is corrupt, so a header-only read can trust them.
TEST(IndexCacheFormatTest, AHeaderWhoseFiguresAreNotTheSamplesIsCorrupt) {
  const ScanOutcome scan = TwoShardOutcome();
  std::string body = BodyOf(SerializeScanOutcome(kRoot, IndexOptions(), scan).value());
  // The summary: the fingerprint (""), then the flags (3: images and labels) and the
  // largest image (900).
  const std::string summary = EncodeU64(0) + EncodeU64(3) + EncodeU64(900);
  const size_t at = body.find(summary);
  ASSERT_NE(at, std::string::npos);
  body.replace(at + 8, 8, EncodeU64(1));  // "no labels"
  ExpectCorrupt(ParseScanOutcome(SealWithChecksum(ResealShardTables(body, kRoot, IndexOptions())),
                                 kRoot, IndexOptions(), ListingOf(scan), IndexRecordKind::kCache),
                "summary does not match the samples");
  // Without the header resealed, its own checksum catches it first.
  ExpectCorrupt(ParseScanOutcome(SealWithChecksum(body), kRoot, IndexOptions(), ListingOf(scan),
                                 IndexRecordKind::kCache),
                "header checksum mismatch");
}

TEST(IndexCacheFormatTest, TruncationIsCorrupt) {
  const ScanOutcome scan = TwoShardOutcome();
  const std::vector<ShardInfo> listed = ListingOf(scan);
  const std::string file = SerializeScanOutcome(kRoot, IndexOptions(), scan).value();
  // A file cut short: its end is no checksum of the rest.
  for (size_t size = 0; size < file.size(); ++size) {
    absl::StatusOr<std::optional<ScanOutcome>> parsed = ParseScanOutcome(
        file.substr(0, size), kRoot, IndexOptions(), listed, IndexRecordKind::kCache);
    ASSERT_FALSE(parsed.ok()) << size;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss) << size;
  }
  // A body cut short and sealed again (written by a broken writer): every cut after the
  // version field is a record that does not finish.
  const std::string body = BodyOf(file);
  for (size_t size = 8 + 8 + 8; size < body.size(); ++size) {
    absl::StatusOr<std::optional<ScanOutcome>> parsed =
        ParseScanOutcome(SealWithChecksum(body.substr(0, size)), kRoot, IndexOptions(), listed,
                         IndexRecordKind::kCache);
    ASSERT_FALSE(parsed.ok()) << size;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss) << size;
  }
}

}  // namespace
}  // namespace shardcast

// Datasets of any WebDataset sample (issue 37) on real tar files: text-only datasets
// (no image, no label), image-text pairs without labels, text with labels, WebP images,
// the dataset-level rules that keep image datasets as they were (their index, skipped
// list and fingerprint), the index cache across the format change, and hostile member
// names and counts.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/shards/dataset_index.h"
#include "common/shards/index_cache_format.h"
#include "common/shards/tar_reader.h"
#include "gtest/gtest.h"
#include "tests/common/shard_test_util.h"

namespace shardcast {
namespace {

using shard_testing::FileSpec;
using shard_testing::ScopedTempDir;

// Writes `files` (names as raw bytes, in this order) as a tar at `out` with Python's
// tarfile in `format` ("GNU_FORMAT", "PAX_FORMAT"), every header fixed (mtime 0, mode
// 0644, no owner): the same bytes on every run, so a fingerprint can be pinned, and
// names no file system would take ("../x.txt", bytes that are not UTF-8) as they are.
void WriteFixedTar(const std::string& scratch, const std::vector<FileSpec>& files,
                   const std::string& out, const std::string& format = "GNU_FORMAT") {
  std::string spec;
  const auto add = [&spec](const std::string& bytes) {
    spec += absl::StrCat(bytes.size(), "\n");
    spec += bytes;
  };
  for (const FileSpec& f : files) {
    add(f.name);
    add(f.content);
  }
  static int counter = 0;
  const std::string spec_path = absl::StrCat(scratch, "/fixed-tar-", counter++, ".spec");
  shard_testing::WriteFile(spec_path, spec);
  const std::string py =
      "import io, sys, tarfile\n"
      "spec, out, fmt = open(sys.argv[1], 'rb').read(), sys.argv[2], sys.argv[3]\n"
      "pos = 0\n"
      "def take():\n"
      "    global pos\n"
      "    nl = spec.index(b'\\n', pos)\n"
      "    n = int(spec[pos:nl]); pos = nl + 1 + n\n"
      "    return spec[nl + 1:pos]\n"
      "with tarfile.open(out, 'w', format=getattr(tarfile, fmt), encoding='utf-8',\n"
      "                  errors='surrogateescape') as t:\n"
      "    while pos < len(spec):\n"
      "        name = take().decode('utf-8', 'surrogateescape'); data = take()\n"
      "        info = tarfile.TarInfo(name); info.size = len(data); info.mtime = 0\n"
      "        info.mode = 0o644\n"
      "        t.addfile(info, io.BytesIO(data))\n";
  const std::string py_path = spec_path + ".py";
  shard_testing::WriteFile(py_path, py);
  const std::string cmd = absl::StrCat(
      shard_testing::PythonBinary(), " ", shard_testing::ShellQuote(py_path), " ",
      shard_testing::ShellQuote(spec_path), " ", shard_testing::ShellQuote(out), " ", format);
  ASSERT_EQ(shard_testing::RunShell(cmd), 0) << cmd;
}

// An img2dataset-style caption and metadata (no "label" field), CJK and emoji included.
std::vector<FileSpec> CaptionSample(const std::string& key, const std::string& image_ext = "") {
  std::vector<FileSpec> files;
  if (!image_ext.empty()) {
    files.push_back({key + "." + image_ext, shard_testing::Payload(key, 300)});
  }
  files.push_back({key + ".txt", "a photo of " + key + " \xe7\x8c\xab \xf0\x9f\x90\x88"});
  files.push_back({key + ".json", "{\"url\": \"http://x/" + key + "\", \"width\": 64}"});
  return files;
}

std::vector<FileSpec> Concat(std::vector<std::vector<FileSpec>> parts) {
  std::vector<FileSpec> out;
  for (auto& part : parts) {
    for (FileSpec& f : part) out.push_back(std::move(f));
  }
  return out;
}

std::string Skips(const DatasetIndex& index) {
  std::string out;
  for (const SkippedSample& s : index.skipped) {
    absl::StrAppend(&out, s.shard, " ", s.key, ": ", s.reason, "\n");
  }
  return out;
}

class DatasetRulesTest : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_directories(data_dir()); }
  std::string data_dir() const { return tmp_ / "data"; }
  std::string shard(const std::string& name) const { return data_dir() + "/" + name; }
  void WriteShard(const std::string& name, const std::vector<FileSpec>& files) {
    WriteFixedTar(tmp_.path(), files, shard(name));
  }
  DatasetIndex Index(const IndexOptions& options = IndexOptions()) {
    absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data_dir(), options);
    EXPECT_TRUE(index.ok()) << index.status();
    return index.ok() ? *std::move(index) : DatasetIndex();
  }
  ScopedTempDir tmp_;
};

TEST_F(DatasetRulesTest, TextOnlyDatasetIsServedWithoutImagesOrLabels) {
  WriteShard("text-0.tar", Concat({CaptionSample("t0"), CaptionSample("t1")}));
  WriteShard("text-1.tar", Concat({CaptionSample("t2"), CaptionSample("t3"), CaptionSample("t4")}));
  shard_testing::WriteFile(shard("info.json"), R"({"dataset size": 5, "num_classes": 7})");

  const DatasetIndex index = Index();
  EXPECT_EQ(index.num_samples, 5);
  EXPECT_EQ(index.ShardSampleCounts(), (std::vector<uint32_t>{2, 3}));
  EXPECT_FALSE(index.has_images);
  EXPECT_FALSE(index.has_labels);
  EXPECT_EQ(index.num_classes, 0);  // info.json's 7 would size a classifier for nothing
  EXPECT_TRUE(index.class_names.empty());
  EXPECT_TRUE(index.skipped.empty()) << Skips(index);
  ASSERT_EQ(index.warnings.size(), 1u);
  EXPECT_TRUE(absl::StrContains(index.warnings[0], "no sample has a label")) << index.warnings[0];
  for (const ShardInfo& s : index.shards) {
    const absl::StatusOr<std::string> stream = ReadUncompressedStream(shard(s.path));
    ASSERT_TRUE(stream.ok()) << stream.status();
    for (const SampleEntry& e : s.samples) {
      EXPECT_EQ(e.label, -1);
      EXPECT_EQ(e.image_member, kNoImageMember);
      EXPECT_EQ(ImageMember(e), nullptr);
      ASSERT_EQ(e.members.size(), 2u);
      EXPECT_EQ(e.members[0].ext, "txt");
      EXPECT_EQ(e.members[1].ext, "json");
      const std::vector<FileSpec> want = CaptionSample(e.key);
      for (size_t m = 0; m < 2; ++m) {
        EXPECT_EQ(stream->substr(e.members[m].offset, e.members[m].size), want[m].content) << e.key;
      }
    }
  }
}

TEST_F(DatasetRulesTest, ImageCaptionPairsWithoutLabelsKeepTheirImagesWebpIncluded) {
  WriteShard("pairs.tar",
             Concat({CaptionSample("p0", "jpg"), CaptionSample("p1", "webp"),
                     CaptionSample("p2", "png"), CaptionSample("p3"), CaptionSample("p4", "gif")}));
  const DatasetIndex index = Index();
  EXPECT_TRUE(index.has_images);
  EXPECT_FALSE(index.has_labels);
  EXPECT_EQ(index.num_classes, 0);
  ASSERT_EQ(index.num_samples, 3);
  const std::vector<std::string> image_exts = {"jpg", "webp", "png"};
  for (size_t i = 0; i < 3; ++i) {
    const SampleEntry& e = index.shards[0].samples[i];
    EXPECT_EQ(e.label, -1);
    ASSERT_NE(ImageMember(e), nullptr);
    EXPECT_EQ(ImageMember(e)->ext, image_exts[i]);
  }
  // A dataset with images skips the samples without one, as it always did.
  EXPECT_EQ(Skips(index),
            "pairs.tar p3: no image member (jpg, jpeg, png or webp)\n"
            "pairs.tar p4: no decodable image member (found 'gif'; only jpg, jpeg, png and webp "
            "are decoded)\n");
}

TEST_F(DatasetRulesTest, TextWithLabelsKeepsLabelsWithoutImages) {
  WriteShard("cls.tar", {{"a.txt", "good"},
                         {"a.cls", "1"},
                         {"b.txt", "bad"},
                         {"b.cls", "0"},
                         {"c.txt", "unlabeled"},
                         {"d.txt", "broken label"},
                         {"d.cls", "one"}});
  const DatasetIndex index = Index();
  EXPECT_FALSE(index.has_images);
  EXPECT_TRUE(index.has_labels);
  EXPECT_EQ(index.num_classes, 2);
  ASSERT_EQ(index.num_samples, 2);
  EXPECT_EQ(index.shards[0].samples[0].label, 1);
  EXPECT_EQ(index.shards[0].samples[1].label, 0);
  EXPECT_EQ(Skips(index),
            "cls.tar c: no label (no .cls member and no .json with field 'label')\n"
            "cls.tar d: label member 'd.cls' is not an integer: 'one'\n");
}

// Labels in one shard decide for the other: the rules are the dataset's, not a shard's.
TEST_F(DatasetRulesTest, MixedDatasetSkipsAcrossShardsInArchiveOrder) {
  WriteShard("m-1.tar", {{"u0.jpg", "J"}, {"u0.txt", "unlabeled"}, {"u1.jpg", "J"}});
  WriteShard("m-2.tar", {{"bad.cls", "x"},
                         {"bad.jpg", "J"},
                         {"l0.jpg", "J"},
                         {"l0.cls", "3"},
                         {"meta.jpg", "J"},
                         {"meta.json", R"({"url": "u"})"},
                         {"txt.txt", "T"},
                         {"txt.cls", "1"},
                         {"l1.png", "P"},
                         {"l1.cls", "0"},
                         {"README", "no dot"}});
  const DatasetIndex index = Index();
  EXPECT_TRUE(index.has_images);
  EXPECT_TRUE(index.has_labels);
  EXPECT_EQ(index.num_classes, 4);
  EXPECT_EQ(index.ShardSampleCounts(), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(Skips(index),
            "m-1.tar u0: no label (no .cls member and no .json with field 'label')\n"
            "m-1.tar u1: no label (no .cls member and no .json with field 'label')\n"
            "m-2.tar README: no '.' in the file name (or nothing before it): not part of any "
            "sample\n"
            "m-2.tar bad: label member 'bad.cls' is not an integer: 'x'\n"
            "m-2.tar meta: member 'meta.json' has no field 'label'\n"
            "m-2.tar txt: no image member (jpg, jpeg, png or webp)\n");
}

// An image dataset as main indexed it before issue 37: the fingerprint and the skipped
// list below were taken from the index of these very bytes at commit cf4c8d3 (only the
// gif reason's list of decoded formats grew webp).
TEST_F(DatasetRulesTest, ImageDatasetIndexIsAsBefore) {
  WriteShard("img-1.tar", {{"a0.jpg", "JPEG-0"},
                           {"a0.cls", "0"},
                           {"a0.json", R"({"label": 0, "class": "zero"})"},
                           {"a1.png", "PNG-1"},
                           {"a1.cls", "1"},
                           {"nolabel.jpg", "J"},
                           {"noimage.txt", "T"},
                           {"noimage.cls", "1"},
                           {"gif.gif", "G"},
                           {"gif.cls", "0"}});
  WriteShard("img-2.tar", {{"b0.seg.png", "S"},
                           {"b0.jpeg", "JPEG-b0"},
                           {"b0.json", R"({"label": 2})"},
                           {"meta.jpg", "J"},
                           {"meta.json", R"({"url": "u"})"},
                           {"dup.jpg", "J"},
                           {"dup.JPG", "J"},
                           {"dup.cls", "1"}});
  const DatasetIndex index = Index();
  EXPECT_TRUE(index.has_images);
  EXPECT_TRUE(index.has_labels);
  EXPECT_EQ(index.ShardSampleCounts(), (std::vector<uint32_t>{2, 1}));
  EXPECT_EQ(index.num_classes, 3);
  EXPECT_EQ(index.class_names, (std::vector<std::string>{"zero", "", ""}));
  EXPECT_EQ(index.shards[1].samples[0].image_member, 1u);  // "jpeg" before "seg.png"
  EXPECT_EQ(Skips(index),
            "img-1.tar nolabel: no label (no .cls member and no .json with field 'label')\n"
            "img-1.tar noimage: no image member (jpg, jpeg, png or webp)\n"
            "img-1.tar gif: no decodable image member (found 'gif'; only jpg, jpeg, png and webp "
            "are decoded)\n"
            "img-2.tar meta: member 'meta.json' has no field 'label'\n"
            "img-2.tar dup: duplicate extension 'jpg' (member 'dup.JPG')\n");
  EXPECT_EQ(index.fingerprint, "25dc1486872e8a2fa1633bf0d0484784");
}

// A remote dataset indexed from the index file next to its shards, with one shard whose
// ETag does not vouch for its record: that shard is scanned again, and the dataset's
// rules are applied over the file's records and the scan together. Here the rescanned
// shard now has labels, so the file's unlabeled samples are skipped, as a full scan of
// the same bytes skips them.
TEST_F(DatasetRulesTest, IndexFileAndRescannedShardsAreRuledTogether) {
  WriteShard("r-1.tar", Concat({CaptionSample("a0"), CaptionSample("a1")}));
  WriteShard("r-2.tar", CaptionSample("b0"));
  IndexOptions options;
  const DatasetIndex before = Index(options);
  ASSERT_FALSE(before.has_labels);
  const std::string index_file = SerializeIndexFile(before, options).value();
  // The same size (tar pads to 10240 bytes), other bytes: a label now.
  WriteShard("r-2.tar", {{"b0.txt", "captioned and labeled"}, {"b0.cls", "1"}});
  ASSERT_EQ(std::filesystem::file_size(shard("r-2.tar")), before.shards[1].file_size);

  const auto listing_of = [&](bool vouch_second) {
    ShardListing listing;
    listing.root = "s3://bucket/d/";
    for (const ShardInfo& indexed : before.shards) {
      ShardInfo listed;
      listed.path = indexed.path;
      listed.file_size = indexed.file_size;
      const bool vouched = indexed.path == "r-1.tar" || vouch_second;
      listed.etag = vouched ? "\"" + indexed.content_digest + "\"" : "\"multipart-2\"";
      listing.shards.push_back(listed);
    }
    listing.scan = [this, &options](const ShardInfo& listed) {
      return ScanShardFile(shard(listed.path), listed, options, /*check_identity=*/false);
    };
    listing.index_file = index_file;
    return listing;
  };
  // Every record vouched for: the file is the index, without a scan.
  absl::StatusOr<DatasetIndex> from_file = BuildIndexFromListing(listing_of(true), options);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_TRUE(from_file->loaded_from_index_file);
  EXPECT_FALSE(from_file->has_labels);
  EXPECT_FALSE(from_file->has_images);
  EXPECT_EQ(from_file->fingerprint, before.fingerprint);

  absl::StatusOr<DatasetIndex> merged = BuildIndexFromListing(listing_of(false), options);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_TRUE(merged->loaded_from_index_file);
  EXPECT_TRUE(merged->has_labels);
  EXPECT_EQ(merged->num_classes, 2);
  EXPECT_EQ(merged->ShardSampleCounts(), (std::vector<uint32_t>{0, 1}));
  const DatasetIndex scanned = Index(options);
  EXPECT_EQ(merged->fingerprint, scanned.fingerprint);
  EXPECT_EQ(Skips(*merged), Skips(scanned));
  EXPECT_EQ(Skips(scanned),
            "r-1.tar a0: member 'a0.json' has no field 'label'\n"
            "r-1.tar a1: member 'a1.json' has no field 'label'\n");
}

// The index cache of a text dataset reads back as the scan, and a cache of the format
// before samples without images existed (version 5) is rebuilt without complaint.
TEST_F(DatasetRulesTest, TextDatasetCacheReadsBackAndVersion5IsRebuilt) {
  WriteShard("c.tar", Concat({CaptionSample("c0"), CaptionSample("c1")}));
  IndexOptions options;
  options.cache_dir = tmp_ / "cache";
  const DatasetIndex scanned = Index(options);
  const std::string cache = std::filesystem::directory_iterator(options.cache_dir)->path().string();
  const DatasetIndex cached = Index(options);
  EXPECT_TRUE(cached.loaded_from_cache);
  EXPECT_FALSE(cached.has_images);
  EXPECT_FALSE(cached.has_labels);
  EXPECT_EQ(cached.fingerprint, scanned.fingerprint);
  ASSERT_EQ(cached.num_samples, 2);
  EXPECT_EQ(cached.shards[0].samples[1].image_member, kNoImageMember);
  EXPECT_TRUE(cached.warnings.empty());

  std::string body = shard_testing::ReadWholeFile(cache);
  body.resize(body.size() - kChecksumRecordBytes);
  const size_t version_at = 8 + 8;  // after the magic's length prefix and its 8 bytes
  ASSERT_EQ(body.substr(version_at, 8), EncodeU64(7));
  body.replace(version_at, 8, EncodeU64(6));
  shard_testing::WriteFile(cache, SealWithChecksum(body));
  const DatasetIndex rebuilt = Index(options);
  EXPECT_FALSE(rebuilt.loaded_from_cache);
  EXPECT_TRUE(rebuilt.warnings.empty());
  EXPECT_EQ(rebuilt.fingerprint, scanned.fingerprint);
  EXPECT_TRUE(Index(options).loaded_from_cache);  // rewritten as version 7
}

// Hostile member names and counts: each sample is indexed or skipped with a reason, and
// nothing crashes. (The scan holds every member's name once, and a tar spends at least
// a 512-byte header on each, so what it holds is bounded by the shard's size.)
TEST_F(DatasetRulesTest, HostileNamesAndCountsAreIndexedOrSkipped) {
  std::vector<FileSpec> files;
  for (int i = 0; i < 10000; ++i) files.push_back({absl::StrCat("many.e", i), "x"});
  files.push_back({"many.txt", "ten thousand members"});
  for (int i = 0; i < 3; ++i) files.push_back({"dups.txt", absl::StrCat("copy ", i)});
  const std::string long_ext(300, 'x');
  files.push_back({"long." + long_ext, "a 300-character extension"});
  files.push_back({"a..b.txt", "two dots"});
  files.push_back({"../up.txt", "a parent directory"});
  files.push_back({"dir/../x.txt", "a parent directory inside"});
  files.push_back({"\xff\xfe.txt", "a key that is not UTF-8"});
  files.push_back({"k.t\xffxt", "an extension that is not UTF-8"});
  WriteShard("hostile.tar", files);

  const DatasetIndex index = Index();
  std::map<std::string, std::vector<std::string>> exts;  // by key
  for (const SampleEntry& e : index.shards[0].samples) {
    for (const MemberRef& m : e.members) exts[e.key].push_back(m.ext);
  }
  ASSERT_EQ(exts.count("many"), 1u);
  EXPECT_EQ(exts["many"].size(), 10001u);
  EXPECT_EQ(exts["many"][9999], "e9999");
  EXPECT_EQ(exts["long"], (std::vector<std::string>{long_ext}));
  EXPECT_EQ(exts["a"], (std::vector<std::string>{".b.txt"}));  // the key ends at the first dot
  EXPECT_EQ(exts["../up"], (std::vector<std::string>{"txt"}));
  EXPECT_EQ(exts["dir/../x"], (std::vector<std::string>{"txt"}));
  EXPECT_EQ(exts["\xff\xfe"], (std::vector<std::string>{"txt"}));
  EXPECT_EQ(exts["k"], (std::vector<std::string>{"t\xffxt"}));
  EXPECT_EQ(index.num_samples, 7);
  EXPECT_EQ(Skips(index), "hostile.tar dups: duplicate extension 'txt' (member 'dups.txt')\n");
}

// A member name is at most what libarchive reads of a long-name header (1 MiB): a
// longer one breaks its shard there, as any bad header does, and the samples read
// before it are kept.
TEST_F(DatasetRulesTest, ANameOverOneMebibyteBreaksItsShardThere) {
  WriteFixedTar(tmp_.path(),
                {{"a.txt", "first"},
                 {"a.json", "{}"},
                 {"b.txt", "second"},
                 {"c." + std::string(2 << 20, 'x'), "a 2 MiB extension"},
                 {"d.txt", "after the break"}},
                shard("long-pax.tar"), "PAX_FORMAT");
  WriteShard("fine.tar", CaptionSample("f0"));
  const DatasetIndex index = Index();
  EXPECT_EQ(index.ShardSampleCounts(), (std::vector<uint32_t>{1, 1}));  // fine, long-pax
  EXPECT_EQ(index.shards[1].samples[0].key, "a");
  ASSERT_EQ(index.skipped.size(), 1u);
  EXPECT_EQ(index.skipped[0].key, "b");  // it may have had more members after it
  ASSERT_EQ(index.warnings.size(), 1u);
  EXPECT_TRUE(absl::StrContains(index.warnings[0], "Special header too large"))
      << index.warnings[0];
}

}  // namespace
}  // namespace shardcast

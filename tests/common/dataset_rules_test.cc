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

}  // namespace
}  // namespace shardcast

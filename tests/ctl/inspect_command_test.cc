// `shardcast-ctl inspect` as a real process on real shards: its JSON parses (checked by
// Python's json) and says what the library's index says; the table lists the same;
// errors exit non-zero with the reason.
#include <stdio.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/shards/dataset_index.h"
#include "gtest/gtest.h"
#include "tests/common/shard_test_util.h"
#include "tests/support/child_process.h"

namespace shardcast {
namespace {

using shard_testing::FileSpec;
using shard_testing::MakeTar;
using shard_testing::ScopedTempDir;
using shard_testing::TarWriter;

const std::string kCtl = std::string(SHARDCAST_BINARY_DIR) + "/client/shardcast-ctl";

using Result = testing_util::CommandOutput;

// Runs shardcast-ctl with `args`, capturing stdout (and stderr when `with_stderr`).
Result RunCtl(const std::string& args, bool with_stderr = false) {
  return testing_util::RunShellCapture(kCtl + " " + args +
                                       (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

class InspectCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kCtl)) << kCtl << " is not built (ninja shardcast-ctl)";
    data_ = tmp_ / "data";
    std::filesystem::create_directories(data_);
    // Class names with a quote, a backslash, a tab and UTF-8: the JSON must escape them.
    const std::vector<FileSpec> a = {
        {"k0.jpg", "J0"},      {"k0.json", R"({"label": 0, "class": "say \"hi\"\\\t"})"},
        {"k1.jpg", "J1"},      {"k1.json", R"({"label": 2, "class": "caf\u00e9"})"},
        {"nolabel.jpg", "JX"},
    };
    const std::vector<FileSpec> b = {{"dir/k2.png", "P2"}, {"dir/k2.cls", "2"}};
    MakeTar(tmp_.path(), a, TarWriter::kPythonPax, data_ + "/shard-10.tar");
    MakeTar(tmp_.path(), b, TarWriter::kGnuTarGnu, data_ + "/shard-9.tar.gz", true);
    shard_testing::WriteFile(data_ + "/info.json", R"({"dataset size": 5, "num_classes": 3})");
  }

  ScopedTempDir tmp_;
  std::string data_;
};

TEST_F(InspectCommandTest, JsonSaysWhatTheIndexSays) {
  const Result r = RunCtl("inspect --json --samples " + shard_testing::ShellQuote(data_));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string json_path = tmp_ / "out.json";
  shard_testing::WriteFile(json_path, r.out);
  // An independent JSON parser flattens what we need into lines.
  const std::string script =
      "import json,sys\n"
      "d = json.load(open(sys.argv[1], encoding='utf-8'))\n"
      "out = [d['fingerprint'], str(d['num_samples']), str(d['num_classes'])]\n"
      "out += ['shard %s %d %s' % (s['path'], s['samples'], s['compressed']) for s in "
      "d['shards']]\n"
      "out += ['class %d %r %d' % (c['label'], c['name'], c['samples']) for c in d['classes']]\n"
      "out += ['skip %s %s' % (s['shard'], s['key']) for s in d['skipped']]\n"
      "out += ['warn ' + w for w in d['warnings']]\n"
      "out += ['sample %d %d %s %d %s' % (s['shard'], s['index'], s['key'], s['label'], "
      "','.join(s['extensions'])) for s in d['samples']]\n"
      "open(sys.argv[2], 'w', encoding='utf-8').write('\\n'.join(out) + '\\n')\n";
  shard_testing::WriteFile(tmp_ / "check.py", script);
  ASSERT_EQ(shard_testing::RunShell(shard_testing::PythonBinary() + " " + tmp_ / "check.py" + " " +
                                    json_path + " " + tmp_ / "flat.txt"),
            0)
      << r.out;

  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data_, IndexOptions());
  ASSERT_TRUE(index.ok()) << index.status();
  std::string want = absl::StrCat(index->fingerprint, "\n3\n3\n");
  want += "shard shard-9.tar.gz 1 True\nshard shard-10.tar 2 False\n";
  want += "class 0 'say \"hi\"\\\\\\t' 1\nclass 1 '' 0\nclass 2 'caf\xc3\xa9' 2\n";
  want += "skip shard-10.tar nolabel\n";
  want += "warn info.json says \"dataset size\" 5 but the scan found 3 usable samples\n";
  want += "sample 0 0 dir/k2 2 png,cls\nsample 1 0 k0 0 jpg,json\nsample 1 1 k1 2 jpg,json\n";
  EXPECT_EQ(shard_testing::ReadWholeFile(tmp_ / "flat.txt"), want);
}

TEST_F(InspectCommandTest, TableListsShardsClassesSkipsAndSamples) {
  const std::string cache = tmp_ / "cache";
  Result r = RunCtl("inspect " + data_ + " --samples --cache-dir=" + cache);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "(scanned)")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "samples 3, classes 3, skipped 1")) << r.out;
  EXPECT_LT(r.out.find("shard-9.tar.gz"), r.out.find("shard-10.tar"));  // natural order
  EXPECT_TRUE(absl::StrContains(r.out, "nolabel: no label")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "dir/k2")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "png,cls")) << r.out;
  r = RunCtl("inspect " + data_ + " --cache-dir " + cache);
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.out, "(loaded from cache)")) << r.out;
}

TEST_F(InspectCommandTest, UnreadableShardsAreListedAsSkippedNotFatal) {
  shard_testing::WriteFile(data_ + "/zzz.tar", "");
  shard_testing::WriteFile(data_ + "/junk.tar", "not a tar at all");
  Result r = RunCtl("inspect " + data_, true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "samples 3, classes 3, skipped 1, skipped shards 2"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "skipped shards (2, not served):\n  junk.tar: ")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "  zzz.tar: empty file (0 bytes)\n")) << r.out;
  r = RunCtl("inspect --json " + data_);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(
      absl::StrContains(r.out, R"j({"path": "zzz.tar", "reason": "empty file (0 bytes)"})j"))
      << r.out;
}

TEST_F(InspectCommandTest, LabelFieldFlag) {
  shard_testing::WriteFile(data_ + "/info.json", "{}");
  std::filesystem::remove(data_ + "/shard-9.tar.gz");
  MakeTar(tmp_.path(), {{"x.jpg", "J"}, {"x.json", R"({"label": 0, "y": 4})"}},
          TarWriter::kGnuTarPax, data_ + "/shard-1.tar");
  const Result r = RunCtl("inspect --json --samples --label-field y " + data_);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, R"("key": "x", "label": 4)")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "has no field 'y'")) << r.out;  // k0, k1 skipped
}

// What a job may ask for: each member extension with the samples that hold it, and
// whether the samples have labels and images.
TEST_F(InspectCommandTest, ExtensionsAndWhetherSamplesHaveLabelsAndImages) {
  const std::string text = tmp_ / "text";
  std::filesystem::create_directories(text);
  MakeTar(tmp_.path(),
          {{"t0.txt", "a cat"},
           {"t0.json", R"({"url": "u0"})"},
           {"t1.txt", "a dog"},
           {"t2.txt", "a bird"},
           {"t2.seg.npy", "N"}},
          TarWriter::kPythonPax, text + "/text-0.tar");
  Result r = RunCtl("inspect " + text);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "samples 3, classes 0, skipped 0")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "labels       none (served with label -1)\n")) << r.out;
  EXPECT_TRUE(
      absl::StrContains(r.out, "images       none (served to jobs that ask for members only)\n"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out,
                                "  SAMPLES  EXTENSION\n"
                                "        1  json\n"
                                "        1  seg.npy\n"
                                "        3  txt\n"))
      << r.out;

  // The JSON, read back by Python's parser, for the text dataset and the image one.
  const std::string script =
      "import json,sys\n"
      "d = json.load(open(sys.argv[1], encoding='utf-8'))\n"
      "print(d['has_labels'], d['has_images'], d['num_classes'],\n"
      "      ' '.join('%s=%d' % (e['extension'], e['samples']) for e in d['extensions']))\n";
  shard_testing::WriteFile(tmp_ / "ext.py", script);
  const auto flat = [&](const std::string& dir) {
    const Result json = RunCtl("inspect --json --samples " + dir);
    EXPECT_EQ(json.exit_code, 0) << json.out;
    shard_testing::WriteFile(tmp_ / "ext.json", json.out);
    return testing_util::RunShellCapture(shard_testing::PythonBinary() + " " + tmp_ / "ext.py" +
                                         " " + tmp_ / "ext.json")
        .out;
  };
  EXPECT_EQ(flat(text), "False False 0 json=1 seg.npy=1 txt=3\n");
  EXPECT_EQ(flat(data_), "True True 3 cls=1 jpg=2 json=2 png=1\n");
  r = RunCtl("inspect " + data_);
  EXPECT_TRUE(absl::StrContains(r.out, "labels       yes (3 classes)\nimages       yes\n"))
      << r.out;
}

// --fields selects the samples as the server does for such a job: served, left out by
// reason, or the refusal the server would give; in the table and in the JSON.
TEST_F(InspectCommandTest, FieldsShowWhatAJobWouldBeServedAndWhatItLeavesOut) {
  const std::string text = tmp_ / "captions";
  std::filesystem::create_directories(text);
  MakeTar(tmp_.path(),
          {{"t0.txt", "a cat"},
           {"t0.json", R"({"url": "u0"})"},
           {"t1.txt", "a dog"},
           {"t2.json", R"({"url": "u2"})"},
           {"t3.txt", std::string(5000, 'x')}},
          TarWriter::kPythonPax, text + "/text-0.tar");
  Result r = RunCtl("inspect " + text + " --fields txt,json? --no-image --max-member-bytes 4096");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out,
                                "job          fields txt,json?, no image\n"
                                "             serves 2 samples, leaves out 2 reason(s)\n"
                                "        1  member 'txt' over --max-member-bytes (4096 bytes)\n"
                                "        1  missing required field 'txt'\n"))
      << r.out;

  r = RunCtl("inspect --json " + text + " --fields npy --no-image");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, R"("job": {"fields": ["npy"], "image": false, "refused": )"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "npy")) << r.out;

  // An image job on a dataset without images is refused as the server refuses it.
  r = RunCtl("inspect " + text + " --fields txt");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "refused: ")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "image")) << r.out;

  r = RunCtl("inspect " + text + " --no-image", true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "--no-image needs --fields")) << r.out;
  r = RunCtl("inspect " + text + " --fields a..b --no-image", true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "empty component")) << r.out;
}

// Runs shardcast-ctl with `args` and $TMPDIR set to `tmpdir`, capturing stdout.
Result RunCtlWithTmpdir(const std::string& tmpdir, const std::string& args) {
  return testing_util::RunShellCapture("TMPDIR=" + shard_testing::ShellQuote(tmpdir) + " " + kCtl +
                                       " " + args + " 2>/dev/null");
}

std::vector<std::string> EntriesOf(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Without --cache-dir the samples stay on disk in a temporary index cache under $TMPDIR,
// removed afterwards; a $TMPDIR inside the dataset is not used (the index is then built
// in memory): the same report either way.
TEST_F(InspectCommandTest, TheSamplesStayInATemporaryCacheThatIsRemoved) {
  const std::string scratch = tmp_ / "scratch";
  std::filesystem::create_directories(scratch);
  const std::string args = "inspect --json --samples " + shard_testing::ShellQuote(data_);
  const Result with_cache = RunCtl(args + " --cache-dir " + tmp_ / "cache");
  ASSERT_EQ(with_cache.exit_code, 0) << with_cache.out;
  const Result scratched = RunCtlWithTmpdir(scratch, args);
  ASSERT_EQ(scratched.exit_code, 0) << scratched.out;
  EXPECT_TRUE(EntriesOf(scratch).empty()) << "the temporary cache was left behind";
  const std::vector<std::string> data_before = EntriesOf(data_);
  const Result inside = RunCtlWithTmpdir(data_, args);
  ASSERT_EQ(inside.exit_code, 0) << inside.out;
  EXPECT_EQ(EntriesOf(data_), data_before) << "nothing is written inside the dataset";
  // Only "loaded_from_cache" may differ (the first run wrote the cache it then had).
  EXPECT_EQ(scratched.out, inside.out);
  EXPECT_TRUE(absl::StrContains(with_cache.out, "\"samples\": [\n    {\"shard\": 0"))
      << with_cache.out;
  EXPECT_EQ(absl::StrReplaceAll(with_cache.out, {{"\"loaded_from_cache\": true", "x"},
                                                 {"\"loaded_from_cache\": false", "x"}}),
            absl::StrReplaceAll(scratched.out, {{"\"loaded_from_cache\": false", "x"}}));
}

// `shardcast-ctl index DIR -o FILE` writes the index file of the shards (the library's
// bytes), its samples in a temporary index cache that is removed afterwards.
TEST_F(InspectCommandTest, IndexWritesTheIndexFileOfTheShards) {
  const std::string scratch = tmp_ / "scratch";
  std::filesystem::create_directories(scratch);
  const std::string out = tmp_ / "index.bin";
  const Result r = RunCtlWithTmpdir(scratch, "index " + shard_testing::ShellQuote(data_) + " -o " +
                                                 shard_testing::ShellQuote(out));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "2 shards, 3 samples")) << r.out;
  EXPECT_TRUE(EntriesOf(scratch).empty()) << "the temporary cache was left behind";
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data_, {});
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_TRUE(shard_testing::ReadWholeFile(out) == SerializeIndexFile(*index, {}).value())
      << "the file differs from the library's index file";
}

// A $TMPDIR that cannot hold the temporary cache (missing, a file) fails with the reason
// and the path, exit 1; an empty one means /tmp.
TEST_F(InspectCommandTest, AnUnusableTmpdirIsAClearError) {
  shard_testing::WriteFile(tmp_ / "a-file", "x");
  for (const std::string& tmpdir : {tmp_ / "missing", tmp_ / "a-file"}) {
    const std::string data = shard_testing::ShellQuote(data_);
    for (const std::string& command : {"inspect " + data, "index " + data + " -o " + tmp_ / "o"}) {
      const Result r = testing_util::RunShellCapture("TMPDIR=" + shard_testing::ShellQuote(tmpdir) +
                                                     " " + kCtl + " " + command + " 2>&1");
      EXPECT_EQ(r.exit_code, 1) << command << tmpdir << ": " << r.out;
      EXPECT_TRUE(absl::StrContains(r.out, "cannot make a temporary index cache")) << r.out;
      EXPECT_TRUE(absl::StrContains(r.out, tmpdir)) << r.out;
    }
  }
  const Result r = RunCtlWithTmpdir("", "inspect " + shard_testing::ShellQuote(data_));
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

TEST_F(InspectCommandTest, ErrorsExitNonZeroWithTheReason) {
  Result r = RunCtl("inspect " + tmp_ / "missing", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.out, "missing")) << r.out;
  r = RunCtl("inspect " + tmp_.path(), true);  // no shard directly in it
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.out, "no shard")) << r.out;
  r = RunCtl("inspect " + data_ + " --cache-dir " + data_ + "/cache", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.out, "inside the dataset")) << r.out;
  r = RunCtl("inspect", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.out, "missing DIR")) << r.out;
  r = RunCtl("inspect " + data_ + " --bogus", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.out, "--bogus")) << r.out;
  r = RunCtl("inspect " + data_ + " --threads x", true);
  EXPECT_EQ(r.exit_code, 2);
  r = RunCtl("inspect --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.out, "usage: shardcast-ctl inspect")) << r.out;
}

}  // namespace
}  // namespace shardcast

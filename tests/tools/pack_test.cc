// Tests of shardcast-pack (tools/pack): shard layout checked by an independent
// ustar parser, Python's tarfile and GNU tar; determinism; rotation; decoding
// of the written images; ImageFolder packing of a real tree; the CLI.
#include <png.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/shards/dataset_index.h"
#include "common/util/json_fields.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/child_process.h"
#include "tests/support/help_check.h"
#include "tests/support/temp_dir.h"
#include "tools/pack/image_encode.h"
#include "tools/pack/image_folder.h"
#include "tools/pack/synthetic_dataset.h"
#include "tools/pack/tar_writer.h"

namespace shardcast::pack {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// ---------------------------------------------------------------- helpers

using testing_util::ReadWholeFile;
using testing_util::TempDir;

void WriteFile(const std::string& path, const std::string& data) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out << data;
}

// Runs a shell command; returns (exit status, stdout).
std::pair<int, std::string> RunShell(const std::string& cmd) {
  testing_util::CommandOutput result = testing_util::RunShellCapture(cmd);
  return {result.exit_code, std::move(result.out)};
}

// Runs a Python snippet with the reference interpreter (any python3 has tarfile).
std::pair<int, std::string> RunPython(const TempDir& dir, const std::string& code,
                                      const std::string& args) {
  const std::string script = dir / "check.py";
  WriteFile(script, code);
  return RunShell(absl::StrCat(REFERENCE_PYTHON, " ", script, " ", args, " 2>&1"));
}

struct RawMember {
  char type;
  std::string name;
  std::string data;
  std::string header;  // the 512 raw bytes
};

uint64_t Octal(const char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n && p[i] >= '0' && p[i] <= '7'; ++i) v = v * 8 + (p[i] - '0');
  return v;
}

// A minimal ustar/PAX reader, independent of libarchive: every header block as
// written (PAX 'x' headers included), and the end marker checked.
std::vector<RawMember> ParseTar(const std::string& tar) {
  std::vector<RawMember> out;
  size_t pos = 0;
  while (pos + 512 <= tar.size()) {
    const char* h = tar.data() + pos;
    if (std::all_of(h, h + 512, [](char c) { return c == 0; })) break;
    RawMember m;
    m.header.assign(h, 512);
    m.type = h[156];
    std::string name(h, strnlen(h, 100));
    std::string prefix(h + 345, strnlen(h + 345, 155));
    m.name = prefix.empty() ? name : prefix + "/" + name;
    EXPECT_EQ(std::string(h + 257, 6), std::string("ustar\0", 6)) << m.name;
    const uint64_t size = Octal(h + 124, 12);
    EXPECT_LE(pos + 512 + size, tar.size()) << m.name;
    m.data = tar.substr(pos + 512, size);
    pos += 512 + (size + 511) / 512 * 512;
    out.push_back(std::move(m));
  }
  // Exactly two zero blocks end the archive: no trailing padding.
  EXPECT_EQ(tar.size(), pos + 1024);
  EXPECT_TRUE(std::all_of(tar.begin() + std::min(pos, tar.size()), tar.end(),
                          [](char c) { return c == 0; }));
  return out;
}

// Regular members (PAX headers applied: the 'path' record replaces the name).
std::vector<std::pair<std::string, std::string>> Members(const std::string& tar_path) {
  std::vector<std::pair<std::string, std::string>> out;
  std::string pax_path;
  for (RawMember& m : ParseTar(ReadWholeFile(tar_path))) {
    if (m.type == 'x') {
      for (absl::string_view rec : absl::StrSplit(m.data, '\n', absl::SkipEmpty())) {
        const size_t sp = rec.find(' ');
        absl::string_view kv = rec.substr(sp + 1);
        if (kv.substr(0, 5) == "path=") pax_path = std::string(kv.substr(5));
      }
      continue;
    }
    EXPECT_EQ(m.type, '0') << m.name;
    out.emplace_back(pax_path.empty() ? m.name : pax_path, std::move(m.data));
    pax_path.clear();
  }
  return out;
}

std::vector<std::string> SortedShards(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".tar") v.push_back(e.path().string());
  }
  std::sort(v.begin(), v.end());
  return v;
}

// Every file of a dataset dir, name -> bytes.
std::map<std::string, std::string> DirContents(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::directory_iterator(dir)) {
    m[e.path().filename().string()] = ReadWholeFile(e.path().string());
  }
  return m;
}

struct Decoded {
  int width = 0, height = 0, subsamp = -1;
  std::vector<uint8_t> rgb;
};

Decoded DecodeJpeg(const std::string& jpg) {
  Decoded d;
  tjhandle tj = tjInitDecompress();
  int colorspace = 0;
  const auto* src = reinterpret_cast<const unsigned char*>(jpg.data());
  if (tjDecompressHeader3(tj, src, jpg.size(), &d.width, &d.height, &d.subsamp, &colorspace) == 0) {
    d.rgb.resize(static_cast<size_t>(d.width) * d.height * 3);
    if (tjDecompress2(tj, src, jpg.size(), d.rgb.data(), d.width, 0, d.height, TJPF_RGB, 0) != 0) {
      d.rgb.clear();
    }
  }
  tjDestroy(tj);
  return d;
}

SyntheticOptions SmallSynthetic() {
  SyntheticOptions o;
  o.num_samples = 25;
  o.num_classes = 4;
  o.width = 32;
  o.height = 24;
  o.per_shard = 10;
  o.seed = 7;
  o.threads = 3;
  return o;
}

std::string ExpectedJson(int label, int64_t count) {
  return absl::StrCat("{\"label\": ", label, ", \"class\": \"", SyntheticClassName(label),
                      "\", \"count\": ", count, "}");
}

// ---------------------------------------------------------------- synthetic

TEST(SyntheticDatasetTest, LayoutNamesJsonClsAndInfo) {
  TempDir dir;
  const SyntheticOptions o = SmallSynthetic();
  absl::StatusOr<PackSummary> sum = WriteSyntheticDataset(dir / "out", o);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->samples, 25);
  EXPECT_EQ(sum->num_classes, 4);
  EXPECT_THAT(sum->shard_samples, ElementsAre(10, 10, 5));
  ASSERT_EQ(SortedShards(dir / "out"),
            (std::vector<std::string>{dir / "out/shard-000000.tar", dir / "out/shard-000001.tar",
                                      dir / "out/shard-000002.tar"}));
  EXPECT_EQ(sum->shards, SortedShards(dir / "out"));

  const std::vector<int> labels = SyntheticLabels(25, 4, 7);
  int64_t global = 0, bytes = 0;
  for (const std::string& shard : sum->shards) {
    bytes += static_cast<int64_t>(fs::file_size(shard));
    const auto members = Members(shard);
    ASSERT_EQ(members.size() % 3, 0u);
    for (size_t m = 0; m < members.size(); m += 3, ++global) {
      const std::string key = absl::StrFormat("%08d", global);
      const int label = labels[global];
      EXPECT_EQ(members[m].first, key + ".jpg");
      EXPECT_EQ(members[m + 1].first, key + ".json");
      EXPECT_EQ(members[m + 2].first, key + ".cls");
      EXPECT_EQ(members[m + 1].second, ExpectedJson(label, static_cast<int64_t>(m / 3)));
      EXPECT_EQ(members[m + 2].second, absl::StrCat(label));
      const Decoded d = DecodeJpeg(members[m].second);
      EXPECT_EQ(d.width, 32);
      EXPECT_EQ(d.height, 24);
      EXPECT_EQ(d.subsamp, TJSAMP_420);
    }
  }
  EXPECT_EQ(global, 25);
  EXPECT_EQ(sum->bytes, bytes);

  EXPECT_EQ(ReadWholeFile(dir / "out/info.json"),
            "{\n  \"dataset size\": 25,\n  \"num_classes\": 4,\n"
            "  \"class names\": [\"class_000\", \"class_001\", \"class_002\", \"class_003\"],\n"
            "  \"shards\": [\"shard-000000.tar\", \"shard-000001.tar\", \"shard-000002.tar\"],\n"
            "  \"shard samples\": [10, 10, 5]\n}\n");
}

// Python's tarfile (what webdataset uses) reads the shards, and every member
// has the fixed metadata that makes shards reproducible.
TEST(SyntheticDatasetTest, PythonTarfileReadsShards) {
  TempDir dir;
  ASSERT_TRUE(WriteSyntheticDataset(dir / "out", SmallSynthetic()).ok());
  const auto [rc, out] = RunPython(dir, R"(
import glob, json, re, sys, tarfile
d = sys.argv[1]
info = json.load(open(d + "/info.json"))
print("info", info["dataset size"], info["num_classes"])
# webdataset's tariterators: key/ext split and grouping by consecutive keys.
samples = []
for path in sorted(glob.glob(d + "/shard-*.tar")):
    with tarfile.open(path) as t:
        current = None
        for m in t.getmembers():
            key, ext = re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$", m.name).groups()
            if current is None or current["__key__"] != key:
                current = {"__key__": key}
                samples.append(current)
            assert ext not in current, m.name
            current[ext] = t.extractfile(m).read()
assert len(samples) == info["dataset size"], len(samples)
for s in samples:
    assert set(s) == {"__key__", "jpg", "json", "cls"}, s["__key__"]
    assert json.loads(s["json"])["label"] == int(s["cls"]), s["__key__"]
for path in sorted(glob.glob(d + "/shard-*.tar")):
    with tarfile.open(path) as t:
        for m in t.getmembers():
            assert m.isreg() and m.mtime == 0 and m.uid == 0 and m.gid == 0, m.name
            assert m.mode == 0o644 and m.uname == "" and m.gname == "", m.name
            data = t.extractfile(m).read()
            if m.name.endswith(".json"):
                j = json.loads(data)
                print(m.name, j["label"], j["class"], j["count"])
            else:
                print(m.name, len(data))
)",
                                   dir / "out");
  ASSERT_EQ(rc, 0) << out;
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u + 25 * 3) << out;
  EXPECT_EQ(lines[0], "info 25 4");
  const std::vector<int> labels = SyntheticLabels(25, 4, 7);
  for (int i = 0; i < 25; ++i) {
    const std::string key = absl::StrFormat("%08d", i);
    EXPECT_THAT(lines[1 + 3 * i], ::testing::StartsWith(key + ".jpg "));
    EXPECT_EQ(lines[2 + 3 * i], absl::StrCat(key, ".json ", labels[i], " ",
                                             SyntheticClassName(labels[i]), " ", i % 10));
    EXPECT_EQ(lines[3 + 3 * i], key + ".cls 1");
  }
}

TEST(SyntheticDatasetTest, GnuTarListsMembers) {
  if (!fs::exists("/usr/bin/tar") && !fs::exists("/bin/tar")) GTEST_SKIP() << "no tar";
  TempDir dir;
  ASSERT_TRUE(WriteSyntheticDataset(dir / "out", SmallSynthetic()).ok());
  const auto [rc, out] = RunShell("tar -tf " + dir / "out/shard-000002.tar 2>&1");
  ASSERT_EQ(rc, 0) << out;
  std::vector<std::string> names;
  for (int i = 20; i < 25; ++i) {
    for (const char* ext : {"jpg", "json", "cls"}) {
      names.push_back(absl::StrFormat("%08d.%s", i, ext));
    }
  }
  EXPECT_EQ(out, absl::StrCat(absl::StrJoin(names, "\n"), "\n"));
}

TEST(SyntheticDatasetTest, LabelsBalancedAndInterleaved) {
  const std::vector<int> labels = SyntheticLabels(1003, 10, 0);
  ASSERT_EQ(labels.size(), 1003u);
  std::vector<int> counts(10, 0);
  int changes = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    ASSERT_GE(labels[i], 0);
    ASSERT_LT(labels[i], 10);
    ++counts[labels[i]];
    if (i > 0 && labels[i] != labels[i - 1]) ++changes;
  }
  for (int c : counts) EXPECT_TRUE(c == 100 || c == 101) << c;
  EXPECT_GT(changes, 800);  // blocks of one class would give 9
  // Every 100-sample window (a shard) sees every class.
  for (size_t start = 0; start + 100 <= labels.size(); start += 100) {
    std::set<int> seen(labels.begin() + start, labels.begin() + start + 100);
    EXPECT_EQ(seen.size(), 10u) << start;
  }
  EXPECT_EQ(SyntheticLabels(1003, 10, 0), labels);
  EXPECT_NE(SyntheticLabels(1003, 10, 1), labels);
}

TEST(SyntheticDatasetTest, DeterministicAcrossThreadCountsAndRuns) {
  TempDir dir;
  SyntheticOptions o = SmallSynthetic();
  o.threads = 1;
  ASSERT_TRUE(WriteSyntheticDataset(dir / "a", o).ok());
  o.threads = 5;
  ASSERT_TRUE(WriteSyntheticDataset(dir / "b", o).ok());
  ASSERT_TRUE(WriteSyntheticDataset(dir / "c", o).ok());
  const auto a = DirContents(dir / "a");
  EXPECT_EQ(a.size(), 4u);  // 3 shards + info.json, no leftovers (.tmp)
  EXPECT_EQ(a, DirContents(dir / "b"));
  EXPECT_EQ(a, DirContents(dir / "c"));
  o.seed = 8;
  ASSERT_TRUE(WriteSyntheticDataset(dir / "d", o).ok());
  EXPECT_NE(a.at("shard-000000.tar"), DirContents(dir / "d").at("shard-000000.tar"));
}

TEST(SyntheticDatasetTest, RerunReplacesOldShards) {
  TempDir dir;
  SyntheticOptions o = SmallSynthetic();
  o.per_shard = 2;  // 13 shards
  ASSERT_TRUE(WriteSyntheticDataset(dir / "out", o).ok());
  WriteFile(dir / "out/README", "keep me");
  EXPECT_EQ(SortedShards(dir / "out").size(), 13u);
  o.per_shard = 10;
  ASSERT_TRUE(WriteSyntheticDataset(dir / "out", o).ok());
  EXPECT_EQ(SortedShards(dir / "out").size(), 3u);
  EXPECT_EQ(ReadWholeFile(dir / "out/README"), "keep me");
}

TEST(SyntheticDatasetTest, RotationByBytesKeepsShardsUnderLimit) {
  TempDir dir;
  SyntheticOptions o = SmallSynthetic();
  o.num_samples = 40;
  o.per_shard = 0;
  o.max_shard_bytes = 12 * 1024;
  absl::StatusOr<PackSummary> sum = WriteSyntheticDataset(dir / "out", o);
  ASSERT_TRUE(sum.ok()) << sum.status();
  ASSERT_GT(sum->shards.size(), 2u);
  int64_t total = 0, next_key = 0;
  for (size_t s = 0; s < sum->shards.size(); ++s) {
    const std::string& shard = sum->shards[s];
    const int64_t size = static_cast<int64_t>(fs::file_size(shard));
    EXPECT_LE(size, o.max_shard_bytes) << shard;
    const auto members = Members(shard);
    ASSERT_EQ(static_cast<int64_t>(members.size()), 3 * sum->shard_samples[s]);
    // Each shard is full: the next sample would not have fit.
    int64_t expected = TarWriter::kEndBytes;
    for (const auto& [name, data] : members) {
      expected += TarWriter::MemberBytes(name, static_cast<int64_t>(data.size()));
      EXPECT_EQ(name.substr(0, 8), absl::StrFormat("%08d", next_key + 0)) << name;
      if (name.size() > 4 && name.substr(name.size() - 4) == ".cls") ++next_key;
    }
    EXPECT_EQ(size, expected) << "MemberBytes must be exact for short names";
    total += sum->shard_samples[s];
  }
  EXPECT_EQ(total, 40);
}

TEST(SyntheticDatasetTest, RotationByCountAndBytesTogether) {
  TempDir dir;
  SyntheticOptions o = SmallSynthetic();
  o.num_samples = 30;
  o.per_shard = 4;
  o.max_shard_bytes = 1 << 20;  // never reached: count decides
  absl::StatusOr<PackSummary> sum = WriteSyntheticDataset(dir / "out", o);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_THAT(sum->shard_samples, ElementsAre(4, 4, 4, 4, 4, 4, 4, 2));
  o.max_shard_bytes = 1;  // every sample is over the limit: one per shard
  sum = WriteSyntheticDataset(dir / "out", o);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->shards.size(), 30u);
  EXPECT_EQ(SortedShards(dir / "out").size(), 30u);
}

// The images carry their class: decoded pixels stay close to the rendering,
// and nearest-class-mean on the mean colour alone already classifies them,
// so a CNN has an easy signal.
TEST(SyntheticDatasetTest, ImagesDecodeAndCarryTheClass) {
  TempDir dir;
  SyntheticOptions o;
  o.num_samples = 200;
  o.num_classes = 10;
  o.per_shard = 0;
  o.seed = 3;
  absl::StatusOr<PackSummary> sum = WriteSyntheticDataset(dir / "out", o);
  ASSERT_TRUE(sum.ok()) << sum.status();
  ASSERT_EQ(sum->shards.size(), 1u);
  const auto members = Members(sum->shards[0]);
  ASSERT_EQ(members.size(), 600u);
  const std::vector<int> labels = SyntheticLabels(200, 10, 3);
  std::vector<std::array<double, 3>> means;
  double diff_sum = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string& jpg = members[3 * i].second;
    ASSERT_GE(jpg.size(), 2u);
    EXPECT_EQ(static_cast<unsigned char>(jpg[0]), 0xFF);
    EXPECT_EQ(static_cast<unsigned char>(jpg[1]), 0xD8);
    const Decoded d = DecodeJpeg(jpg);
    ASSERT_EQ(d.rgb.size(), 64u * 64 * 3);
    const std::vector<uint8_t> want = RenderSyntheticImage(o, i, labels[i]);
    std::array<double, 3> mean{};
    for (size_t p = 0; p < want.size(); ++p) {
      diff_sum += std::abs(int{d.rgb[p]} - int{want[p]});
      mean[p % 3] += d.rgb[p];
    }
    for (double& m : mean) m /= 64 * 64;
    means.push_back(mean);
  }
  EXPECT_LT(diff_sum / (200.0 * 64 * 64 * 3), 8.0);
  // Class means from the first half, accuracy on the second.
  std::vector<std::array<double, 3>> centroid(10, {0, 0, 0});
  std::vector<int> n(10, 0);
  for (int i = 0; i < 100; ++i) {
    for (int c = 0; c < 3; ++c) centroid[labels[i]][c] += means[i][c];
    ++n[labels[i]];
  }
  for (int k = 0; k < 10; ++k) {
    ASSERT_GT(n[k], 0);
    for (double& v : centroid[k]) v /= n[k];
  }
  int correct = 0;
  for (int i = 100; i < 200; ++i) {
    int best = 0;
    double best_d = 1e18;
    for (int k = 0; k < 10; ++k) {
      double dist = 0;
      for (int c = 0; c < 3; ++c) dist += std::pow(means[i][c] - centroid[k][c], 2);
      if (dist < best_d) best_d = dist, best = k;
    }
    correct += best == labels[i];
  }
  EXPECT_GE(correct, 80) << "chance is 10";
}

// The hue of an RGB colour in twelfths of the colour wheel from red, rounded.
int HueTwelfth(const std::array<double, 3>& rgb) {
  const double r = rgb[0], g = rgb[1], b = rgb[2];
  const double hi = std::max({r, g, b}), lo = std::min({r, g, b});
  if (hi - lo < 1e-9) return 0;
  double h = hi == r   ? (g - b) / (hi - lo)
             : hi == g ? 2 + (b - r) / (hi - lo)
                       : 4 + (r - g) / (hi - lo);
  h = std::fmod(h / 6 + 1, 1.0);
  return static_cast<int>(std::lround(h * 12)) % 12;
}

// --captions writes KEY.txt after the image and the caption in KEY.json; the
// caption names the colour the decoded pixels have, carries Chinese and emoji in
// some samples, and the images are the same bytes as without captions.
TEST(SyntheticDatasetTest, CaptionsDescribeTheImage) {
  TempDir dir;
  SyntheticOptions o = SmallSynthetic();
  o.num_classes = 6;
  ASSERT_TRUE(WriteSyntheticDataset(dir / "plain", o).ok());
  o.captions = true;
  absl::StatusOr<PackSummary> sum = WriteSyntheticDataset(dir / "out", o);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->num_classes, 6);
  const std::vector<int> labels = SyntheticLabels(25, 6, 7);
  static const char* const kColours[12] = {"red",  "orange", "yellow", "lime",   "green",   "mint",
                                           "cyan", "azure",  "blue",   "violet", "magenta", "rose"};
  int64_t global = 0, with_chinese = 0, with_emoji = 0;
  for (size_t s = 0; s < sum->shards.size(); ++s) {
    const auto members = Members(sum->shards[s]);
    const auto plain = Members(SortedShards(dir / "plain")[s]);
    ASSERT_EQ(members.size() % 4, 0u);
    for (size_t m = 0; m < members.size(); m += 4, ++global) {
      const std::string key = absl::StrFormat("%08d", global);
      const int label = labels[global];
      ASSERT_EQ(members[m].first, key + ".jpg");
      EXPECT_EQ(members[m].second, plain[m / 4 * 3].second) << "captions change no pixel";
      ASSERT_EQ(members[m + 1].first, key + ".txt");
      ASSERT_EQ(members[m + 2].first, key + ".json");
      ASSERT_EQ(members[m + 3].first, key + ".cls");
      const std::string& caption = members[m + 1].second;
      EXPECT_EQ(caption, SyntheticCaption(o, global, label));
      EXPECT_THAT(caption, HasSubstr("stripes at "));
      absl::StatusOr<std::map<std::string, JsonValue>> json =
          ParseJsonObjectFields(members[m + 2].second);
      ASSERT_TRUE(json.ok()) << json.status() << members[m + 2].second;
      EXPECT_EQ((*json)["caption"].string, caption);
      EXPECT_EQ((*json)["label"].integer, label);
      EXPECT_EQ((*json)["count"].integer, static_cast<int64_t>(m / 4));
      EXPECT_EQ((*json)["width"].integer, 32);
      EXPECT_EQ((*json)["height"].integer, 24);
      EXPECT_EQ(members[m + 3].second, absl::StrCat(label));

      // The caption's colour is the image's: the hue of the decoded mean colour is
      // the named twelfth of the wheel or a neighbour (jitter, noise, JPEG).
      const Decoded d = DecodeJpeg(members[m].second);
      ASSERT_EQ(d.rgb.size(), 32u * 24 * 3);
      std::array<double, 3> mean{};
      for (size_t p = 0; p < d.rgb.size(); ++p) mean[p % 3] += d.rgb[p];
      const int hue = HueTwelfth(mean);
      bool named = false;
      for (int near : {hue, (hue + 1) % 12, (hue + 11) % 12}) {
        named |= absl::StrContains(caption, absl::StrCat(" ", kColours[near], " picture"));
      }
      EXPECT_TRUE(named) << caption << " (hue twelfth " << hue << ")";
      with_chinese += absl::StrContains(caption, "条纹");
      with_emoji += absl::StrContains(caption, "✨");
    }
  }
  EXPECT_EQ(global, 25);
  EXPECT_EQ(with_chinese, 6);  // index % 4 == 1
  EXPECT_EQ(with_emoji, 6);    // index % 4 == 3
}

// --no-labels (with captions: img2dataset's layout) writes jpg + txt + json, no
// label anywhere, and info.json says there are no classes.
TEST(SyntheticDatasetTest, NoLabelsLeavesOutClsAndLabel) {
  TempDir dir;
  SyntheticOptions o = SmallSynthetic();
  o.captions = true;
  o.labels = false;
  absl::StatusOr<PackSummary> sum = WriteSyntheticDataset(dir / "out", o);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->num_classes, 0);
  const std::vector<int> labels = SyntheticLabels(25, 4, 7);
  int64_t global = 0;
  for (const std::string& shard : sum->shards) {
    const auto members = Members(shard);
    ASSERT_EQ(members.size() % 3, 0u);
    for (size_t m = 0; m < members.size(); m += 3, ++global) {
      const std::string key = absl::StrFormat("%08d", global);
      EXPECT_EQ(members[m].first, key + ".jpg");
      EXPECT_EQ(members[m + 1].first, key + ".txt");
      EXPECT_EQ(members[m + 1].second, SyntheticCaption(o, global, labels[global]));
      EXPECT_EQ(members[m + 2].first, key + ".json");
      EXPECT_EQ(members[m + 2].second,
                absl::StrCat("{\"caption\": ", JsonQuote(members[m + 1].second),
                             ", \"width\": 32, \"height\": 24}"));
    }
  }
  EXPECT_EQ(global, 25);
  EXPECT_EQ(ReadWholeFile(dir / "out/info.json"),
            "{\n  \"dataset size\": 25,\n  \"num_classes\": 0,\n"
            "  \"shards\": [\"shard-000000.tar\", \"shard-000001.tar\", \"shard-000002.tar\"],\n"
            "  \"shard samples\": [10, 10, 5]\n}\n");

  o.captions = false;  // unlabelled images alone
  sum = WriteSyntheticDataset(dir / "bare", o);
  ASSERT_TRUE(sum.ok()) << sum.status();
  const auto members = Members(sum->shards[0]);
  ASSERT_EQ(members.size(), 20u);
  EXPECT_EQ(members[1].first, "00000000.json");
  EXPECT_EQ(members[1].second, "{\"width\": 32, \"height\": 24}");
}

TEST(SyntheticDatasetTest, PhotoSizedImages) {
  TempDir dir;
  SyntheticOptions o;
  o.num_samples = 3;
  o.width = 500;
  o.height = 375;
  o.quality = 85;
  absl::StatusOr<PackSummary> sum = WriteSyntheticDataset(dir / "out", o);
  ASSERT_TRUE(sum.ok()) << sum.status();
  for (const auto& [name, data] : Members(sum->shards[0])) {
    if (name.size() < 4 || name.substr(name.size() - 4) != ".jpg") continue;
    const Decoded d = DecodeJpeg(data);
    EXPECT_EQ(d.width, 500);
    EXPECT_EQ(d.height, 375);
    EXPECT_GT(data.size(), 10000u) << "photo-sized JPEGs should be tens of KB";
  }
}

TEST(SyntheticDatasetTest, RejectsBadOptions) {
  TempDir dir;
  SyntheticOptions o = SmallSynthetic();
  o.num_samples = 0;
  EXPECT_EQ(WriteSyntheticDataset(dir / "x", o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = SmallSynthetic();
  o.num_classes = 0;
  EXPECT_EQ(WriteSyntheticDataset(dir / "x", o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = SmallSynthetic();
  o.quality = 101;
  EXPECT_THAT(WriteSyntheticDataset(dir / "x", o).status().message(), HasSubstr("quality"));
  o = SmallSynthetic();
  o.per_shard = -1;
  EXPECT_EQ(WriteSyntheticDataset(dir / "x", o).status().code(),
            absl::StatusCode::kInvalidArgument);
  WriteFile(dir / "file", "not a dir");
  EXPECT_FALSE(WriteSyntheticDataset(dir / "file", SmallSynthetic()).ok());
}

// The server's own index sees exactly what was packed: every sample, its
// label, and member offsets that point at the written bytes.
TEST(SyntheticDatasetTest, DatasetIndexReadsPackedShards) {
  TempDir dir;
  SyntheticOptions o = SmallSynthetic();
  o.max_shard_bytes = 16 * 1024;  // rotation by both limits
  absl::StatusOr<PackSummary> sum = WriteSyntheticDataset(dir / "out", o);
  ASSERT_TRUE(sum.ok()) << sum.status();
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(dir / "out", IndexOptions{});
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->num_samples, 25);
  EXPECT_EQ(index->num_classes, 4);
  EXPECT_TRUE(index->skipped.empty());
  EXPECT_TRUE(index->warnings.empty()) << absl::StrJoin(index->warnings, "\n");
  ASSERT_EQ(index->shards.size(), sum->shards.size());
  const std::vector<int> labels = SyntheticLabels(25, 4, 7);
  int64_t i = 0;
  for (size_t s = 0; s < index->shards.size(); ++s) {
    const std::string tar = ReadWholeFile(sum->shards[s]);
    const auto members = Members(sum->shards[s]);
    ASSERT_EQ(index->shards[s].samples.size(), members.size() / 3);
    for (size_t k = 0; k < index->shards[s].samples.size(); ++k, ++i) {
      const SampleEntry& e = index->shards[s].samples[k];
      EXPECT_EQ(e.key, absl::StrFormat("%08d", i));
      EXPECT_EQ(e.label, labels[i]);
      ASSERT_LT(e.image_member, e.members.size());
      const MemberRef& img = e.members[e.image_member];
      EXPECT_EQ(img.ext, "jpg");
      EXPECT_EQ(tar.substr(img.offset, img.size), members[3 * k].second);
    }
  }
  EXPECT_EQ(i, 25);
}

// ---------------------------------------------------------------- encoders

TEST(ImageEncodeTest, JpegKindsAndPng) {
  SyntheticOptions o;
  o.width = 40;
  o.height = 30;
  const std::vector<uint8_t> rgb = RenderSyntheticImage(o, 0, 1);
  struct Case {
    ChromaSubsampling sub;
    int tj;
  };
  for (const Case c :
       {Case{ChromaSubsampling::k444, TJSAMP_444}, Case{ChromaSubsampling::k422, TJSAMP_422},
        Case{ChromaSubsampling::k420, TJSAMP_420}, Case{ChromaSubsampling::kGray, TJSAMP_GRAY}}) {
    for (bool progressive : {false, true}) {
      absl::StatusOr<std::string> jpg = EncodeJpeg(rgb.data(), 40, 30, {80, c.sub, progressive});
      ASSERT_TRUE(jpg.ok()) << jpg.status();
      const Decoded d = DecodeJpeg(*jpg);
      EXPECT_EQ(d.width, 40);
      EXPECT_EQ(d.height, 30);
      EXPECT_EQ(d.subsamp, c.tj);
      // SOF2 marks a progressive JPEG, SOF0 a baseline one.
      EXPECT_EQ(jpg->find("\xFF\xC2") != std::string::npos, progressive);
    }
  }
  EXPECT_FALSE(EncodeJpeg(rgb.data(), 0, 30).ok());
  EXPECT_FALSE(EncodeJpeg(rgb.data(), 40, 30, {0}).ok());

  absl::StatusOr<std::string> png = EncodePng(rgb.data(), 40, 30);
  ASSERT_TRUE(png.ok()) << png.status();
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  ASSERT_TRUE(png_image_begin_read_from_memory(&image, png->data(), png->size()));
  image.format = PNG_FORMAT_RGB;
  std::vector<uint8_t> back(PNG_IMAGE_SIZE(image));
  ASSERT_TRUE(png_image_finish_read(&image, nullptr, back.data(), 0, nullptr));
  EXPECT_EQ(image.width, 40u);
  EXPECT_EQ(image.height, 30u);
  EXPECT_EQ(back, rgb);  // lossless
}

// ---------------------------------------------------------------- tar writer

TEST(TarWriterTest, LongNamesDeterministicAndReadable) {
  TempDir dir;
  const std::string long_name = std::string(150, 'a') + "/b" + std::string(120, 'c') + ".jpg";
  const std::string mid_name = "a " + std::string(99, 'n') + ".txt";  // 106 bytes, a space
  for (const char* name : {"one.tar", "two.tar"}) {
    absl::StatusOr<std::unique_ptr<TarWriter>> w = TarWriter::Open(dir / name);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_FALSE(fs::exists(dir / name)) << "only PATH.tmp until Close";
    ASSERT_TRUE((*w)->AddMember(long_name, "hello").ok());
    ASSERT_TRUE((*w)->AddMember(mid_name, std::string(1000, 'x')).ok());
    ASSERT_TRUE((*w)->AddMember("empty.bin", "").ok());
    EXPECT_FALSE((*w)->AddMember("", "x").ok());
    EXPECT_THAT((*w)->AddMember("d\xC3\xA9j\xC3\xA0.txt", "x").message(), HasSubstr("ASCII"));
    ASSERT_TRUE((*w)->Close().ok());
    EXPECT_EQ((*w)->bytes_written(), static_cast<int64_t>(fs::file_size(dir / name)));
    EXPECT_LE((*w)->bytes_written(),
              TarWriter::MemberBytes(long_name, 5) + TarWriter::MemberBytes(mid_name, 1000) +
                  TarWriter::MemberBytes("empty.bin", 0) + TarWriter::kEndBytes);
  }
  EXPECT_EQ(ReadWholeFile(dir / "one.tar"), ReadWholeFile(dir / "two.tar"));
  // PAX header names must not embed a pid (that would break reproducibility
  // across processes).
  for (const RawMember& m : ParseTar(ReadWholeFile(dir / "one.tar"))) {
    EXPECT_THAT(m.name, ::testing::Not(HasSubstr(absl::StrCat(getpid())))) << m.name;
  }
  EXPECT_THAT(Members(dir / "one.tar"),
              ElementsAre(std::pair<std::string, std::string>{long_name, "hello"},
                          std::pair<std::string, std::string>{mid_name, std::string(1000, 'x')},
                          std::pair<std::string, std::string>{"empty.bin", ""}));
  const auto [rc, out] = RunPython(dir, R"(
import sys, tarfile
with tarfile.open(sys.argv[1], encoding="utf-8") as t:
    for m in t.getmembers():
        print(m.name.encode("utf-8").hex(), len(t.extractfile(m).read()))
)",
                                   dir / "one.tar");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(
      out, absl::StrCat(absl::BytesToHexString(long_name), " 5\n", absl::BytesToHexString(mid_name),
                        " 1000\n", absl::BytesToHexString("empty.bin"), " 0\n"));
}

TEST(TarWriterTest, UnclosedWriterLeavesNothing) {
  TempDir dir;
  {
    absl::StatusOr<std::unique_ptr<TarWriter>> w = TarWriter::Open(dir / "x.tar");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->AddMember("a.txt", "a").ok());
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
  EXPECT_EQ(TarWriter::Open(dir / "no/such/dir/x.tar").status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(ShardWriterTest, RejectsBadKeysAndFields) {
  TempDir dir;
  ShardWriter w({dir.path(), 10, 0});
  EXPECT_THAT(w.AddSample("a.b", {{"jpg", "x"}}).message(), HasSubstr("a.b"));
  EXPECT_FALSE(w.AddSample("", {{"jpg", "x"}}).ok());
  EXPECT_FALSE(w.AddSample("__meta__", {{"jpg", "x"}}).ok());
  EXPECT_FALSE(w.AddSample("k", std::vector<SampleField>{}).ok());
  EXPECT_FALSE(w.AddSample("k", {{"", "x"}}).ok());
  EXPECT_THAT(w.AddSample("k", {{"jpg", "x"}, {"jpg", "y"}}).message(), HasSubstr("twice"));
  ASSERT_TRUE(w.AddSample("dir/k", {{"seg.png", "x"}, {"cls", "1"}}).ok());
  ASSERT_TRUE(w.Close().ok());
  ASSERT_TRUE(w.Close().ok());
  EXPECT_FALSE(w.AddSample("k2", {{"jpg", "x"}}).ok());
  EXPECT_THAT(Members(dir / "shard-000000.tar"),
              ElementsAre(std::pair<std::string, std::string>{"dir/k.seg.png", "x"},
                          std::pair<std::string, std::string>{"dir/k.cls", "1"}));
}

// ---------------------------------------------------------------- ImageFolder

// A small tree of real images made with the encoders:
//   cat/a.JPEG cat/b.jpg cat/sub/c.jpg  dog/x.png dog/y.jpg dog/notes.txt
//   dog/.hidden.jpg  empty_class/  zebra/bad.jpg (text) zebra/broken.jpg (dangling
//   symlink) zebra/empty.jpg zebra/z.jpg
struct Tree {
  std::map<std::string, std::string> files;  // relative path -> bytes
};

Tree MakeTree(const std::string& root) {
  Tree t;
  SyntheticOptions o;
  o.width = 48;
  o.height = 40;
  int i = 0;
  auto jpg = [&](int label) {
    const std::vector<uint8_t> rgb = RenderSyntheticImage(o, i++, label);
    return *EncodeJpeg(rgb.data(), o.width, o.height);
  };
  const std::vector<uint8_t> px = RenderSyntheticImage(o, 99, 5);
  t.files["cat/b.jpg"] = jpg(0);
  t.files["cat/a.JPEG"] = jpg(0);
  t.files["cat/sub/c.jpg"] = jpg(0);
  t.files["dog/x.png"] = *EncodePng(px.data(), o.width, o.height);
  t.files["dog/y.jpg"] = jpg(1);
  t.files["dog/notes.txt"] = "not an image";
  t.files["dog/.hidden.jpg"] = jpg(1);
  t.files["zebra/bad.jpg"] = "this is text, not a JPEG";
  t.files["zebra/empty.jpg"] = "";
  t.files["zebra/z.jpg"] = jpg(3);
  for (const auto& [rel, data] : t.files) WriteFile(root + "/" + rel, data);
  fs::create_symlink(root + "/no/such/file.jpg", root + "/zebra/broken.jpg");  // unreadable
  fs::create_directories(root + "/empty_class");
  return t;
}

TEST(ImageFolderTest, PacksTreeInClassOrderWithOriginalBytes) {
  TempDir dir;
  const Tree tree = MakeTree(dir / "src");
  PackOptions opt;
  opt.per_shard = 3;
  opt.shuffle = false;
  opt.threads = 2;
  absl::StatusOr<PackSummary> sum = PackImageFolder(dir / "src", dir / "out", opt);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->samples, 6);
  EXPECT_EQ(sum->num_classes, 4);
  EXPECT_EQ(sum->skipped, 3);
  EXPECT_THAT(sum->shard_samples, ElementsAre(3, 3));
  std::string warnings = absl::StrJoin(sum->warnings, "\n");
  EXPECT_THAT(warnings, HasSubstr("empty_class"));
  EXPECT_THAT(warnings, HasSubstr("zebra/bad.jpg: neither a JPEG nor a PNG"));
  EXPECT_THAT(warnings, HasSubstr("zebra/empty.jpg: empty file"));
  EXPECT_THAT(warnings, HasSubstr("zebra/broken.jpg: cannot read: No such file or directory"));

  // (key, image ext, source, label, class, count)
  struct Want {
    std::string key, ext, src;
    int label;
    std::string cls;
    int count;
  };
  const std::vector<Want> want = {
      {"00000000", "jpg", "cat/a.JPEG", 0, "cat", 0},
      {"00000001", "jpg", "cat/b.jpg", 0, "cat", 1},
      {"00000002", "jpg", "cat/sub/c.jpg", 0, "cat", 2},
      {"00000003", "png", "dog/x.png", 1, "dog", 0},
      {"00000004", "jpg", "dog/y.jpg", 1, "dog", 1},
      {"00000008", "jpg", "zebra/z.jpg", 3, "zebra", 2},  // 5, 6, 7 skipped
  };
  std::vector<std::pair<std::string, std::string>> all;
  for (const std::string& s : sum->shards) {
    for (auto& m : Members(s)) all.push_back(std::move(m));
  }
  ASSERT_EQ(all.size(), want.size() * 3);
  for (size_t i = 0; i < want.size(); ++i) {
    const Want& w = want[i];
    EXPECT_EQ(all[3 * i].first, w.key + "." + w.ext);
    EXPECT_EQ(all[3 * i].second, tree.files.at(w.src)) << w.src << ": bytes must be unchanged";
    EXPECT_EQ(all[3 * i + 1].first, w.key + ".json");
    EXPECT_EQ(all[3 * i + 1].second,
              absl::StrCat("{\"label\": ", w.label, ", \"class\": \"", w.cls,
                           "\", \"count\": ", w.count, ", \"file\": \"", w.src, "\"}"));
    EXPECT_EQ(all[3 * i + 2].first, w.key + ".cls");
    EXPECT_EQ(all[3 * i + 2].second, absl::StrCat(w.label));
  }
  EXPECT_EQ(ReadWholeFile(dir / "out/info.json"),
            "{\n  \"dataset size\": 6,\n  \"num_classes\": 4,\n"
            "  \"class names\": [\"cat\", \"dog\", \"empty_class\", \"zebra\"],\n"
            "  \"shards\": [\"shard-000000.tar\", \"shard-000001.tar\"],\n"
            "  \"shard samples\": [3, 3]\n}\n");

  // Python agrees on the layout, and PIL decodes every image at its size.
  const auto [rc, out] = RunPython(dir, R"(
import glob, io, sys, tarfile
from PIL import Image
for path in sorted(glob.glob(sys.argv[1] + "/shard-*.tar")):
    with tarfile.open(path) as t:
        for m in t.getmembers():
            data = t.extractfile(m).read()
            if m.name.endswith((".jpg", ".png")):
                im = Image.open(io.BytesIO(data))
                print(m.name, im.format, im.size[0], im.size[1])
)",
                                   dir / "out");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out,
            "00000000.jpg JPEG 48 40\n00000001.jpg JPEG 48 40\n00000002.jpg JPEG 48 40\n"
            "00000003.png PNG 48 40\n00000004.jpg JPEG 48 40\n00000008.jpg JPEG 48 40\n");
}

TEST(ImageFolderTest, ShuffleIsSeededPermutation) {
  TempDir dir;
  // 3 classes x 8 images: enough that a shuffle visibly interleaves classes.
  SyntheticOptions o;
  o.width = o.height = 16;
  for (int c = 0; c < 3; ++c) {
    for (int k = 0; k < 8; ++k) {
      const std::vector<uint8_t> rgb = RenderSyntheticImage(o, c * 8 + k, c);
      WriteFile(absl::StrFormat("%s/c%d/img%02d.jpg", dir / "src", c, k),
                *EncodeJpeg(rgb.data(), 16, 16));
    }
  }
  auto labels_of = [&](const std::string& out, const PackOptions& opt) {
    absl::StatusOr<PackSummary> sum = PackImageFolder(dir / "src", out, opt);
    EXPECT_TRUE(sum.ok()) << sum.status();
    std::vector<std::string> seq;
    for (const std::string& s : sum->shards) {
      for (const auto& [name, data] : Members(s)) {
        if (name.size() > 4 && name.substr(name.size() - 4) == ".cls") seq.push_back(data);
      }
    }
    return seq;
  };
  PackOptions opt;
  opt.per_shard = 0;
  opt.shuffle = false;
  const auto ordered = labels_of(dir / "ordered", opt);
  opt.shuffle = true;
  opt.threads = 1;
  const auto s0 = labels_of(dir / "s0", opt);
  opt.threads = 4;
  const auto s0_again = labels_of(dir / "s0b", opt);
  opt.seed = 1;
  const auto s1 = labels_of(dir / "s1", opt);
  ASSERT_EQ(ordered.size(), 24u);
  EXPECT_NE(s0, ordered);
  EXPECT_NE(s0, s1);
  EXPECT_EQ(DirContents(dir / "s0"), DirContents(dir / "s0b"));
  EXPECT_EQ(s0, s0_again);
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(sorted(s0), sorted(ordered));
  // The first shard of 8 would be one class unshuffled; shuffled it mixes.
  EXPECT_GT(std::set<std::string>(s0.begin(), s0.begin() + 8).size(), 1u);
}

TEST(ImageFolderTest, Errors) {
  TempDir dir;
  PackOptions opt;
  absl::Status s = PackImageFolder(dir / "missing", dir / "out", opt).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(dir / "missing"));

  WriteFile(dir / "flat/a.jpg", "x");  // images but no class directories
  s = PackImageFolder(dir / "flat/a.jpg", dir / "out", opt).status();
  EXPECT_THAT(s.message(), HasSubstr("not a directory"));
  s = PackImageFolder(dir / "flat", dir / "out", opt).status();
  EXPECT_THAT(s.message(), HasSubstr("no class directories"));

  fs::create_directories(dir / "noimg/a");
  WriteFile(dir / "noimg/b/readme.txt", "x");
  s = PackImageFolder(dir / "noimg", dir / "out", opt).status();
  EXPECT_THAT(s.message(), HasSubstr("no .jpg/.jpeg/.png images"));

  WriteFile(dir / "allbad/a/1.jpg", "garbage");
  WriteFile(dir / "allbad/a/2.png", "");
  s = PackImageFolder(dir / "allbad", dir / "out", opt).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("none of the 2 images"));
  EXPECT_THAT(s.message(), HasSubstr("1.jpg"));
  EXPECT_TRUE(SortedShards(dir / "out").empty());
  EXPECT_FALSE(fs::exists(dir / "out/info.json"));
}

// ---------------------------------------------------------------- CLI

std::string PackBinary() { return std::string(SHARDCAST_BINARY_DIR) + "/tools/shardcast-pack"; }

TEST(PackCliTest, HelpDocumentsEveryFlag) {
  testing_util::ExpectHelpListsEveryFlag(
      {PackBinary()}, {"--per-shard", "--max-shard-bytes", "--seed", "--shuffle", "--no-shuffle",
                       "--threads", "--overwrite", "--quiet", "--synthetic", "--classes", "--size",
                       "--quality", "--captions", "--no-labels"});
  const auto [rc, out] = RunShell(PackBinary() + " --help");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("info.json"));
  EXPECT_THAT(out, HasSubstr("Exit status:"));
}

TEST(PackCliTest, SyntheticMatchesLibraryAndGuardsExistingOutput) {
  TempDir dir;
  const auto [rc, out] = RunShell(absl::StrCat(PackBinary(),
                                               " --synthetic 25 --classes 4 --size 32x24 "
                                               "--per-shard=10 --seed 7 --threads 2 ",
                                               dir / "cli", " 2>&1"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("packed 25 samples (4 classes) into 3 shard(s)"));
  ASSERT_TRUE(WriteSyntheticDataset(dir / "lib", SmallSynthetic()).ok());
  // The binary also writes the dataset index file, which indexes exactly the shards.
  std::map<std::string, std::string> cli = DirContents(dir / "cli");
  ASSERT_EQ(cli.count(kIndexFileName), 1u);
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(dir / "cli", {});
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(cli[kIndexFileName], SerializeIndexFile(*index, {}).value());
  cli.erase(kIndexFileName);
  EXPECT_EQ(cli, DirContents(dir / "lib"));

  auto [rc2, out2] = RunShell(absl::StrCat(PackBinary(), " --synthetic 5 ", dir / "cli", " 2>&1"));
  EXPECT_EQ(rc2, 1);
  EXPECT_THAT(out2, HasSubstr("--overwrite"));
  std::tie(rc2, out2) =
      RunShell(absl::StrCat(PackBinary(), " --synthetic 5 --overwrite -q ", dir / "cli", " 2>&1"));
  EXPECT_EQ(rc2, 2) << "-q is not a flag: " << out2;
  std::tie(rc2, out2) = RunShell(
      absl::StrCat(PackBinary(), " --synthetic 5 --overwrite --quiet ", dir / "cli", " 2>&1"));
  EXPECT_EQ(rc2, 0) << out2;
  EXPECT_EQ(out2, "");
  EXPECT_EQ(SortedShards(dir / "cli").size(), 1u);
}

TEST(PackCliTest, CaptionsMatchLibraryAndNeedSyntheticMode) {
  TempDir dir;
  auto [rc, out] = RunShell(absl::StrCat(PackBinary(),
                                         " --synthetic 25 --classes 4 --size 32x24 "
                                         "--per-shard=10 --seed 7 --captions --quiet ",
                                         dir / "cli", " 2>&1"));
  ASSERT_EQ(rc, 0) << out;
  SyntheticOptions o = SmallSynthetic();
  o.captions = true;
  ASSERT_TRUE(WriteSyntheticDataset(dir / "lib", o).ok());
  std::map<std::string, std::string> cli = DirContents(dir / "cli");
  cli.erase(kIndexFileName);
  EXPECT_EQ(cli, DirContents(dir / "lib"));

  // img2dataset's layout: the index the binary writes keeps every sample, unlabelled.
  std::tie(rc, out) = RunShell(absl::StrCat(PackBinary(),
                                            " --synthetic 25 --size 32x24 --per-shard=10 "
                                            "--captions --no-labels ",
                                            dir / "pairs", " 2>&1"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("packed 25 samples (0 classes) into 3 shard(s)"));
  EXPECT_THAT(out, Not(HasSubstr("warning")));
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(dir / "pairs", {});
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(ReadWholeFile(absl::StrCat(dir / "pairs", "/", kIndexFileName)),
            SerializeIndexFile(*index, {}).value());
  EXPECT_EQ(index->num_samples, 25);
  EXPECT_EQ(index->num_classes, 0);
  EXPECT_FALSE(index->has_labels);
  EXPECT_TRUE(index->has_images);
  for (const ShardInfo& shard : index->shards) {
    for (const SampleEntry& e : shard.samples) EXPECT_EQ(e.label, -1) << e.key;
  }

  std::tie(rc, out) = RunShell(absl::StrCat(PackBinary(), " --captions a b 2>&1"));
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(out, HasSubstr("--captions and --no-labels need --synthetic N"));
  std::tie(rc, out) = RunShell(absl::StrCat(PackBinary(), " --no-labels a b 2>&1"));
  EXPECT_EQ(rc, 2);
}

TEST(PackCliTest, ImageFolderModeAndUsageErrors) {
  TempDir dir;
  MakeTree(dir / "src");
  auto [rc, out] = RunShell(absl::StrCat(PackBinary(), " ", dir / "src", " ", dir / "out",
                                         " --max-shard-bytes 8K --no-shuffle 2>&1"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("warning: skipped"));
  EXPECT_THAT(out, HasSubstr("packed 6 samples (4 classes)"));
  EXPECT_THAT(out, HasSubstr("skipped 3"));
  for (const std::string& s : SortedShards(dir / "out")) EXPECT_LE(fs::file_size(s), 8192u);

  std::tie(rc, out) =
      RunShell(absl::StrCat(PackBinary(), " ", dir / "src", " ", dir / "src/out", " 2>&1"));
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("must not be inside the source directory"));
  EXPECT_FALSE(fs::exists(dir / "src/out"));
  std::tie(rc, out) =
      RunShell(absl::StrCat(PackBinary(), " ", dir / "nope", " ", dir / "o2", " 2>&1"));
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("does not exist"));
  std::tie(rc, out) = RunShell(absl::StrCat(PackBinary(), " ", dir / "src", " 2>&1"));
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(out, HasSubstr("SRC_DIR OUT_DIR"));
  std::tie(rc, out) = RunShell(absl::StrCat(PackBinary(), " --per-shard x a b 2>&1"));
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(out, HasSubstr("--per-shard takes an integer >= 0, got 'x'"));
  std::tie(rc, out) = RunShell(absl::StrCat(PackBinary(), " --max-shard-bytes lots a b 2>&1"));
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(out, HasSubstr("--max-shard-bytes: 'lots' is not a size"));
  std::tie(rc, out) = RunShell(absl::StrCat(PackBinary(), " --shuffle --no-shuffle a b 2>&1"));
  EXPECT_EQ(rc, 2);
  std::tie(rc, out) = RunShell(absl::StrCat(PackBinary(), " --size 64 --synthetic 3 o 2>&1"));
  EXPECT_EQ(rc, 2);
  std::tie(rc, out) = RunShell(absl::StrCat(PackBinary(), " --frobnicate a b 2>&1"));
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(out, HasSubstr("unknown flag --frobnicate"));
}

}  // namespace
}  // namespace shardcast::pack

// The dataset index on real shard directories: order, labels, skipped samples, info.json
// checks, truncated shards, the on-disk cache (reuse, invalidation, corruption).
#include "common/shards/dataset_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/shards/content_digest.h"
#include "common/shards/index_cache_format.h"
#include "common/shards/tar_reader.h"
#include "common/util/digest.h"
#include "gtest/gtest.h"
#include "tests/common/shard_test_util.h"

namespace shardcast {
namespace {

using shard_testing::FileSpec;
using shard_testing::MakeTar;
using shard_testing::Payload;
using shard_testing::ReadWholeFile;
using shard_testing::ScopedTempDir;
using shard_testing::TarWriter;

struct Sample {
  std::string key;
  int label;
  std::string cls;  // class name in the json ("" = none)
};

// key.jpg (fake bytes: the index never decodes) + key.json + key.cls, as shardcast-pack.
std::vector<FileSpec> SampleFiles(const std::vector<Sample>& samples, bool with_cls = true) {
  std::vector<FileSpec> files;
  for (const Sample& s : samples) {
    files.push_back({s.key + ".jpg", Payload(s.key, 100 + s.key.size() * 37)});
    std::string json = absl::StrCat("{\"label\": ", s.label);
    if (!s.cls.empty()) absl::StrAppend(&json, ", \"class\": \"", s.cls, "\"");
    files.push_back({s.key + ".json", json + "}"});
    if (with_cls) files.push_back({s.key + ".cls", absl::StrCat(s.label, "\n")});
  }
  return files;
}

std::vector<Sample> Samples(const std::string& prefix, int n, int first_label = 0) {
  std::vector<Sample> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({absl::StrCat(prefix, "_", i), (first_label + i) % 4,
                   absl::StrCat("class", (first_label + i) % 4)});
  }
  return out;
}

std::string ReadBytes(const std::string& path, uint64_t offset, uint64_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  std::string out(size, '\0');
  const ssize_t n = ::pread(fd, out.data(), size, static_cast<off_t>(offset));
  ::close(fd);
  EXPECT_EQ(n, static_cast<ssize_t>(size));
  return out;
}

// Everything an index says, as text: equal dumps = equal indexes.
std::string Dump(const DatasetIndex& index) {
  std::string out = absl::StrCat(index.root, " n=", index.num_samples, " c=", index.num_classes,
                                 " fp=", index.fingerprint, "\n");
  for (const ShardInfo& s : index.shards) {
    absl::StrAppend(&out, s.path, " ", s.file_size, " ", s.mtime_ns, " ", s.compressed, "\n");
    for (const SampleEntry& e : s.samples) {
      absl::StrAppend(&out, "  ", e.key, " ", e.label, " img=", e.image_member);
      for (const MemberRef& m : e.members)
        absl::StrAppend(&out, " ", m.ext, "@", m.offset, "+", m.size);
      out += "\n";
    }
  }
  for (const std::string& c : index.class_names) absl::StrAppend(&out, "class ", c, "\n");
  for (const SkippedSample& s : index.skipped) {
    absl::StrAppend(&out, "skip ", s.shard, " ", s.key, " ", s.reason, "\n");
  }
  return out;
}

bool HasWarning(const DatasetIndex& index, absl::string_view needle) {
  for (const std::string& w : index.warnings) {
    if (absl::StrContains(w, needle)) return true;
  }
  return false;
}

class DatasetIndexTest : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_directories(data_dir()); }
  std::string data_dir() const { return tmp_ / "data"; }
  std::string shard(const std::string& name) const { return data_dir() + "/" + name; }
  // One shard of 4 samples indexed with a cache dir (set in `options`): the index in
  // `first`, the cache file's path returned.
  std::string IndexWithCache(IndexOptions* options, absl::StatusOr<DatasetIndex>* first) {
    MakeTar(tmp_.path(), SampleFiles(Samples("a", 4)), TarWriter::kGnuTarPax, shard("s.tar"));
    options->cache_dir = tmp_ / "cache";
    *first = BuildDatasetIndex(data_dir(), *options);
    EXPECT_TRUE(first->ok()) << first->status();
    return std::filesystem::directory_iterator(options->cache_dir)->path().string();
  }
  ScopedTempDir tmp_;
};

TEST_F(DatasetIndexTest, ShardsInNaturalOrderWithLabelsAndOffsets) {
  MakeTar(tmp_.path(), SampleFiles(Samples("s10", 3)), TarWriter::kGnuTarGnu,
          shard("shard-10.tar"));
  MakeTar(tmp_.path(), SampleFiles(Samples("s2", 2, 1)), TarWriter::kPythonPax,
          shard("shard-2.tar"));
  MakeTar(tmp_.path(), SampleFiles(Samples("s1", 2, 2)), TarWriter::kPythonGnu,
          shard("shard-1.tar.gz"), /*gzip=*/true);
  MakeTar(tmp_.path(), SampleFiles(Samples("s3", 1, 3), /*with_cls=*/false), TarWriter::kGnuTarPax,
          shard("shard-3.tgz"), true);
  shard_testing::WriteFile(shard("notes.txt"), "not a shard");
  shard_testing::WriteFile(shard("shard-0.tar.bak"), "not a shard either");
  std::filesystem::create_directories(shard("sub"));
  MakeTar(tmp_.path(), SampleFiles(Samples("sub", 1)), TarWriter::kGnuTarGnu,
          shard("sub/shard-0.tar"));

  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data_dir(), IndexOptions());
  ASSERT_TRUE(index.ok()) << index.status();
  std::vector<std::string> order;
  for (const ShardInfo& s : index->shards) order.push_back(s.path);
  EXPECT_EQ(order, (std::vector<std::string>{"shard-1.tar.gz", "shard-2.tar", "shard-3.tgz",
                                             "shard-10.tar"}));
  EXPECT_EQ(index->ShardSampleCounts(), (std::vector<uint32_t>{2, 2, 1, 3}));
  EXPECT_EQ(index->num_samples, 8);
  EXPECT_EQ(index->num_classes, 4);
  EXPECT_EQ(index->class_names, (std::vector<std::string>{"class0", "class1", "class2", "class3"}));
  EXPECT_TRUE(index->skipped.empty());
  EXPECT_TRUE(index->warnings.empty());
  EXPECT_FALSE(index->loaded_from_cache);
  EXPECT_EQ(index->fingerprint.size(), 32u);
  EXPECT_EQ(index->root, std::filesystem::canonical(data_dir()).string());

  const std::vector<std::string> prefixes = {"s1", "s2", "s3", "s10"};
  const std::vector<int> first_labels = {2, 1, 3, 0};
  for (size_t si = 0; si < index->shards.size(); ++si) {
    const ShardInfo& s = index->shards[si];
    EXPECT_EQ(s.compressed, si == 0 || si == 2);
    const std::string path = shard(s.path);
    absl::StatusOr<std::string> stream = ReadUncompressedStream(path);
    ASSERT_TRUE(stream.ok());
    for (size_t i = 0; i < s.samples.size(); ++i) {
      const SampleEntry& e = s.samples[i];
      const std::string key = absl::StrCat(prefixes[si], "_", i);
      EXPECT_EQ(e.key, key);
      EXPECT_EQ(e.label, (first_labels[si] + static_cast<int>(i)) % 4);
      const MemberRef& image = e.members[e.image_member];
      EXPECT_EQ(image.ext, "jpg");
      const std::string want = Payload(key, 100 + key.size() * 37);
      EXPECT_EQ(stream->substr(image.offset, image.size), want) << key;
      if (!s.compressed) {
        EXPECT_EQ(ReadBytes(path, image.offset, image.size), want) << key;
      }
    }
  }
}

TEST_F(DatasetIndexTest, SkippedSamplesAreReportedWithReasons) {
  std::vector<FileSpec> files = SampleFiles({{"good0", 1, ""}});
  files.push_back({"__key__", "metadata: silently ignored"});
  files.push_back({"noimage.cls", "1"});
  files.push_back({"nolabel.jpg", "J"});
  files.push_back({"badjson.jpg", "J"});
  files.push_back({"badjson.json", "{label: 1}"});
  files.push_back({"dup.jpg", "J"});
  files.push_back({"dup.JPG", "J"});
  files.push_back({"dup.cls", "2"});
  files.push_back({"README", "no dot"});
  files.push_back({"webp.webp", "W"});
  files.push_back({"webp.cls", "0"});
  files.push_back({"gif.gif", "G"});
  files.push_back({"gif.cls", "0"});
  for (const FileSpec& f : SampleFiles({{"good1", 2, ""}})) files.push_back(f);
  MakeTar(tmp_.path(), files, TarWriter::kPythonPax, shard("a.tar"));

  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data_dir(), IndexOptions());
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->num_samples, 3);  // webp is an image
  EXPECT_EQ(index->shards[0].samples[0].key, "good0");
  EXPECT_EQ(index->shards[0].samples[1].key, "webp");
  EXPECT_EQ(index->shards[0].samples[2].key, "good1");
  EXPECT_EQ(index->num_classes, 3);
  std::map<std::string, std::string> reasons;
  for (const SkippedSample& s : index->skipped) {
    EXPECT_EQ(s.shard, "a.tar");
    reasons[s.key] = s.reason;
  }
  ASSERT_EQ(reasons.size(), 6u) << Dump(*index);
  EXPECT_TRUE(absl::StrContains(reasons["noimage"], "no image")) << reasons["noimage"];
  EXPECT_TRUE(absl::StrContains(reasons["nolabel"], "no label")) << reasons["nolabel"];
  EXPECT_TRUE(absl::StrContains(reasons["badjson"], "invalid JSON")) << reasons["badjson"];
  EXPECT_TRUE(absl::StrContains(reasons["dup"], "duplicate extension 'jpg'")) << reasons["dup"];
  EXPECT_TRUE(absl::StrContains(reasons["README"], "no '.'")) << reasons["README"];
  EXPECT_TRUE(absl::StrContains(reasons["gif"], "gif")) << reasons["gif"];
}

TEST_F(DatasetIndexTest, LabelFieldOption) {
  std::vector<FileSpec> files = {{"a.jpg", "J"}, {"a.json", "{\"label\": 1, \"target\": 5}"}};
  MakeTar(tmp_.path(), files, TarWriter::kGnuTarGnu, shard("a.tar"));
  IndexOptions options;
  options.label_field = "target";
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data_dir(), options);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->num_samples, 1);
  EXPECT_EQ(index->shards[0].samples[0].label, 5);
  EXPECT_EQ(index->num_classes, 6);
  absl::StatusOr<DatasetIndex> plain = BuildDatasetIndex(data_dir(), IndexOptions());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->shards[0].samples[0].label, 1);
  EXPECT_NE(plain->fingerprint, index->fingerprint);  // the option is part of the identity
}

TEST_F(DatasetIndexTest, CacheIsReusedAndInvalidated) {
  MakeTar(tmp_.path(), SampleFiles(Samples("a", 3)), TarWriter::kGnuTarPax, shard("shard-1.tar"));
  MakeTar(tmp_.path(), SampleFiles(Samples("b", 2)), TarWriter::kPythonGnu, shard("shard-2.tar.gz"),
          true);
  IndexOptions options;
  options.cache_dir = tmp_ / "cache";
  options.threads = 2;

  absl::StatusOr<DatasetIndex> first = BuildDatasetIndex(data_dir(), options);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->loaded_from_cache);
  std::vector<std::string> cache_files;
  for (const auto& e : std::filesystem::directory_iterator(options.cache_dir)) {
    cache_files.push_back(e.path().string());
  }
  ASSERT_EQ(cache_files.size(), 1u);

  absl::StatusOr<DatasetIndex> second = BuildDatasetIndex(data_dir(), options);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->loaded_from_cache);
  EXPECT_EQ(Dump(*second), Dump(*first));
  // A scan without the cache agrees too (the cache is not the source of truth).
  absl::StatusOr<DatasetIndex> uncached = BuildDatasetIndex(data_dir(), IndexOptions());
  ASSERT_TRUE(uncached.ok());
  EXPECT_EQ(Dump(*uncached), Dump(*first));

  // Touching a shard (same bytes, new mtime) invalidates the cache, but the content
  // and so the fingerprint are the same; the next build reuses the cache again.
  shard_testing::SetMtime(shard("shard-1.tar"), 1700000000, 123);
  absl::StatusOr<DatasetIndex> touched = BuildDatasetIndex(data_dir(), options);
  ASSERT_TRUE(touched.ok());
  EXPECT_FALSE(touched->loaded_from_cache);
  EXPECT_EQ(touched->fingerprint, first->fingerprint);
  EXPECT_EQ(touched->shards[0].mtime_ns, 1700000000LL * 1000000000 + 123);
  absl::StatusOr<DatasetIndex> again = BuildDatasetIndex(data_dir(), options);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->loaded_from_cache);
  EXPECT_EQ(again->fingerprint, touched->fingerprint);

  // Rewriting a shard with other content (other size) invalidates and rescans.
  MakeTar(tmp_.path(), SampleFiles(Samples("a", 5)), TarWriter::kGnuTarPax, shard("shard-1.tar"));
  absl::StatusOr<DatasetIndex> modified = BuildDatasetIndex(data_dir(), options);
  ASSERT_TRUE(modified.ok());
  EXPECT_FALSE(modified->loaded_from_cache);
  EXPECT_EQ(modified->num_samples, 7);
  EXPECT_NE(modified->fingerprint, first->fingerprint);

  // Adding a shard invalidates.
  MakeTar(tmp_.path(), SampleFiles(Samples("c", 1)), TarWriter::kGnuTarGnu, shard("shard-3.tar"));
  absl::StatusOr<DatasetIndex> added = BuildDatasetIndex(data_dir(), options);
  ASSERT_TRUE(added.ok());
  EXPECT_FALSE(added->loaded_from_cache);
  EXPECT_EQ(added->num_samples, 8);
  EXPECT_EQ(added->shards.size(), 3u);

  // Another label field: another index.
  IndexOptions other = options;
  other.label_field = "count";
  absl::StatusOr<DatasetIndex> relabelled = BuildDatasetIndex(data_dir(), other);
  ASSERT_TRUE(relabelled.ok());
  EXPECT_FALSE(relabelled->loaded_from_cache);
  EXPECT_NE(relabelled->fingerprint, added->fingerprint);
}

TEST_F(DatasetIndexTest, CorruptCacheIsIgnoredWithAWarningAndRebuilt) {
  IndexOptions options;
  absl::StatusOr<DatasetIndex> first;
  const std::string cache_file = IndexWithCache(&options, &first);
  const std::string good = shard_testing::ReadWholeFile(cache_file);
  for (const std::string& bad :
       {good.substr(0, good.size() / 2), std::string("garbage"), std::string(),
        good.substr(0, 100) + std::string(1, static_cast<char>(good[100] ^ 1)) +
            good.substr(101)}) {
    shard_testing::WriteFile(cache_file, bad);
    absl::StatusOr<DatasetIndex> rebuilt = BuildDatasetIndex(data_dir(), options);
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
    EXPECT_FALSE(rebuilt->loaded_from_cache);
    EXPECT_TRUE(HasWarning(*rebuilt, "corrupt index cache")) << bad.size();
    EXPECT_EQ(Dump(*rebuilt), Dump(*first));
    // ... and the rebuilt cache is good again.
    absl::StatusOr<DatasetIndex> reused = BuildDatasetIndex(data_dir(), options);
    ASSERT_TRUE(reused.ok());
    EXPECT_TRUE(reused->loaded_from_cache);
  }
}

// A cache path someone replaced with what must not be read (issue 29: a FIFO left the
// server NOT_SERVING and deaf to SIGTERM; a link to /dev/zero took 7 GB; a 2 GB file
// 4.2 GB): refused without blocking or reading, the index rebuilt, the cache rewritten.
TEST_F(DatasetIndexTest, ACacheReplacedByAFifoADeviceOrAHugeFileIsNotReadButRebuilt) {
  IndexOptions options;
  absl::StatusOr<DatasetIndex> first;
  const std::string cache_file = IndexWithCache(&options, &first);
  const auto replace = [&](const std::string& kind) {
    std::filesystem::remove(cache_file);
    if (kind == "fifo") {
      ASSERT_EQ(::mkfifo(cache_file.c_str(), 0600), 0);
    } else if (kind == "device") {
      std::filesystem::create_symlink("/dev/zero", cache_file);
    } else {  // 16 GiB, sparse: far beyond what a cache of one small shard can be
      shard_testing::WriteFile(cache_file, "");
      std::filesystem::resize_file(cache_file, uintmax_t{16} << 30);
    }
  };
  for (const auto& [kind, said] : {std::pair<std::string, std::string>{"fifo", "a FIFO"},
                                   {"device", "a character device"},
                                   {"huge", "17179869184 bytes, more than the"}}) {
    replace(kind);
    absl::StatusOr<DatasetIndex> rebuilt = BuildDatasetIndex(data_dir(), options);
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
    EXPECT_FALSE(rebuilt->loaded_from_cache) << kind;
    EXPECT_TRUE(HasWarning(*rebuilt, said)) << kind;
    EXPECT_EQ(Dump(*rebuilt), Dump(*first));
    // The cache was written again over what was there.
    EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::symlink_status(cache_file)));
    absl::StatusOr<DatasetIndex> reused = BuildDatasetIndex(data_dir(), options);
    ASSERT_TRUE(reused.ok());
    EXPECT_TRUE(reused->loaded_from_cache) << kind;
  }
}

TEST_F(DatasetIndexTest, CacheContentsAreBoundsCheckedNotTrusted) {
  MakeTar(tmp_.path(), SampleFiles(Samples("a", 3)), TarWriter::kGnuTarPax, shard("s.tar"));
  IndexOptions options;
  options.cache_dir = tmp_ / "cache";
  absl::StatusOr<DatasetIndex> first = BuildDatasetIndex(data_dir(), options);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string cache_file =
      std::filesystem::directory_iterator(options.cache_dir)->path().string();
  const std::string good = shard_testing::ReadWholeFile(cache_file);
  const std::string body = good.substr(0, good.size() - 40);
  ASSERT_EQ(SealWithChecksum(body), good);  // the test's idea of the layout is the cache's
  absl::StatusOr<std::optional<ScanOutcome>> outcome =
      ParseScanOutcome(good, first->root, options, first->shards, IndexRecordKind::kCache);
  ASSERT_TRUE(outcome.ok() && outcome->has_value()) << outcome.status();

  // Sample "a_1" with one thing changed, written as the cache would be (its tables
  // sealed with their checksums): what the reader's bounds must catch.
  const uint64_t file_size = first->shards[0].file_size;
  const auto with = [&](const std::function<void(ScanOutcome&, SampleEntry&)>& change) {
    ScanOutcome tampered = **outcome;
    change(tampered, tampered.shards[0].samples[1]);
    std::string file = SerializeScanOutcome(first->root, options, tampered).value();
    return file.substr(0, file.size() - 40);
  };
  struct Case {
    std::string name;
    std::string body;
    std::string why;
  };
  // A label below -1 or an image member past the members is no table the encoder
  // writes; compact_shard_table_test shows the decoder refusing such bytes.
  const std::vector<Case> cases = {
      {"label past int32", with([](ScanOutcome&, SampleEntry& e) { e.label = int64_t{1} << 40; }),
       "label"},
      {"offset past the end",
       with([&](ScanOutcome&, SampleEntry& e) { e.members[0].offset = file_size - 10; }),
       "past the shard's end"},
      {"huge size",
       with([](ScanOutcome&, SampleEntry& e) { e.members[0].size = uint64_t{1} << 62; }),
       "past the shard's end"},
      {"offset overflow",
       with([](ScanOutcome&, SampleEntry& e) { e.members[0].offset = ~uint64_t{0} - 3; }),
       "past the shard's end"},
      {"max label", with([](ScanOutcome& o, SampleEntry&) {
         o.max_label = 1000;
         o.class_names.resize(1001);  // as many as it says, so only the samples disagree
       }),
       "max label"},
      {"trailing bytes", body + EncodeU64(0), "tables of"},
  };
  for (const Case& c : cases) {
    shard_testing::WriteFile(cache_file, SealWithChecksum(c.body));
    absl::StatusOr<DatasetIndex> rebuilt = BuildDatasetIndex(data_dir(), options);
    ASSERT_TRUE(rebuilt.ok()) << c.name << ": " << rebuilt.status();
    EXPECT_FALSE(rebuilt->loaded_from_cache) << c.name;
    EXPECT_TRUE(HasWarning(*rebuilt, "corrupt index cache")) << c.name;
    EXPECT_TRUE(HasWarning(*rebuilt, c.why)) << c.name;
    EXPECT_EQ(Dump(*rebuilt), Dump(*first)) << c.name;
  }
}

TEST_F(DatasetIndexTest, CacheDirInsideTheDatasetIsRefused) {
  MakeTar(tmp_.path(), SampleFiles(Samples("a", 1)), TarWriter::kGnuTarGnu, shard("s.tar"));
  for (const std::string& cache : {data_dir(), shard("cache"), data_dir() + "/./x/.."}) {
    IndexOptions options;
    options.cache_dir = cache;
    absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data_dir(), options);
    ASSERT_FALSE(index.ok()) << cache;
    EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(index.status().message(), "inside the dataset"))
        << index.status();
  }
  // A sibling whose name merely starts like the dataset dir is fine.
  IndexOptions options;
  options.cache_dir = data_dir() + "-cache";
  EXPECT_TRUE(BuildDatasetIndex(data_dir(), options).ok());
}

TEST_F(DatasetIndexTest, InfoJsonIsCheckedAgainstTheScan) {
  MakeTar(tmp_.path(), SampleFiles(Samples("a", 6)), TarWriter::kGnuTarPax, shard("s.tar"));
  // Agreeing: no warning; num_classes from info.json (more classes than labels seen).
  shard_testing::WriteFile(shard("info.json"), "{\"dataset size\": 6, \"num_classes\": 10}");
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data_dir(), IndexOptions());
  ASSERT_TRUE(index.ok());
  EXPECT_TRUE(index->warnings.empty());
  EXPECT_EQ(index->num_classes, 10);
  EXPECT_EQ(index->class_names.size(), 10u);

  shard_testing::WriteFile(shard("info.json"), "{\"dataset size\": 999, \"num_classes\": 2}");
  index = BuildDatasetIndex(data_dir(), IndexOptions());
  ASSERT_TRUE(index.ok());
  EXPECT_TRUE(HasWarning(*index, "\"dataset size\" 999 but the scan found 6"))
      << index->warnings[0];
  EXPECT_TRUE(HasWarning(*index, "\"num_classes\" 2"));
  EXPECT_EQ(index->num_classes, 4);  // max label + 1 wins over a too-small num_classes

  // Another name works when there is no info.json (the seed's files have various names).
  std::filesystem::remove(shard("info.json"));
  shard_testing::WriteFile(shard("other.json"), "{\"unrelated\": 1}");
  shard_testing::WriteFile(shard("dataset.json"), "{\"dataset size\": 5}");
  index = BuildDatasetIndex(data_dir(), IndexOptions());
  ASSERT_TRUE(index.ok());
  EXPECT_TRUE(HasWarning(*index, "dataset.json says \"dataset size\" 5"));

  // Broken info.json: a warning, never a failure.
  shard_testing::WriteFile(shard("info.json"), "{\"dataset size\": ");
  index = BuildDatasetIndex(data_dir(), IndexOptions());
  ASSERT_TRUE(index.ok());
  EXPECT_TRUE(HasWarning(*index, "info.json: ignored"));
}

TEST_F(DatasetIndexTest, TruncatedShardKeepsSamplesBeforeTheBreak) {
  MakeTar(tmp_.path(), SampleFiles(Samples("a", 2)), TarWriter::kGnuTarGnu, shard("shard-1.tar"));
  const std::string path = shard("shard-2.tar");
  MakeTar(tmp_.path(), SampleFiles(Samples("b", 4)), TarWriter::kGnuTarPax, path);
  absl::StatusOr<TarScan> scan = ScanTar(path);
  ASSERT_TRUE(scan.ok() && scan->error.ok());
  const std::string bytes = shard_testing::ReadWholeFile(path);

  // Cut inside b_2.jpg (member 6): b_0 and b_1 are complete, b_2 is gone.
  ASSERT_EQ(scan->members[6].name, "b_2.jpg");
  shard_testing::WriteFile(path, bytes.substr(0, scan->members[6].offset + 10));
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data_dir(), IndexOptions());
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->ShardSampleCounts(), (std::vector<uint32_t>{2, 2}));
  EXPECT_TRUE(HasWarning(*index, "shard-2.tar")) << Dump(*index);
  EXPECT_TRUE(HasWarning(*index, "b_2.jpg"));

  // Cut inside b_1.json (member 4): b_1 may be incomplete, so only b_0 stays.
  shard_testing::WriteFile(path, bytes.substr(0, scan->members[4].offset + 3));
  index = BuildDatasetIndex(data_dir(), IndexOptions());
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->ShardSampleCounts(), (std::vector<uint32_t>{2, 1}));
  ASSERT_EQ(index->skipped.size(), 1u);
  EXPECT_EQ(index->skipped[0].key, "b_1");
  EXPECT_TRUE(absl::StrContains(index->skipped[0].reason, "breaks"));

  // Cut inside the very first member: nothing readable, the shard is skipped naming
  // the break, and the other shard is indexed.
  shard_testing::WriteFile(path, bytes.substr(0, scan->members[0].offset + 3));
  index = BuildDatasetIndex(data_dir(), IndexOptions());
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->ShardSampleCounts(), (std::vector<uint32_t>{2}));
  ASSERT_EQ(index->skipped_shards.size(), 1u);
  EXPECT_EQ(index->skipped_shards[0].path, "shard-2.tar");
  EXPECT_TRUE(absl::StrContains(index->skipped_shards[0].reason, "truncated"))
      << index->skipped_shards[0].reason;
}

TEST_F(DatasetIndexTest, ErrorsNameTheProblem) {
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(tmp_ / "missing", IndexOptions());
  ASSERT_FALSE(index.ok());
  EXPECT_TRUE(absl::StrContains(index.status().message(), "missing"));

  index = BuildDatasetIndex(data_dir(), IndexOptions());  // empty directory
  ASSERT_FALSE(index.ok());
  EXPECT_TRUE(absl::StrContains(index.status().message(), "no shard")) << index.status();

  // Shards, but none readable: an error naming one and why.
  shard_testing::WriteFile(shard("garbage-3.tar"), Payload("garbage", 3000));
  shard_testing::WriteFile(shard("empty-4.tar"), "");
  index = BuildDatasetIndex(data_dir(), IndexOptions());  // names the first in order
  ASSERT_FALSE(index.ok());
  EXPECT_TRUE(absl::StrContains(index.status().message(), "none of its 2 shard(s)"))
      << index.status();
  EXPECT_TRUE(absl::StrContains(index.status().message(), "empty-4.tar: empty file"))
      << index.status();
}

// What BuildDatasetIndex says about each skipped shard, as "path: reason" lines.
std::string SkippedShards(const DatasetIndex& index) {
  std::string out;
  for (const SkippedShard& s : index.skipped_shards)
    absl::StrAppend(&out, s.path, ": ", s.reason, "\n");
  return out;
}

TEST_F(DatasetIndexTest, BadShardsAreSkippedWithAWarningAndTheRestIsIndexed) {
  MakeTar(tmp_.path(), SampleFiles(Samples("a", 3)), TarWriter::kGnuTarPax, shard("a-1.tar"));
  MakeTar(tmp_.path(), SampleFiles(Samples("b", 2)), TarWriter::kPythonGnu, shard("b-2.tar.gz"),
          true);
  shard_testing::WriteFile(shard("zzz.tar"), "");                      // 0 bytes
  shard_testing::WriteFile(shard("junk.tar"), Payload("junk", 5000));  // not a tar
  shard_testing::WriteFile(shard("junk.tgz"), std::string("\x1f\x8b") + Payload("j", 900));
  // A tar under bzip2: libarchive could read it, but only gzip is accepted.
  MakeTar(tmp_.path(), SampleFiles(Samples("c", 2)), TarWriter::kGnuTarGnu, tmp_ / "c.tar");
  ASSERT_EQ(shard_testing::RunShell("bzip2 -c " + shard_testing::ShellQuote(tmp_ / "c.tar") +
                                    " > " + shard_testing::ShellQuote(shard("c-3.tar.gz"))),
            0);
  std::filesystem::create_symlink(tmp_ / "gone.tar", shard("dangling.tar"));
  IndexOptions options;
  options.cache_dir = tmp_ / "cache";
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data_dir(), options);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->num_samples, 5);
  ASSERT_EQ(index->shards.size(), 2u);
  EXPECT_EQ(index->shards[0].path, "a-1.tar");
  EXPECT_EQ(index->shards[1].path, "b-2.tar.gz");
  ASSERT_EQ(index->skipped_shards.size(), 5u) << SkippedShards(*index);
  const std::string skipped = SkippedShards(*index);
  EXPECT_TRUE(absl::StrContains(skipped, "zzz.tar: empty file (0 bytes)")) << skipped;
  EXPECT_TRUE(absl::StrContains(skipped, "junk.tar: ")) << skipped;
  EXPECT_TRUE(absl::StrContains(skipped, "junk.tgz: ")) << skipped;
  EXPECT_TRUE(absl::StrContains(skipped, "c-3.tar.gz: ")) << skipped;
  EXPECT_TRUE(absl::StrContains(skipped, "dangling.tar: cannot stat")) << skipped;
  EXPECT_TRUE(HasWarning(*index, "shard zzz.tar skipped: empty file (0 bytes); serving the other"));
  EXPECT_TRUE(HasWarning(*index, "shard c-3.tar.gz skipped"));

  // The same from the cache, warnings included; the good shards alone give the same
  // fingerprint (skipped shards are not part of what is served).
  absl::StatusOr<DatasetIndex> cached = BuildDatasetIndex(data_dir(), options);
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_TRUE(cached->loaded_from_cache);
  EXPECT_EQ(SkippedShards(*cached), skipped);
  EXPECT_EQ(Dump(*cached), Dump(*index));
  EXPECT_TRUE(HasWarning(*cached, "shard zzz.tar skipped"));
  for (const char* bad : {"zzz.tar", "junk.tar", "junk.tgz", "c-3.tar.gz", "dangling.tar"}) {
    std::filesystem::remove(shard(bad));
  }
  absl::StatusOr<DatasetIndex> clean = BuildDatasetIndex(data_dir(), IndexOptions());
  ASSERT_TRUE(clean.ok()) << clean.status();
  EXPECT_EQ(clean->fingerprint, index->fingerprint);

  // A skipped shard fixed later is picked up (its identity changed: the cache is stale).
  shard_testing::WriteFile(shard("zzz.tar"), "");
  ASSERT_TRUE(BuildDatasetIndex(data_dir(), options).ok());
  MakeTar(tmp_.path(), SampleFiles(Samples("z", 4)), TarWriter::kGnuTarGnu, shard("zzz.tar"));
  absl::StatusOr<DatasetIndex> fixed = BuildDatasetIndex(data_dir(), options);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_FALSE(fixed->loaded_from_cache);
  EXPECT_TRUE(fixed->skipped_shards.empty()) << SkippedShards(*fixed);
  EXPECT_EQ(fixed->num_samples, 9);
}

TEST_F(DatasetIndexTest, CancelledIndexingStopsWithCancelled) {
  for (int i = 0; i < 3; ++i) {
    MakeTar(tmp_.path(), SampleFiles(Samples(absl::StrCat("s", i), 2)), TarWriter::kGnuTarGnu,
            shard(absl::StrCat("s-", i, ".tar")));
  }
  std::atomic<bool> cancelled{true};
  IndexOptions options;
  options.cancelled = &cancelled;
  options.cache_dir = tmp_ / "cache";
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data_dir(), options);
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), absl::StatusCode::kCancelled) << index.status();
  // Nothing half-scanned was cached.
  EXPECT_FALSE(std::filesystem::exists(options.cache_dir));
  cancelled = false;
  index = BuildDatasetIndex(data_dir(), options);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->num_samples, 6);
}

TEST(TarScanCancelTest, ScanStopsBeforeTheNextMember) {
  ScopedTempDir tmp;
  MakeTar(tmp.path(), SampleFiles(Samples("a", 2)), TarWriter::kGnuTarGnu, tmp / "a.tar");
  std::atomic<bool> cancelled{false};
  int asked = 0;
  absl::StatusOr<TarScan> scan = ScanTar(
      tmp / "a.tar",
      [&](absl::string_view, uint64_t) {
        if (++asked == 2) cancelled = true;
        return false;
      },
      &cancelled);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(scan->error.code(), absl::StatusCode::kCancelled) << scan->error;
  EXPECT_EQ(scan->members.size(), 2u);  // of 6
}

TEST_F(DatasetIndexTest, ThreadCountAndLocationDoNotChangeTheIndex) {
  for (int i = 0; i < 7; ++i) {
    MakeTar(tmp_.path(), SampleFiles(Samples(absl::StrCat("k", i), 1 + i % 3, i)),
            i % 2 ? TarWriter::kGnuTarPax : TarWriter::kPythonGnu,
            shard(absl::StrCat("part-", i, ".tar")));
  }
  IndexOptions one;
  one.threads = 1;
  IndexOptions many;
  many.threads = 5;
  absl::StatusOr<DatasetIndex> a = BuildDatasetIndex(data_dir(), one);
  absl::StatusOr<DatasetIndex> b = BuildDatasetIndex(data_dir(), many);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(Dump(*a), Dump(*b));

  // A copy elsewhere with the same names, sizes and mtimes has the same fingerprint:
  // server replicas on different mount points agree on the plan.
  const std::string copy = tmp_ / "copy";
  ASSERT_EQ(shard_testing::RunShell("cp -a " + shard_testing::ShellQuote(data_dir()) + " " +
                                    shard_testing::ShellQuote(copy)),
            0);
  absl::StatusOr<DatasetIndex> c = BuildDatasetIndex(copy, many);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->fingerprint, a->fingerprint);
  EXPECT_NE(c->root, a->root);

  // A copy that does not preserve mtimes (`cp -r`, most object-store syncs) holds the
  // same bytes and deals the same plan: same fingerprint.
  const std::string fresh_copy = tmp_ / "fresh-copy";
  ASSERT_EQ(shard_testing::RunShell("cp -r " + shard_testing::ShellQuote(data_dir()) + " " +
                                    shard_testing::ShellQuote(fresh_copy)),
            0);
  for (const auto& e : std::filesystem::directory_iterator(fresh_copy)) {
    shard_testing::SetMtime(e.path().string(), 1600000000, 7);
  }
  absl::StatusOr<DatasetIndex> d = BuildDatasetIndex(fresh_copy, many);
  ASSERT_TRUE(d.ok());
  EXPECT_NE(d->shards[0].mtime_ns, a->shards[0].mtime_ns);
  EXPECT_EQ(d->fingerprint, a->fingerprint);

  // One label changed (same sizes, same offsets): another fingerprint.
  const std::string relabelled = tmp_ / "relabelled";
  std::filesystem::create_directories(relabelled);
  for (int i = 0; i < 7; ++i) {
    std::vector<Sample> samples = Samples(absl::StrCat("k", i), 1 + i % 3, i);
    if (i == 3) {  // label 3 -> 2 (and its class name), every member the same size
      samples[0].label = 2;
      samples[0].cls = "class2";
    }
    MakeTar(tmp_.path(), SampleFiles(samples),
            i % 2 ? TarWriter::kGnuTarPax : TarWriter::kPythonGnu,
            relabelled + "/" + absl::StrCat("part-", i, ".tar"));
  }
  absl::StatusOr<DatasetIndex> changed = BuildDatasetIndex(relabelled, many);
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(changed->num_samples, a->num_samples);
  EXPECT_EQ(changed->shards[3].file_size, a->shards[3].file_size);
  EXPECT_NE(changed->fingerprint, a->fingerprint);
}

// The digest of every byte: the fingerprint covers bytes that the index's metadata
// does not describe (an image's pixels), so replicas whose one JPEG differs, same
// size, disagree on it (issue 35: a rank failed over to such a replica silently).
TEST_F(DatasetIndexTest, OneImageByteChangedSameSizeChangesTheFingerprint) {
  MakeTar(tmp_.path(), SampleFiles(Samples("a", 3)), TarWriter::kGnuTarPax, shard("s.tar"));
  absl::StatusOr<DatasetIndex> a = BuildDatasetIndex(data_dir(), {});
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string bytes = ReadWholeFile(shard("s.tar"));
  ContentHasher md5;
  md5.Add(bytes);
  EXPECT_EQ(a->shards[0].content_digest, md5.Hex());

  const std::string other = tmp_ / "other";
  std::filesystem::create_directories(other);
  const SampleEntry& sample = a->shards[0].samples[1];
  const MemberRef& image = sample.members[sample.image_member];
  std::string changed = bytes;
  changed[image.offset + image.size / 2] ^= 0x01;  // one pixel's byte, nothing else
  shard_testing::WriteFile(other + "/s.tar", changed);
  absl::StatusOr<DatasetIndex> b = BuildDatasetIndex(other, {});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->shards[0].file_size, a->shards[0].file_size);
  EXPECT_EQ(b->num_samples, a->num_samples);
  EXPECT_NE(b->shards[0].content_digest, a->shards[0].content_digest);
  EXPECT_NE(b->fingerprint, a->fingerprint);

  // The digest survives the cache and the index file, so neither path forgets it.
  IndexOptions cached;
  cached.cache_dir = tmp_ / "cache";
  ASSERT_TRUE(BuildDatasetIndex(data_dir(), cached).ok());
  absl::StatusOr<DatasetIndex> reused = BuildDatasetIndex(data_dir(), cached);
  ASSERT_TRUE(reused.ok()) << reused.status();
  EXPECT_TRUE(reused->loaded_from_cache);
  EXPECT_EQ(reused->shards[0].content_digest, a->shards[0].content_digest);
  EXPECT_EQ(reused->fingerprint, a->fingerprint);
}

// A store's listing of `index`'s shards as S3 gives it for single-part uploads: the
// ETag is the quoted MD5 of the bytes in `dir`.
ShardListing StoreListing(const std::string& dir, const DatasetIndex& index,
                          const IndexOptions& options) {
  ShardListing listing;
  listing.root = "s3://bucket/data/";
  for (const ShardInfo& indexed : index.shards) {
    ShardInfo shard;
    shard.path = indexed.path;
    shard.compressed = indexed.compressed;
    const std::string bytes = ReadWholeFile(dir + "/" + shard.path);
    shard.file_size = bytes.size();
    ContentHasher md5;
    md5.Add(bytes);
    shard.etag = absl::StrCat("\"", md5.Hex(), "\"");
    listing.shards.push_back(std::move(shard));
  }
  listing.scan = [dir, options](const ShardInfo& shard) {
    return ScanShardFile(dir + "/" + shard.path, shard, options, /*check_identity=*/false);
  };
  return listing;
}

// An index file next to the shards is trusted shard by shard only where the store's
// ETag vouches for its record: a .cls rewritten in place, same size, is scanned again
// and serves its new label (issue 35: the replica on the store served the old one).
TEST_F(DatasetIndexTest, IndexFileRecordsAreTrustedOnlyWhereTheEtagVouchesForThem) {
  for (int i = 0; i < 3; ++i) {
    MakeTar(tmp_.path(), SampleFiles(Samples(absl::StrCat("s", i), 2, i)), TarWriter::kGnuTarPax,
            shard(absl::StrCat("s", i, ".tar")));
  }
  absl::StatusOr<DatasetIndex> before = BuildDatasetIndex(data_dir(), {});
  ASSERT_TRUE(before.ok()) << before.status();
  const std::string index_file = SerializeIndexFile(*before, {}).value();

  // All vouched for: the file is used whole, no shard is read.
  {
    ShardListing listing = StoreListing(data_dir(), *before, {});
    listing.index_file = index_file;
    std::atomic<int> scans{0};
    listing.scan = [&scans](const ShardInfo&) {
      ++scans;
      return ShardScanResult();
    };
    absl::StatusOr<DatasetIndex> loaded = BuildIndexFromListing(std::move(listing), {});
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_TRUE(loaded->loaded_from_index_file);
    EXPECT_EQ(scans.load(), 0);
    EXPECT_EQ(loaded->fingerprint, before->fingerprint);
  }

  // s1's first .cls rewritten in place: "1\n" -> "3\n", same size, same offsets.
  const SampleEntry& sample = before->shards[1].samples[0];
  ASSERT_EQ(sample.label, 1);
  const MemberRef* cls = nullptr;
  for (const MemberRef& m : sample.members) {
    if (m.ext == "cls") cls = &m;
  }
  ASSERT_NE(cls, nullptr);
  std::string bytes = ReadWholeFile(shard("s1.tar"));
  ASSERT_EQ(bytes.substr(cls->offset, cls->size), "1\n");
  bytes[cls->offset] = '3';
  shard_testing::WriteFile(shard("s1.tar"), bytes);
  absl::StatusOr<DatasetIndex> after = BuildDatasetIndex(data_dir(), {});
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->shards[1].samples[0].label, 3);

  ShardListing listing = StoreListing(data_dir(), *after, {});
  listing.index_file = index_file;
  std::vector<std::string> scanned;
  std::mutex mu;
  listing.scan = [&, inner = listing.scan](const ShardInfo& shard) {
    {
      std::lock_guard<std::mutex> lock(mu);
      scanned.push_back(shard.path);
    }
    return inner(shard);
  };
  absl::StatusOr<DatasetIndex> loaded = BuildIndexFromListing(std::move(listing), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(scanned, std::vector<std::string>{"s1.tar"});  // only the one not vouched for
  EXPECT_TRUE(loaded->loaded_from_index_file);
  EXPECT_TRUE(HasWarning(*loaded, "not vouched for")) << Dump(*loaded);
  EXPECT_EQ(loaded->shards[1].samples[0].label, 3);
  EXPECT_EQ(loaded->fingerprint, after->fingerprint);
  // (Class names: the file's first, so label 3 keeps s2's "class3" where a full scan
  // takes s1's json "class1" first; names are labels' descriptions, not in the plan.)
  EXPECT_EQ(loaded->class_names.size(), after->class_names.size());

  // A store whose ETags are not MD5s (nginx, multipart) vouches for nothing, unless
  // the file recorded those very ETags (an index made from the store).
  ShardListing opaque = StoreListing(data_dir(), *after, {});
  for (ShardInfo& shard : opaque.shards) shard.etag = "\"5f3a-1c00\"";
  opaque.index_file = index_file;
  absl::StatusOr<DatasetIndex> rescanned = BuildIndexFromListing(opaque, {});
  ASSERT_TRUE(rescanned.ok()) << rescanned.status();
  EXPECT_FALSE(rescanned->loaded_from_index_file);
  EXPECT_EQ(rescanned->fingerprint, after->fingerprint);
  opaque.index_file = SerializeIndexFile(*rescanned, {}).value();  // records "5f3a-1c00" each
  opaque.scan = [](const ShardInfo&) { return ShardScanResult(); };
  absl::StatusOr<DatasetIndex> recorded = BuildIndexFromListing(opaque, {});
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_TRUE(recorded->loaded_from_index_file);
  EXPECT_EQ(recorded->fingerprint, after->fingerprint);
}

// A shard the host or store fails to read is not a fact about the data: indexing
// fails naming it, and nothing is cached, so the next start reads it (issue 35: the
// skip was cached and the shard never asked for again).
TEST_F(DatasetIndexTest, HostErrorWhileIndexingFailsAndIsNotRemembered) {
  for (int i = 0; i < 2; ++i) {
    MakeTar(tmp_.path(), SampleFiles(Samples(absl::StrCat("s", i), 2)), TarWriter::kGnuTarPax,
            shard(absl::StrCat("s", i, ".tar")));
  }
  absl::StatusOr<DatasetIndex> local = BuildDatasetIndex(data_dir(), {});
  ASSERT_TRUE(local.ok());
  IndexOptions options;
  options.cache_dir = tmp_ / "cache";
  bool store_fails = true;
  const auto listing = [&] {
    ShardListing l = StoreListing(data_dir(), *local, options);
    l.scan = [&, inner = l.scan](const ShardInfo& shard) {
      if (store_fails && shard.path == "s1.tar") {
        ShardScanResult failed;
        failed.fatal = absl::UnavailableError("http://store/s1.tar: HTTP 503 after 4 attempts");
        failed.host_error = true;
        return failed;
      }
      return inner(shard);
    };
    return l;
  };
  absl::StatusOr<DatasetIndex> failed = BuildIndexFromListing(listing(), options);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
  EXPECT_TRUE(absl::StrContains(failed.status().message(), "s1.tar")) << failed.status();
  EXPECT_TRUE(absl::StrContains(failed.status().message(), "503")) << failed.status();
  store_fails = false;
  absl::StatusOr<DatasetIndex> healthy = BuildIndexFromListing(listing(), options);
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  EXPECT_FALSE(healthy->loaded_from_cache);
  EXPECT_EQ(healthy->shards.size(), 2u);
  EXPECT_TRUE(healthy->skipped_shards.empty());
  EXPECT_EQ(healthy->num_samples, 4);
}

// What the file's counts can make the parser allocate is bounded by the file's bytes:
// a sample count just under (bytes left) / 8 once made it size a vector of SampleEntry
// 9 times the file (a 128 MiB index file: 1.3 GB) before it found the file corrupt.
TEST_F(DatasetIndexTest, IndexFileCountsAreBoundedByItsBytesBeforeAnythingIsSized) {
  std::vector<FileSpec> files = SampleFiles(Samples("a", 3));
  // A shard large enough that a 40 MiB index file is within what its index may take.
  files.push_back({"big.jpg", std::string(size_t{24} << 20, 'x')});
  files.push_back({"big.cls", "0\n"});
  MakeTar(tmp_.path(), files, TarWriter::kGnuTarPax, shard("s.tar"));
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data_dir(), {});
  ASSERT_TRUE(index.ok()) << index.status();
  const std::string good = SerializeIndexFile(*index, {}).value();
  std::string body = good.substr(0, good.size() - 40);
  // The shard's record: its sample count, then its table's offset (0, the first).
  const size_t count_at = body.find(EncodeU64(4) + EncodeU64(0));
  ASSERT_NE(count_at, std::string::npos);
  body.append(size_t{40} << 20, '\0');
  body.replace(count_at, 8, EncodeU64((body.size() - count_at) / 8 - 1));
  ASSERT_LE(SealWithChecksum(body).size(), MaxIndexFileBytes(index->shards));

  ShardListing listing;
  listing.root = "s3://bucket/data/";
  listing.shards = index->shards;
  listing.index_file = SealWithChecksum(body);
  listing.scan = [this](const ShardInfo& info) {
    return ScanShardFile(shard("s.tar"), info, {}, /*check_identity=*/false);
  };
  const auto kib = [](const char* field) {  // VmHWM / VmRSS of this process
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
      if (absl::StartsWith(line, field)) return std::stoll(line.substr(std::strlen(field)));
    }
    return -1LL;
  };
  // Resets the peak (VmHWM) to what is resident now (Linux >= 4.0).
  std::ofstream("/proc/self/clear_refs") << "5";
  const long long rss_before = kib("VmRSS:");
  absl::StatusOr<DatasetIndex> loaded = BuildIndexFromListing(std::move(listing), {});
  const long long peak = kib("VmHWM:");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(HasWarning(*loaded, "corrupt index cache")) << Dump(*loaded);
  EXPECT_FALSE(loaded->loaded_from_index_file);
  EXPECT_LT(peak - rss_before, 64 * 1024) << "KiB of peak growth while parsing";
}

}  // namespace
}  // namespace shardcast

// Indexing with the samples on disk (issue 46): a server with an index cache
// (IndexOptions::samples_on_disk) encodes each shard's samples into its cache table as
// the shard is scanned. The cache file, the served samples and every figure of the
// index are those of the in-memory path, and the heap while indexing grows with the
// shards, not the samples (a counting operator new in this binary measures it).
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/shards/content_digest.h"
#include "common/shards/dataset_index.h"
#include "common/shards/index_cache_format.h"
#include "gtest/gtest.h"
#include "tests/common/shard_test_util.h"

namespace {

// Live heap bytes (as malloc counts them) and their peak since ResetPeak.
std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};

void* Counted(size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  const int64_t live = g_live += static_cast<int64_t>(malloc_usable_size(p));
  for (int64_t peak = g_peak.load(); live > peak && !g_peak.compare_exchange_weak(peak, live);) {
  }
  return p;
}

void Uncounted(void* p) {
  if (p == nullptr) return;
  g_live -= static_cast<int64_t>(malloc_usable_size(p));
  std::free(p);
}

}  // namespace

void* operator new(size_t n) { return Counted(n); }
void* operator new[](size_t n) { return Counted(n); }
void operator delete(void* p) noexcept { Uncounted(p); }
void operator delete[](void* p) noexcept { Uncounted(p); }
void operator delete(void* p, size_t) noexcept { Uncounted(p); }
void operator delete[](void* p, size_t) noexcept { Uncounted(p); }

namespace shardcast {
namespace {

namespace fs = std::filesystem;
using shard_testing::ReadWholeFile;
using shard_testing::ScopedTempDir;
using shard_testing::WriteFile;

// A ustar archive of `files` (name, bytes), names under 100 bytes.
std::string TarOf(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string out;
  for (const auto& [name, data] : files) {
    std::string h(512, '\0');
    name.copy(h.data(), std::min<size_t>(name.size(), 99));
    absl::SNPrintF(h.data() + 100, 8, "%07o", 0644);
    absl::SNPrintF(h.data() + 108, 8, "%07o", 0);
    absl::SNPrintF(h.data() + 116, 8, "%07o", 0);
    absl::SNPrintF(h.data() + 124, 12, "%011o", data.size());
    absl::SNPrintF(h.data() + 136, 12, "%011o", 1700000000);
    h.replace(148, 8, 8, ' ');
    h[156] = '0';
    h.replace(257, 8,
              std::string("ustar\0"
                          "00",
                          8));
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    absl::SNPrintF(h.data() + 148, 8, "%06o", sum);
    h[155] = ' ';
    out += h;
    out += data;
    out.append((512 - data.size() % 512) % 512, '\0');
  }
  out.append(1024, '\0');
  return out;
}

struct DatasetSpec {
  int shards = 6;
  int per_shard = 40;
  bool images = true;         // a .jpg each (else a .txt only)
  int first_image_shard = 0;  // shards before it have no image: the rules turn late
  bool labels = true;         // a .cls each
  bool corrupt_shard = true;  // one shard is not a tar
  int info_classes = 13;      // info.json's num_classes
};

// Shards of samples with an image (sizes vary), a label, a class name now and then, a
// sample with a duplicate member (skipped), and info.json.
void MakeDataset(const std::string& dir, const DatasetSpec& spec) {
  fs::create_directories(dir);
  for (int s = 0; s < spec.shards; ++s) {
    std::vector<std::pair<std::string, std::string>> files;
    for (int j = 0; j < spec.per_shard; ++j) {
      const std::string key = absl::StrFormat("s%02d_%04d", s, j);
      if (spec.images && s >= spec.first_image_shard) {
        files.emplace_back(key + ".jpg", std::string(100 + (s * 37 + j * 11) % 900, 'x'));
      }
      files.emplace_back(key + ".txt", absl::StrCat("caption ", s, " ", j));
      if (spec.labels) files.emplace_back(key + ".cls", absl::StrCat((s + j) % 13));
      if (spec.labels && j % 9 == 0) {
        files.emplace_back(key + ".json", absl::StrCat("{\"class\": \"c", (s + j) % 13, "\"}"));
      }
      if (j == 5) files.emplace_back(key + ".txt", "again");  // duplicate extension
    }
    WriteFile(absl::StrFormat("%s/shard-%d.tar", dir, s), TarOf(files));
  }
  if (spec.corrupt_shard) WriteFile(dir + "/shard-99.tar", std::string(3000, 'z'));
  WriteFile(dir + "/info.json", absl::StrCat("{\"num_classes\": ", spec.info_classes, "}"));
}

IndexOptions Options(const std::string& cache_dir, bool on_disk) {
  IndexOptions options;
  options.cache_dir = cache_dir;
  options.samples_on_disk = on_disk;
  options.threads = 2;
  return options;
}

std::string CacheFile(const std::string& cache_dir) {
  for (const auto& entry : fs::directory_iterator(cache_dir)) {
    if (entry.path().extension() == ".bin") return entry.path().string();
  }
  return "";
}

std::string Describe(const SampleEntry& e) {
  std::string out = absl::StrCat(e.key, " ", e.label, " ", e.image_member);
  for (const MemberRef& m : e.members)
    absl::StrAppend(&out, " ", m.ext, "@", m.offset, "+", m.size);
  return out;
}

std::vector<std::string> Samples(const DatasetIndex& index) {
  std::vector<std::string> out;
  for (uint32_t s = 0; s < index.shards.size(); ++s) {
    EXPECT_TRUE(ForEachSample(index, s, [&](uint32_t, const SampleEntry& e) {
                  out.push_back(Describe(e));
                }).ok());
  }
  return out;
}

std::vector<std::string> Skips(const DatasetIndex& index) {
  std::vector<std::string> out;
  for (const SkippedSample& s : index.skipped)
    out.push_back(s.shard + "/" + s.key + ": " + s.reason);
  for (const SkippedShard& s : index.skipped_shards) out.push_back(s.path + ": " + s.reason);
  return out;
}

// Indexes `spec` both ways; the cache files, samples and figures must agree. Returns
// whether the on-disk index came straight from its streamed cache (samples released).
bool ExpectSameBothWays(const DatasetSpec& spec) {
  ScopedTempDir tmp;
  const std::string data = tmp.path() + "/data";
  MakeDataset(data, spec);
  const std::string mem_cache = tmp.path() + "/cache-mem", disk_cache = tmp.path() + "/cache-disk";
  absl::StatusOr<DatasetIndex> mem = BuildDatasetIndex(data, Options(mem_cache, false));
  absl::StatusOr<DatasetIndex> disk = BuildDatasetIndex(data, Options(disk_cache, true));
  EXPECT_TRUE(mem.ok()) << mem.status();
  EXPECT_TRUE(disk.ok()) << disk.status();
  if (!mem.ok() || !disk.ok()) return false;
  EXPECT_FALSE(disk->loaded_from_cache);
  const std::string mem_bytes = ReadWholeFile(CacheFile(mem_cache));
  EXPECT_FALSE(mem_bytes.empty());
  EXPECT_TRUE(mem_bytes == ReadWholeFile(CacheFile(disk_cache))) << "cache files differ";
  EXPECT_EQ(disk->fingerprint, mem->fingerprint);
  EXPECT_EQ(disk->num_samples, mem->num_samples);
  EXPECT_EQ(disk->num_classes, mem->num_classes);
  EXPECT_EQ(disk->class_names, mem->class_names);
  EXPECT_EQ(disk->has_images, mem->has_images);
  EXPECT_EQ(disk->has_labels, mem->has_labels);
  EXPECT_EQ(disk->warnings, mem->warnings);
  EXPECT_EQ(disk->ShardSampleCounts(), mem->ShardSampleCounts());
  EXPECT_EQ(disk->MemberExtensionCounts(), mem->MemberExtensionCounts());
  EXPECT_EQ(disk->LargestImageBytes(), mem->LargestImageBytes());
  EXPECT_EQ(Skips(*disk), Skips(*mem));
  EXPECT_EQ(Samples(*disk), Samples(*mem));
  EXPECT_GT(mem->num_samples, 0);
  // The index file written from the tables on disk, a shard at a time, is the one
  // written from the samples in memory.
  absl::StatusOr<std::string> disk_file = SerializeIndexFile(*disk, Options(disk_cache, true));
  absl::StatusOr<std::string> mem_file = SerializeIndexFile(*mem, Options(mem_cache, false));
  EXPECT_TRUE(disk_file.ok() && mem_file.ok());
  EXPECT_TRUE(disk_file.ok() && mem_file.ok() && *disk_file == *mem_file) << "index files differ";
  // The streamed cache serves the next start, header first.
  absl::StatusOr<DatasetIndex> again = BuildDatasetIndex(data, Options(disk_cache, true));
  EXPECT_TRUE(again.ok() && again->loaded_from_cache);
  if (again.ok()) {
    EXPECT_EQ(Samples(*again), Samples(*mem));
    // (A start from the header has no labels to count: no sparse-classes warning.)
    std::vector<std::string> warned = mem->warnings;
    warned.erase(std::remove_if(warned.begin(), warned.end(),
                                [](const std::string& w) {
                                  return w.find("distinct labels occur") != std::string::npos;
                                }),
                 warned.end());
    EXPECT_EQ(again->warnings, warned);
  }
  return disk->samples_released;
}

TEST(IndexOnDiskTest, SameCacheBytesAndSamplesAsInMemory) {
  EXPECT_TRUE(ExpectSameBothWays(DatasetSpec{}));
}

TEST(IndexOnDiskTest, MembersOnlyDataset) {
  DatasetSpec spec;
  spec.images = false;
  spec.labels = false;
  EXPECT_TRUE(ExpectSameBothWays(spec));
}

TEST(IndexOnDiskTest, OneShard) {
  DatasetSpec spec;
  spec.shards = 1;
  spec.corrupt_shard = false;
  EXPECT_TRUE(ExpectSameBothWays(spec));
}

// num_classes far above the 13 labels that occur: the same warning both ways (the labels
// counted as they are committed), once.
TEST(IndexOnDiskTest, SparseClassesWarnedAlike) {
  DatasetSpec spec;
  spec.info_classes = 100;
  EXPECT_TRUE(ExpectSameBothWays(spec));
}

// Shards without any image before shards with images: the samples committed first were
// ruled as a dataset without images; the index is made again in memory, the same.
TEST(IndexOnDiskTest, RulesTurnedByALaterShardFallBackToMemory) {
  DatasetSpec spec;
  spec.first_image_shard = 3;
  EXPECT_FALSE(ExpectSameBothWays(spec));
}

// A store's listing of every shard file in `dir` as S3 gives it for single-part uploads
// (the ETag: the quoted MD5 of the bytes), with `index_file` next to them; its scans,
// of the files in `dir`, are counted in `*scans`.
ShardListing StoreListing(const std::string& dir, const std::string& index_file,
                          std::atomic<int>* scans) {
  ShardListing listing;
  listing.root = "s3://bucket/data/";
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".tar") continue;
    ShardInfo shard;
    shard.path = entry.path().filename().string();
    const std::string bytes = ReadWholeFile(entry.path().string());
    shard.file_size = bytes.size();
    ContentHasher md5;
    md5.Add(bytes);
    shard.etag = absl::StrCat("\"", md5.Hex(), "\"");
    listing.shards.push_back(std::move(shard));
  }
  listing.index_file = index_file;
  listing.scan = [dir, scans](const ShardInfo& shard) {
    ++*scans;
    return ScanShardFile(dir + "/" + shard.path, shard, IndexOptions(), /*check_identity=*/false);
  };
  return listing;
}

// A remote dataset's index file, every shard vouched for by its ETag: with the samples
// on disk, each shard's table goes from the file to the cache alone; the same cache
// bytes, samples, skips and figures as the file read whole, and no shard is scanned.
TEST(IndexOnDiskTest, AnIndexFileGoesToTheCacheAShardAtATime) {
  DatasetSpec members_only;
  members_only.images = false;
  members_only.labels = false;
  for (const DatasetSpec& spec : {DatasetSpec{}, members_only}) {
    ScopedTempDir tmp;
    const std::string data = tmp.path() + "/data";
    MakeDataset(data, spec);
    absl::StatusOr<DatasetIndex> local = BuildDatasetIndex(data, {});
    ASSERT_TRUE(local.ok()) << local.status();
    const std::string index_file = SerializeIndexFile(*local, {}).value();
    std::atomic<int> scans{0};
    const std::string mem_cache = tmp.path() + "/mem", disk_cache = tmp.path() + "/disk";
    absl::StatusOr<DatasetIndex> mem =
        BuildIndexFromListing(StoreListing(data, index_file, &scans), Options(mem_cache, false));
    absl::StatusOr<DatasetIndex> disk =
        BuildIndexFromListing(StoreListing(data, index_file, &scans), Options(disk_cache, true));
    ASSERT_TRUE(mem.ok()) << mem.status();
    ASSERT_TRUE(disk.ok()) << disk.status();
    EXPECT_EQ(scans.load(), 0);
    EXPECT_TRUE(mem->loaded_from_index_file);
    EXPECT_TRUE(disk->loaded_from_index_file);
    EXPECT_TRUE(disk->samples_released);
    EXPECT_FALSE(mem->samples_released);
    EXPECT_TRUE(ReadWholeFile(CacheFile(mem_cache)) == ReadWholeFile(CacheFile(disk_cache)))
        << "cache files differ";
    EXPECT_EQ(disk->fingerprint, local->fingerprint);
    EXPECT_EQ(disk->fingerprint, mem->fingerprint);
    EXPECT_EQ(disk->num_classes, mem->num_classes);
    EXPECT_EQ(disk->class_names, mem->class_names);
    EXPECT_EQ(disk->warnings, mem->warnings);
    EXPECT_EQ(disk->ShardSampleCounts(), mem->ShardSampleCounts());
    EXPECT_EQ(disk->MemberExtensionCounts(), mem->MemberExtensionCounts());
    EXPECT_EQ(Skips(*disk), Skips(*mem));
    EXPECT_EQ(Samples(*disk), Samples(*mem));
  }
}

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) out.push_back(entry.path().string());
  return out;
}

// A listing of `n` shards whose scans are given by `scan` (no files behind them).
ShardListing FakeListing(int n, std::function<ShardScanResult(const ShardInfo&)> scan) {
  ShardListing listing;
  listing.root = "https://example.invalid/d/";
  for (int i = 0; i < n; ++i) {
    ShardInfo shard;
    shard.path = absl::StrCat("shard-", i, ".tar");
    shard.file_size = 1 << 20;
    shard.etag = absl::StrCat("\"etag", i, "\"");
    listing.shards.push_back(std::move(shard));
  }
  listing.scan = std::move(scan);
  return listing;
}

ShardScanResult TenSamples(const ShardInfo& shard) {
  ShardScanResult result;
  result.content_digest = std::string(32, 'a');
  for (int j = 0; j < 10; ++j) {
    SampleEntry e;
    e.key = absl::StrCat(shard.path, "/", j);
    e.members.push_back(MemberRef{"txt", static_cast<uint64_t>(512 + 1024 * j), 16});
    e.image_member = kNoImageMember;
    result.samples.push_back(std::move(e));
    result.class_names.emplace_back();
  }
  return result;
}

// A shard the store fails to give fails indexing, naming it; nothing is cached, and
// no temporary file is left in the cache dir.
TEST(IndexOnDiskTest, HostErrorFailsIndexingAndCachesNothing) {
  ScopedTempDir tmp;
  const std::string cache = tmp.path() + "/cache";
  ShardListing listing = FakeListing(12, [](const ShardInfo& shard) {
    if (shard.path != "shard-7.tar") return TenSamples(shard);
    ShardScanResult failed;
    failed.fatal = absl::UnavailableError("503 from the store");
    failed.host_error = true;
    return failed;
  });
  absl::StatusOr<DatasetIndex> index = BuildIndexFromListing(listing, Options(cache, true));
  ASSERT_FALSE(index.ok());
  EXPECT_TRUE(absl::IsUnavailable(index.status())) << index.status();
  EXPECT_NE(index.status().message().find("shard-7.tar"), std::string::npos) << index.status();
  EXPECT_TRUE(FilesIn(cache).empty()) << FilesIn(cache)[0];

  listing.scan = TenSamples;  // the store is back: indexed, and only the cache is left
  index = BuildIndexFromListing(listing, Options(cache, true));
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_TRUE(index->samples_released);
  EXPECT_EQ(index->num_samples, 120);
  EXPECT_EQ(FilesIn(cache).size(), 1u);
}

TEST(IndexOnDiskTest, CancelStopsIndexingAndCachesNothing) {
  ScopedTempDir tmp;
  const std::string cache = tmp.path() + "/cache";
  std::atomic<bool> cancelled{false};
  ShardListing listing = FakeListing(40, [&](const ShardInfo& shard) {
    if (shard.path == "shard-3.tar") cancelled = true;
    return TenSamples(shard);
  });
  IndexOptions options = Options(cache, true);
  options.cancelled = &cancelled;
  absl::StatusOr<DatasetIndex> index = BuildIndexFromListing(listing, options);
  EXPECT_TRUE(absl::IsCancelled(index.status())) << index.status();
  EXPECT_TRUE(FilesIn(cache).empty());
}

// The heap's peak while `fn` runs, above its level when it starts.
template <typename Fn>
int64_t PeakHeapOf(Fn fn) {
  const int64_t base = g_live.load();
  g_peak = base;
  fn();
  return g_peak.load() - base;
}

int64_t PeakHeapWhileIndexing(const std::string& data, const IndexOptions& options) {
  return PeakHeapOf([&] {
    absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data, options);
    EXPECT_TRUE(index.ok()) << index.status();
  });
}

constexpr int kShards = 200, kPerShard = 500;
constexpr int64_t kSamples = int64_t{kShards} * kPerShard;

// Prints both peaks per sample and expects the one on disk under a quarter of the other.
void ExpectOnDiskAFraction(const char* what, int64_t in_memory, int64_t on_disk) {
  std::printf("peak heap %s %lld samples: in memory %.1f B/sample, on disk %.1f B/sample\n", what,
              static_cast<long long>(kSamples), static_cast<double>(in_memory) / kSamples,
              static_cast<double>(on_disk) / kSamples);
  EXPECT_LT(on_disk, in_memory / 4) << what;
}

// kShards shards of kPerShard members-only samples in `data`.
void MakeManySmallShards(const std::string& data) {
  fs::create_directories(data);
  for (int s = 0; s < kShards; ++s) {
    std::vector<std::pair<std::string, std::string>> files;
    for (int j = 0; j < kPerShard; ++j) {
      files.emplace_back(absl::StrFormat("sample%02d%05d.txt", s, j), "0123456789abcdef");
    }
    WriteFile(absl::StrFormat("%s/shard-%d.tar", data, s), TarOf(files));
  }
}

// 200 shards of 500 samples: on disk, the heap holds the shards' records and the few
// shards in flight, not the whole dataset's samples that the in-memory path builds.
TEST(IndexOnDiskTest, HeapWhileIndexingGrowsWithShardsNotSamples) {
  ScopedTempDir tmp;
  const std::string data = tmp.path() + "/data";
  MakeManySmallShards(data);
  const int64_t in_memory = PeakHeapWhileIndexing(data, Options(tmp.path() + "/mem", false));
  const int64_t on_disk = PeakHeapWhileIndexing(data, Options(tmp.path() + "/disk", true));
  ExpectOnDiskAFraction("while indexing", in_memory, on_disk);
  // Records of the shards plus a window of shards in flight (2 threads): well under a
  // fifth of the samples' vectors.
  EXPECT_LT(on_disk, int64_t{kShards} * 4096 + 8 * kPerShard * 400 + (1 << 20));
}

// Hostile index files next to the shards of a server whose samples stay on disk: empty,
// garbage, oversized, truncated, a table's byte flipped (with and without the file's
// checksum sealed again over it). Each is warned about and the shards are scanned:
// the index is the shards', never the file's damage.
TEST(IndexOnDiskTest, AHostileIndexFileIsWarnedAboutAndTheShardsAreScanned) {
  ScopedTempDir tmp;
  const std::string data = tmp.path() + "/data";
  MakeDataset(data, DatasetSpec{});
  absl::StatusOr<DatasetIndex> local = BuildDatasetIndex(data, {});
  ASSERT_TRUE(local.ok()) << local.status();
  const std::string good = SerializeIndexFile(*local, {}).value();
  const size_t body = good.size() - kChecksumRecordBytes;
  std::string flipped = good;
  flipped[body - 5] ^= 0x01;  // inside the last shard's table (shard-99: skipped, empty)
  std::string flipped_earlier = good;
  flipped_earlier[body * 3 / 4] ^= 0x01;
  const std::vector<std::pair<std::string, std::string>> hostile = {
      {"empty", ""},
      {"garbage", std::string(5000, '\xff')},
      {"oversized", std::string(64 << 20, 'x')},
      {"truncated", good.substr(0, good.size() / 2)},
      {"a table's byte flipped", flipped},
      {"a table's byte flipped, the file sealed again", SealWithChecksum(flipped.substr(0, body))},
      {"a byte three quarters in flipped, the file sealed again",
       SealWithChecksum(flipped_earlier.substr(0, body))},
  };
  int n = 0;
  for (const auto& [what, file] : hostile) {
    std::atomic<int> scans{0};
    absl::StatusOr<DatasetIndex> index =
        BuildIndexFromListing(StoreListing(data, file, &scans),
                              Options(tmp.path() + "/cache-" + std::to_string(n++), true));
    ASSERT_TRUE(index.ok()) << what << ": " << index.status();
    EXPECT_FALSE(index->loaded_from_index_file) << what;
    EXPECT_GT(scans.load(), 0) << what;
    EXPECT_EQ(index->fingerprint, local->fingerprint) << what;
    EXPECT_EQ(Samples(*index), Samples(*local)) << what;
    EXPECT_TRUE(std::any_of(
        index->warnings.begin(), index->warnings.end(),
        [](const std::string& w) { return w.find(kIndexFileName) != std::string::npos; }))
        << what << ": no warning names the index file";
  }
}

// A remote dataset's index file of 200 shards x 500 samples, every shard vouched for:
// on disk, the heap holds the file (counted before), the shards' records and one
// shard's samples, not the dataset's samples that reading the file whole builds.
TEST(IndexOnDiskTest, HeapLoadingAnIndexFileGrowsWithShardsNotSamples) {
  ScopedTempDir tmp;
  const std::string data = tmp.path() + "/data";
  MakeManySmallShards(data);
  const std::string index_file =
      SerializeIndexFile(BuildDatasetIndex(data, {}).value(), {}).value();
  std::atomic<int> scans{0};
  auto peak_loading = [&](const IndexOptions& options) {
    ShardListing listing = StoreListing(data, index_file, &scans);
    return PeakHeapOf([&] {
      absl::StatusOr<DatasetIndex> index = BuildIndexFromListing(std::move(listing), options);
      EXPECT_TRUE(index.ok() && index->loaded_from_index_file) << index.status();
    });
  };
  const int64_t in_memory = peak_loading(Options(tmp.path() + "/mem", false));
  const int64_t on_disk = peak_loading(Options(tmp.path() + "/disk", true));
  EXPECT_EQ(scans.load(), 0);
  ExpectOnDiskAFraction("loading an index file of", in_memory, on_disk);
  EXPECT_LT(on_disk, int64_t{kShards} * 4096 + 4 * kPerShard * 400 + (1 << 20));
}

// The index file of an index whose samples are on disk is written a shard at a time:
// the heap holds one shard's samples and table, not the dataset's (the file itself goes
// to the sink, here counted and dropped).
TEST(IndexOnDiskTest, IndexFileWrittenInHeapThatGrowsWithShards) {
  ScopedTempDir tmp;
  const std::string data = tmp.path() + "/data";
  MakeManySmallShards(data);
  const IndexOptions options = Options(tmp.path() + "/disk", true);
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(data, options);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_TRUE(index->samples_released);
  uint64_t file_bytes = 0;
  const int64_t peak = PeakHeapOf([&] {
    EXPECT_TRUE(WriteIndexFile(*index, options, [&](absl::string_view piece) {
                  file_bytes += piece.size();
                  return absl::OkStatus();
                }).ok());
  });
  std::printf("peak heap writing an index file of %d samples (%llu bytes): %lld bytes\n",
              kShards * kPerShard, static_cast<unsigned long long>(file_bytes),
              static_cast<long long>(peak));
  EXPECT_EQ(file_bytes, SerializeIndexFile(*index, options)->size());
  // The shards' records and one shard's samples (about 240 B each) and table: well
  // under the dataset's samples in memory (over 20 MB) or the file (over 1 MB).
  EXPECT_LT(peak, int64_t{kShards} * 1024 + 2 * kPerShard * 400 + (256 << 10));
}

}  // namespace
}  // namespace shardcast

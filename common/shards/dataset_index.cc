// Builds the dataset index: lists shards in natural order, scans them in parallel
// (tar_reader + sample_grouping), checks info.json, and caches the result on disk.
#include "common/shards/dataset_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/shards/content_digest.h"
#include "common/shards/index_cache_format.h"
#include "common/shards/sample_grouping.h"
#include "common/shards/shard_errors.h"
#include "common/shards/shard_table_cache.h"
#include "common/shards/tar_reader.h"
#include "common/util/digest.h"
#include "common/util/json_fields.h"
#include "common/util/regular_file.h"

namespace shardcast {
namespace fs = std::filesystem;

std::vector<uint32_t> DatasetIndex::ShardSampleCounts() const {
  if (samples_released) return released_sample_counts;
  std::vector<uint32_t> counts;
  counts.reserve(shards.size());
  for (const ShardInfo& shard : shards)
    counts.push_back(static_cast<uint32_t>(shard.samples.size()));
  return counts;
}

std::map<std::string, int64_t> DatasetIndex::MemberExtensionCounts() const {
  if (samples_released) return released_extension_counts;
  std::map<std::string, int64_t> counts;
  for (const ShardInfo& shard : shards) {
    for (const SampleEntry& sample : shard.samples) {
      for (const MemberRef& member : sample.members) ++counts[member.ext];
    }
  }
  return counts;
}

uint64_t DatasetIndex::LargestImageBytes() const {
  if (samples_released) return released_largest_image_bytes;
  uint64_t largest = 0;
  for (const ShardInfo& shard : shards) {
    for (const SampleEntry& sample : shard.samples) {
      if (const MemberRef* image = ImageMember(sample); image != nullptr) {
        largest = std::max(largest, image->size);
      }
    }
  }
  return largest;
}

bool ReleaseSamples(DatasetIndex* index) {
  if (index->samples_released) return true;
  if (index->tables == nullptr || index->tables->shards.size() != index->shards.size()) {
    return false;
  }
  index->released_sample_counts = index->ShardSampleCounts();
  index->released_extension_counts = index->MemberExtensionCounts();
  index->released_largest_image_bytes = index->LargestImageBytes();
  for (ShardInfo& shard : index->shards) std::vector<SampleEntry>().swap(shard.samples);
  index->samples_released = true;
  return true;
}

absl::Status ForEachSample(const DatasetIndex& index, uint32_t shard,
                           absl::FunctionRef<void(uint32_t, const SampleEntry&)> fn) {
  if (shard >= index.shards.size()) {
    return absl::OutOfRangeError(absl::StrCat("shard ", shard, " of ", index.shards.size()));
  }
  if (!index.samples_released) {
    const std::vector<SampleEntry>& samples = index.shards[shard].samples;
    for (size_t j = 0; j < samples.size(); ++j) fn(static_cast<uint32_t>(j), samples[j]);
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<const LoadedShardTable>> table =
      ReadShardTable(index.tables, shard);
  if (!table.ok()) return table.status();
  return (*table)->table().ForEach(fn);
}

namespace {

// .cls/.json members bigger than this are not label files; they are not read.
constexpr uint64_t kMaxLabelMemberBytes = 1 << 20;
// WarnIfClassesSparse stays quiet for small gaps (a few classes without samples).
constexpr int64_t kSparseClassesMinGap = 10;

int64_t Nanos(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

std::string FormatNanos(int64_t ns) {
  return absl::StrFormat("%d.%09d", ns / 1000000000, ns % 1000000000);
}

// "shard-2" < "shard-10": runs of digits compare by value, the rest bytewise.
bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      size_t is = i, js = j;
      while (is + 1 < ie && a[is] == '0') ++is;  // leading zeros do not change the value
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      const int c = a.compare(is, ie - is, b, js, je - js);
      if (c != 0) return c < 0;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  if ((a.size() - i) != (b.size() - j)) return a.size() - i < b.size() - j;
  return a < b;  // equal by value ("01" vs "1"): any fixed order will do
}

bool IsShardName(const std::string& name) {
  return absl::EndsWith(name, ".tar") || absl::EndsWith(name, ".tar.gz") ||
         absl::EndsWith(name, ".tgz");
}

void Warn(std::vector<std::string>* warnings, std::string message) {
  std::fprintf(stderr, "shardcast: warning: %s\n", message.c_str());
  warnings->push_back(std::move(message));
}

// Shards directly in `root` (symlinks followed), natural order, without samples. A shard
// name that cannot be stat'ed (a dangling symlink, a permission problem) goes to
// `*unlisted` with the reason.
absl::StatusOr<std::vector<ShardInfo>> ListShards(const std::string& root,
                                                  std::vector<SkippedShard>* unlisted) {
  std::vector<ShardInfo> shards;
  std::error_code ec;
  fs::directory_iterator it(root, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(root, ": cannot list directory: ", ec.message()));
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return absl::UnavailableError(absl::StrCat(root, ": listing failed: ", ec.message()));
    const std::string name = it->path().filename().string();
    if (!IsShardName(name)) continue;
    struct stat st;
    if (::stat(it->path().c_str(), &st) != 0) {
      SkippedShard skipped;
      skipped.path = name;
      skipped.reason = absl::StrCat("cannot stat: ", std::strerror(errno));
      unlisted->push_back(std::move(skipped));
      continue;
    }
    if (!S_ISREG(st.st_mode)) continue;
    ShardInfo shard;
    shard.path = name;
    SetShardIdentity(st, &shard);
    shard.compressed = !absl::EndsWith(name, ".tar");
    shards.push_back(std::move(shard));
  }
  std::sort(shards.begin(), shards.end(),
            [](const ShardInfo& a, const ShardInfo& b) { return NaturalLess(a.path, b.path); });
  return shards;
}

// The content fingerprint: what the planner and the serve path depend on (shard
// names, sizes and content digests, every sample's key, label and member offsets) and
// nothing else. Two replicas holding the same bytes agree on it however the files
// were copied; two whose bytes differ anywhere do not (the digest covers every byte
// that can reach a batch); mtimes only decide whether a cache is still valid. Taken a
// served shard at a time, in shard order: from samples in memory, or read back from
// tables one shard at a time.
class FingerprintDigest {
 public:
  // The served shards' count leads the digest.
  FingerprintDigest(const IndexOptions& options, size_t served_shards) {
    h_.AddString("shardcast-index");
    h_.AddU64(kFingerprintVersion);
    h_.AddString(options.label_field);
    h_.AddU64(served_shards);
  }
  void AddShard(const ShardInfo& s, const std::vector<SampleEntry>& samples) {
    h_.AddString(s.path);
    h_.AddU64(s.file_size);
    h_.AddString(s.content_digest);
    h_.AddU64(s.compressed ? 1 : 0);
    AddSampleRecords(samples, &h_);
  }
  std::string Hex() const { return h_.Hex(); }

 private:
  Digest128 h_;
};

std::string ContentFingerprint(const std::vector<const ShardInfo*>& shards,
                               const IndexOptions& options) {
  FingerprintDigest h(options, shards.size());
  for (const ShardInfo* s : shards) h.AddShard(*s, s->samples);
  return h.Hex();
}

// The shards `scan` serves (not skipped).
size_t ServedShards(const ScanOutcome& scan) {
  size_t served = 0;
  for (const std::string& reason : scan.skip_reasons) served += reason.empty() ? 1 : 0;
  return served;
}

// The fingerprint of the shards `scan` serves (those not skipped), as the index's.
std::string ContentFingerprint(const ScanOutcome& scan, const IndexOptions& options) {
  std::vector<const ShardInfo*> served;
  for (size_t i = 0; i < scan.shards.size(); ++i) {
    if (scan.skip_reasons[i].empty()) served.push_back(&scan.shards[i]);
  }
  return ContentFingerprint(served, options);
}

}  // namespace

ShardScanResult ScanShardFile(const std::string& path, const ShardInfo& shard,
                              const IndexOptions& options, bool check_identity,
                              const std::string& content_digest) {
  ShardScanResult result;
  result.content_digest = content_digest;
  if (result.content_digest.empty()) {
    // Before the scan, so that the identity check after it covers these bytes too.
    absl::StatusOr<std::string> digest = FileContentDigest(path);
    if (!digest.ok()) {
      result.fatal = digest.status();
      result.host_error = IsHostIoError(digest.status());
      return result;
    }
    result.content_digest = *std::move(digest);
  }
  if (shard.file_size == 0) {
    // libarchive reads an empty file as an empty archive; webdataset fails on it.
    result.fatal = absl::DataLossError("empty file (0 bytes)");
    return result;
  }
  const auto want_content = [](absl::string_view name, uint64_t size) {
    if (size > kMaxLabelMemberBytes) return false;
    std::optional<KeyExt> split = SplitKeyExt(name);
    return split.has_value() && IsLabelExt(absl::AsciiStrToLower(split->ext));
  };
  absl::StatusOr<TarScan> scan = ScanTar(path, want_content, options.cancelled);
  if (!scan.ok()) {
    result.fatal = scan.status();
    return result;
  }
  if (!scan->error.ok() && (scan->members.empty() || absl::IsCancelled(scan->error))) {
    result.fatal = scan->error;
    return result;
  }
  // Offsets and labels read from a file that changed meanwhile describe neither version.
  struct stat after;
  if (check_identity && ::stat(path.c_str(), &after) != 0) {
    result.fatal = absl::UnavailableError(absl::StrCat("cannot stat: ", std::strerror(errno)));
    return result;
  }
  if (std::string change = check_identity ? ShardChange(shard, after) : ""; !change.empty()) {
    result.fatal = absl::AbortedError(
        absl::StrCat("changed while it was indexed (", change, "); restart to index it again"));
    return result;
  }
  result.compressed = scan->compressed;
  std::vector<absl::string_view> names;
  names.reserve(scan->members.size());
  for (const TarMember& m : scan->members) names.push_back(m.name);
  Grouping grouping = GroupByKeys(names);
  const auto skip = [&](std::string key, std::string reason) {
    result.skipped.push_back(SkippedSample{shard.path, std::move(key), std::move(reason)});
    result.skipped_before.push_back(result.samples.size());
  };
  for (size_t i : grouping.keyless) {
    skip(scan->members[i].name,
         "no '.' in the file name (or nothing before it): not part of any sample");
  }
  size_t usable_groups = grouping.groups.size();
  if (!scan->error.ok()) {
    // The last sample before the break may have had more members after it: drop it,
    // unless the member cut short is known to start another sample (grouping is by
    // consecutive keys, so the last group was then complete).
    bool last_group_complete = false;
    if (!scan->broken_member.empty() && usable_groups > 0) {
      std::optional<KeyExt> broken = SplitKeyExt(scan->broken_member);
      // (A metadata or keyless member proves nothing: the sample may continue after it.)
      last_group_complete = !IsMetadataName(scan->broken_member) && broken.has_value() &&
                            broken->key != grouping.groups.back().key;
    }
    if (usable_groups > 0 && !last_group_complete) {
      --usable_groups;
      skip(grouping.groups.back().key,
           absl::StrCat("the shard breaks after this sample (it may be incomplete): ",
                        scan->error.message()));
    }
    result.warnings.push_back(absl::StrCat(scan->error.message(), "; kept the ", usable_groups,
                                           " sample(s) read completely before the break"));
  }
  for (size_t g = 0; g < usable_groups; ++g) {
    const MemberGroup& group = grouping.groups[g];
    absl::StatusOr<LabeledSample> sample =
        MakeSampleEntry(group, scan->members, options.label_field, options.max_classes);
    if (!sample.ok()) {
      skip(group.key, std::string(sample.status().message()));
      continue;
    }
    result.samples.push_back(std::move(sample->entry));
    result.class_names.push_back(std::move(sample->class_name));
  }
  return result;
}

namespace {

std::string CachePath(const std::string& cache_dir, const std::string& root) {
  Digest128 h;
  h.AddString(root);
  return (fs::path(cache_dir) / ("shardcast-index-" + h.Hex().substr(0, 16) + ".bin")).string();
}

// The largest index cache `shards` can have (MaxIndexFileBytes): ReadRegularFile
// refuses a larger one before reading.
int64_t MaxCacheBytes(const std::vector<ShardInfo>& shards) {
  return static_cast<int64_t>(
      std::min<uint64_t>(MaxIndexFileBytes(shards), std::numeric_limits<int64_t>::max()));
}

absl::Status WriteAll(int fd, const std::string& path, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(
          absl::StrCat(path, ": write failed: ", std::strerror(n < 0 ? errno : ENOSPC)));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// `write` fills a temporary file (its descriptor and name), which is then renamed to
// `path`; on any failure the temporary file is removed. Written to a temporary name and
// renamed: a reader never sees half a cache. The name comes from mkstemp (random
// letters, created O_EXCL): servers in separate PID namespaces sharing the cache folder
// can draw the same PID and thread, never the same file.
absl::Status WriteFileAtomically(
    const std::string& path, const std::function<absl::Status(int, const std::string&)>& write) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot create a temporary file: ", std::strerror(errno)));
  }
  absl::Status written = write(fd, tmp);
  // mkstemp makes 0600; the cache is as readable as the files written before it.
  ::fchmod(fd, 0644);
  if (::close(fd) != 0 && written.ok()) {
    written = absl::UnavailableError(absl::StrCat(tmp, ": write failed: ", std::strerror(errno)));
  }
  if (written.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    written = absl::UnavailableError(absl::StrCat(path, ": rename failed: ", std::strerror(errno)));
  }
  if (!written.ok()) ::unlink(tmp.c_str());
  return written;
}

absl::Status WriteCacheFile(const std::string& path, const std::string& data) {
  return WriteFileAtomically(
      path, [&data](int fd, const std::string& tmp) { return WriteAll(fd, tmp, data); });
}

// What a dataset's samples hold. They are all alike: when any sample has an image (a
// label), one without is skipped; when none has, all are served without.
struct DatasetTraits {
  bool has_images = false;
  bool has_labels = false;
};

void AddTraits(const std::vector<SampleEntry>& samples, DatasetTraits* traits) {
  for (const SampleEntry& e : samples) {
    traits->has_images = traits->has_images || ImageMember(e) != nullptr;
    traits->has_labels = traits->has_labels || e.label >= 0;
  }
}

// Why `entry` is not served in a dataset of `traits`; "" when it is. The image is asked
// about first, as the scan did when every sample needed both.
std::string DatasetRuleSkip(const SampleEntry& entry, const DatasetTraits& traits,
                            absl::string_view label_field) {
  if (traits.has_images && ImageMember(entry) == nullptr) return MissingImageReason(entry);
  if (traits.has_labels && entry.label < 0) return MissingLabelReason(entry, label_field);
  return "";
}

// Skips the samples of `scan` that its dataset rules do not serve, each after the other
// skips of its shard (an outcome keeps no archive positions; this is for outcomes merged
// from parts, each already ruled over itself, where it rarely skips anything).
void ApplyDatasetRules(absl::string_view label_field, ScanOutcome* scan) {
  DatasetTraits traits;
  for (const ShardInfo& shard : scan->shards) AddTraits(shard.samples, &traits);
  for (ShardInfo& shard : scan->shards) {
    std::vector<SampleEntry> served;
    served.reserve(shard.samples.size());
    for (SampleEntry& e : shard.samples) {
      std::string reason = DatasetRuleSkip(e, traits, label_field);
      if (reason.empty()) {
        served.push_back(std::move(e));
      } else {
        scan->skipped.push_back(SkippedSample{shard.path, e.key, std::move(reason)});
      }
    }
    shard.samples = std::move(served);
  }
}

// Moves the samples of `scanned` that a dataset of `traits` serves to `shard`, and its
// skips with those of the samples it does not serve to `skipped`, in archive order;
// the class names of served samples go to `class_names` as (label, name).
void TakeServedSamples(ShardScanResult& scanned, const DatasetTraits& traits,
                       absl::string_view label_field, ShardInfo* shard,
                       std::vector<SkippedSample>* skipped,
                       std::vector<std::pair<int64_t, std::string>>* class_names) {
  // (A skip without a position, from a scan that gave none, goes after the samples.)
  const auto position = [&scanned](size_t skip) {
    return skip < scanned.skipped_before.size() ? scanned.skipped_before[skip]
                                                : scanned.samples.size();
  };
  size_t next_skip = 0;
  for (size_t i = 0; i <= scanned.samples.size(); ++i) {
    for (; next_skip < scanned.skipped.size() && position(next_skip) <= i; ++next_skip) {
      skipped->push_back(std::move(scanned.skipped[next_skip]));
    }
    if (i == scanned.samples.size()) break;
    SampleEntry& e = scanned.samples[i];
    if (std::string reason = DatasetRuleSkip(e, traits, label_field); !reason.empty()) {
      skipped->push_back(SkippedSample{shard->path, e.key, std::move(reason)});
      continue;
    }
    if (i < scanned.class_names.size() && !scanned.class_names[i].empty()) {
      class_names->emplace_back(e.label, std::move(scanned.class_names[i]));
    }
    shard->samples.push_back(std::move(e));
  }
}

// Indexing fails with a scan that failed for the store's or the host's fault.
absl::Status HostScanError(const std::string& root, const ShardInfo& shard,
                           const ShardScanResult& result) {
  return absl::Status(result.fatal.code(),
                      absl::StrCat("indexing ", root, ": shard ", shard.path,
                                   " could not be read: ", result.fatal.message(),
                                   "; nothing was cached (it is read again at the next start), "
                                   "and the dataset is not served with a shard missing"));
}

int ScanThreads(const IndexOptions& options, size_t shards) {
  const int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, std::min<int>(threads, static_cast<int>(shards)));
}

absl::StatusOr<ScanOutcome> ScanAll(const std::string& root, std::vector<ShardInfo> shards,
                                    const ShardListing& listing, const IndexOptions& options) {
  std::vector<ShardScanResult> results(shards.size());
  const int threads = ScanThreads(options, shards.size());
  std::atomic<size_t> next{0};
  // Set by the first host or store error: indexing fails with it, so the other
  // threads take no more shards (a bucket's worth of downloads for nothing).
  std::atomic<bool> host_failed{false};
  const auto stopping = [&] {
    return options.cancelled != nullptr && options.cancelled->load(std::memory_order_relaxed);
  };
  const auto worker = [&] {
    for (size_t i = next++; i < shards.size() && !stopping() && !host_failed; i = next++) {
      results[i] = listing.scan(shards[i]);
      if (results[i].host_error) host_failed = true;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  if (stopping()) return absl::CancelledError(absl::StrCat("indexing ", root, " was cancelled"));

  // The store's or the host's failure is no fact about the data: remembered as a skip,
  // the shard would stay missing after the store recovers. (The fetcher has retried
  // within its deadline already.)
  for (size_t i = 0; i < shards.size(); ++i) {
    if (results[i].host_error) return HostScanError(root, shards[i], results[i]);
  }

  ScanOutcome out;
  out.skip_reasons.resize(shards.size());
  DatasetTraits traits;
  for (const ShardScanResult& r : results) AddTraits(r.samples, &traits);
  std::map<int64_t, std::string> names;
  std::set<int64_t> warned_labels;  // one warning per label with conflicting names
  for (size_t i = 0; i < shards.size(); ++i) {
    ShardScanResult& r = results[i];
    shards[i].content_digest = r.content_digest;
    if (!r.fatal.ok()) {
      out.skip_reasons[i] = std::string(r.fatal.message());
      out.warnings.push_back(absl::StrCat("shard ", shards[i].path, " skipped: ", r.fatal.message(),
                                          "; serving the other shards"));
      continue;
    }
    shards[i].compressed = r.compressed;
    std::vector<std::pair<int64_t, std::string>> shard_names;
    TakeServedSamples(r, traits, options.label_field, &shards[i], &out.skipped, &shard_names);
    for (const SampleEntry& e : shards[i].samples) out.max_label = std::max(out.max_label, e.label);
    for (std::string& w : r.warnings) out.warnings.push_back(std::move(w));
    for (auto& [label, name] : shard_names) {
      auto [it, inserted] = names.emplace(label, name);
      if (!inserted && it->second != name && warned_labels.insert(label).second) {
        out.warnings.push_back(absl::StrCat("label ", label, " has class names '", it->second,
                                            "' and '", name, "' (in ", shards[i].path,
                                            "); keeping the first"));
      }
    }
  }
  if (!names.empty()) {
    out.class_names.resize(static_cast<size_t>(out.max_label + 1));
    for (auto& [label, name] : names) {
      out.class_names[static_cast<size_t>(label)] = name;
    }
  }
  out.shards = std::move(shards);
  return out;
}

// Scans `shards` on `IndexOptions::threads` threads and hands each result to `commit`
// in shard order, as soon as it and the shards before it are scanned: at most a few
// results per thread wait (a scan does not start further ahead of the next commit).
// A host error (HostScanError), a cancel or `commit`'s error stops the scan.
absl::Status ScanInOrder(const std::string& root, const std::vector<ShardInfo>& shards,
                         const ShardListing& listing, const IndexOptions& options,
                         const std::function<absl::Status(size_t, ShardScanResult)>& commit) {
  const int threads = ScanThreads(options, shards.size());
  const size_t window = 2 * static_cast<size_t>(threads);
  std::mutex mu;
  std::condition_variable cv;
  size_t next = 0, committed = 0;
  bool stop = false;
  absl::Status failed;
  std::map<size_t, ShardScanResult> waiting;
  const auto stopping = [&] {
    return options.cancelled != nullptr && options.cancelled->load(std::memory_order_relaxed);
  };
  const auto worker = [&] {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop && next < shards.size()) {
      const size_t i = next++;
      cv.wait(lock, [&] { return stop || i < committed + window; });
      if (stop) break;
      lock.unlock();
      ShardScanResult result = stopping() ? ShardScanResult{} : listing.scan(shards[i]);
      lock.lock();
      if (stopping() || result.host_error) {
        if (failed.ok() && result.host_error) failed = HostScanError(root, shards[i], result);
        stop = true;
        break;
      }
      waiting.emplace(i, std::move(result));
      for (auto it = waiting.find(committed); !stop && it != waiting.end();
           it = waiting.find(committed)) {
        ShardScanResult ready = std::move(it->second);
        waiting.erase(it);
        // Committed under the lock: in shard order, one at a time.
        if (absl::Status done = commit(committed, std::move(ready)); !done.ok()) {
          failed = done;
          stop = true;
        }
        ++committed;
      }
      cv.notify_all();
    }
    cv.notify_all();
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  if (stopping()) return absl::CancelledError(absl::StrCat("indexing ", root, " was cancelled"));
  return failed;
}

// Writes all of `data` to `fd`; the error names `path`.
// A temporary file in `dir` (mkstemp), unlinked at once: its descriptor, or -1.
int AnonymousFile(const std::string& dir) {
  std::string name = (fs::path(dir) / ".shardcast-index-tables.XXXXXX").string();
  const int fd = ::mkstemp(name.data());
  if (fd >= 0) ::unlink(name.c_str());
  return fd;
}

// The index cache written as the shards are scanned (IndexOptions::samples_on_disk), so
// that no shard's samples outlive its commit: each shard's served samples are encoded
// into its table at once and appended to an unlinked temporary file in the cache dir;
// what the header needs (records, skipped samples, class names, summary) is added up
// as it goes. Finish writes the header, copies the tables after it and renames the
// file into place: the same bytes as ScanAll + SerializeScanOutcome. Commits mirror
// ScanAll's merge, with the dataset rules (DatasetTraits) of the shards committed so
// far: when a later shard turns them (an image after shards without any), the samples
// already committed are ruled wrongly and Exact() is false: the caller scans again in
// memory.
class StreamedCache {
 public:
  StreamedCache(std::string path, std::string root, const IndexOptions& options,
                std::vector<ShardInfo> shards)
      : path_(std::move(path)), root_(std::move(root)), options_(options) {
    out_.shards = std::move(shards);
    out_.skip_reasons.resize(out_.shards.size());
    records_.resize(out_.shards.size());
  }
  ~StreamedCache() {
    if (tables_fd_ >= 0) ::close(tables_fd_);
  }

  absl::Status Open() {
    std::error_code ec;
    fs::create_directories(fs::path(path_).parent_path(), ec);
    tables_fd_ = ec ? -1 : AnonymousFile(fs::path(path_).parent_path().string());
    if (tables_fd_ < 0) {
      return absl::UnavailableError(absl::StrCat(
          path_, ": cannot create a temporary file: ", ec ? ec.message() : std::strerror(errno)));
    }
    return absl::OkStatus();
  }

  absl::Status Commit(size_t i, ShardScanResult r) {
    ShardInfo& shard = out_.shards[i];
    shard.content_digest = r.content_digest;
    if (!r.fatal.ok()) {
      out_.skip_reasons[i] = std::string(r.fatal.message());
      out_.warnings.push_back(absl::StrCat("shard ", shard.path, " skipped: ", r.fatal.message(),
                                           "; serving the other shards"));
    } else {
      shard.compressed = r.compressed;
      AddTraits(r.samples, &traits_);
      NoteUnruled(r.samples);
      std::vector<std::pair<int64_t, std::string>> shard_names;
      TakeServedSamples(r, traits_, options_.label_field, &shard, &out_.skipped, &shard_names);
      AddServed(shard.samples);
      for (std::string& w : r.warnings) out_.warnings.push_back(std::move(w));
      AddClassNames(shard.path, shard_names);
    }
    absl::StatusOr<std::string> table = EncodeCacheTable(root_, options_, i, shard, &exts_);
    std::vector<SampleEntry>().swap(shard.samples);
    if (!table.ok()) return table.status();
    records_[i] = CacheTableRecord{served_ - counted_, table->size()};
    counted_ = served_;
    tables_size_ += table->size();
    return WriteAll(tables_fd_, path_, *table);
  }

  // Whether the rules the commits applied are those of the whole dataset: no sample
  // was ruled on before an image (a label) turned up in a later shard.
  bool Exact() const {
    return !(traits_.has_images && unruled_image_) && !(traits_.has_labels && unruled_label_);
  }
  const std::set<int64_t>& labels() const { return labels_; }

  // Writes the cache file; the outcome as a header-only read of it gives it.
  absl::StatusOr<ScanOutcome> Finish(uint64_t* file_size) {
    if (!names_.empty()) {
      out_.class_names.resize(static_cast<size_t>(out_.max_label + 1));
      for (auto& [label, name] : names_) out_.class_names[static_cast<size_t>(label)] = name;
    }
    absl::StatusOr<std::string> fingerprint = Fingerprint();
    if (!fingerprint.ok()) return fingerprint.status();
    out_.fingerprint = *std::move(fingerprint);
    const std::string header =
        SerializeCacheHeader(root_, options_, out_, records_, summary_, exts_);
    absl::Status written = WriteFile(header);
    if (!written.ok()) return written;
    *file_size = header.size() + tables_size_ + kChecksumRecordBytes;
    out_.tables = LocateCacheTables(root_, options_, out_.shards, header.size(), records_);
    out_.exts = std::make_shared<const ExtensionTable>(exts_);
    out_.has_images = summary_.has_images;
    out_.has_labels = summary_.has_labels;
    out_.extension_counts = summary_.extension_counts;
    out_.largest_image_bytes = summary_.largest_image_bytes;
    return std::move(out_);
  }

 private:
  // Samples without an image (a label) in a dataset without any so far: a later shard
  // with one would have them skipped (or skipped for another reason).
  void NoteUnruled(const std::vector<SampleEntry>& samples) {
    for (const SampleEntry& e : samples) {
      unruled_image_ = unruled_image_ || (!traits_.has_images && ImageMember(e) == nullptr);
      unruled_label_ = unruled_label_ || (!traits_.has_labels && e.label < 0);
    }
  }

  void AddServed(const std::vector<SampleEntry>& samples) {
    for (const SampleEntry& e : samples) {
      out_.max_label = std::max(out_.max_label, e.label);
      if (e.label >= 0) labels_.insert(e.label);
    }
    summary_.Add(samples);
    served_ += samples.size();
  }

  void AddClassNames(const std::string& shard,
                     std::vector<std::pair<int64_t, std::string>>& shard_names) {
    for (auto& [label, name] : shard_names) {
      auto [it, inserted] = names_.emplace(label, name);
      if (!inserted && it->second != name && warned_labels_.insert(label).second) {
        out_.warnings.push_back(absl::StrCat("label ", label, " has class names '", it->second,
                                             "' and '", name, "' (in ", shard,
                                             "); keeping the first"));
      }
    }
  }

  // Shard i's table, read back from the temporary file.
  absl::StatusOr<std::string> Table(size_t i, uint64_t offset) const {
    return ReadTable(tables_fd_, path_, offset, records_[i].size);
  }

  // ContentFingerprint of the served shards, their samples read back table by table
  // (the served count leads the digest: known only once every shard is scanned).
  absl::StatusOr<std::string> Fingerprint() const {
    FingerprintDigest h(options_, ServedShards(out_));
    const std::vector<ShardTableLocation> located =
        LocateCacheTables(root_, options_, out_.shards, 0, records_);
    for (size_t i = 0; i < out_.shards.size(); ++i) {
      if (!out_.skip_reasons[i].empty()) continue;
      absl::StatusOr<std::string> bytes = Table(i, located[i].offset);
      if (!bytes.ok()) return bytes.status();
      absl::StatusOr<CompactShardTable> table =
          CompactShardTable::Open(*bytes, &exts_, located[i].limits);
      if (!table.ok()) return table.status();
      std::vector<SampleEntry> samples(table->size());
      absl::Status decoded =
          table->ForEach([&](uint32_t j, const SampleEntry& e) { samples[j] = e; });
      if (!decoded.ok()) return decoded;
      h.AddShard(out_.shards[i], samples);
    }
    return h.Hex();
  }

  // The cache file: `header`, the tables, the checksum of it all; renamed into place.
  absl::Status WriteFile(const std::string& header) const {
    return WriteFileAtomically(
        path_, [&](int fd, const std::string& tmp) { return CopyInto(fd, tmp, header); });
  }

  absl::Status CopyInto(int fd, const std::string& tmp, const std::string& header) const {
    Digest128 h;
    h.AddBytes(header);
    absl::Status written = WriteAll(fd, tmp, header);
    constexpr uint64_t kChunk = 1 << 20;
    for (uint64_t at = 0; written.ok() && at < tables_size_; at += kChunk) {
      absl::StatusOr<std::string> chunk =
          ReadTable(tables_fd_, path_, at, std::min(kChunk, tables_size_ - at));
      if (!chunk.ok()) return chunk.status();
      h.AddBytes(*chunk);
      written = WriteAll(fd, tmp, *chunk);
    }
    const std::string sum = h.Hex();
    if (written.ok()) written = WriteAll(fd, tmp, EncodeU64(sum.size()) + sum);
    return written;
  }

  static absl::StatusOr<std::string> ReadTable(int fd, const std::string& path, uint64_t offset,
                                               uint64_t size) {
    std::string out(size, '\0');
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::pread(fd, out.data() + done, size - done, offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return HostIoError(path, "read its temporary tables", n < 0 ? errno : EIO);
      done += static_cast<size_t>(n);
    }
    return out;
  }

  const std::string path_;
  const std::string root_;
  const IndexOptions& options_;
  ScanOutcome out_;
  std::vector<CacheTableRecord> records_;
  ExtensionTable exts_;
  SampleSummary summary_;
  DatasetTraits traits_;
  bool unruled_image_ = false;
  bool unruled_label_ = false;
  uint64_t served_ = 0, counted_ = 0;
  std::map<int64_t, std::string> names_;
  std::set<int64_t> warned_labels_;
  std::set<int64_t> labels_;
  int tables_fd_ = -1;
  uint64_t tables_size_ = 0;
};

// The outcome of scanning every shard of `listing` straight into the index cache at
// `path` (StreamedCache), its size in `*file_size` and the distinct labels served in
// `*labels`; nullopt when it could not be (a cache that cannot be written, rules turned
// by a late shard): the caller then scans in memory as without samples on disk. Errors:
// a host error or a cancel, as ScanAll.
absl::StatusOr<std::optional<ScanOutcome>> ScanIntoCache(const std::string& path,
                                                         const ShardListing& listing,
                                                         const IndexOptions& options,
                                                         uint64_t* file_size,
                                                         std::set<int64_t>* labels) {
  StreamedCache cache(path, listing.root, options, listing.shards);
  if (!cache.Open().ok()) return std::nullopt;
  bool commit_failed = false;
  absl::Status scanned =
      ScanInOrder(listing.root, listing.shards, listing, options, [&](size_t i, ShardScanResult r) {
        absl::Status done = cache.Commit(i, std::move(r));
        commit_failed = !done.ok();
        return done;
      });
  if (commit_failed) return std::nullopt;
  if (!scanned.ok()) return scanned;
  if (!cache.Exact()) return std::nullopt;
  absl::StatusOr<ScanOutcome> out = cache.Finish(file_size);
  if (!out.ok()) return std::nullopt;
  *labels = cache.labels();
  return std::optional<ScanOutcome>(*std::move(out));
}

// info.json (or another top-level *.json with "dataset size" / "num_classes"): the
// seed's description of the data. The scan is the truth; disagreement is a warning.
void CheckInfoJson(const std::string& root, int64_t max_label, int32_t max_classes,
                   DatasetIndex* index) {
  std::vector<fs::path> candidates;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (it->path().extension() == ".json") candidates.push_back(it->path());
  }
  std::sort(candidates.begin(), candidates.end(), [](const fs::path& a, const fs::path& b) {
    if ((a.filename() == "info.json") != (b.filename() == "info.json")) {
      return a.filename() == "info.json";
    }
    return a < b;
  });
  const int64_t scanned_classes = max_label + 1;
  index->num_classes = static_cast<int32_t>(scanned_classes);
  for (const fs::path& path : candidates) {
    absl::StatusOr<std::string> text = ReadRegularFile(path.string(), 16 << 20);
    if (!text.ok()) {
      if (path.filename() == "info.json") {
        Warn(&index->warnings, absl::StrCat(path.string(), ": ignored: ", text.status().message()));
      }
      continue;
    }
    absl::StatusOr<std::map<std::string, JsonValue>> fields = ParseJsonObjectFields(*text);
    if (!fields.ok()) {
      if (path.filename() == "info.json") {
        Warn(&index->warnings,
             absl::StrCat(path.string(), ": ignored: ", fields.status().message()));
      }
      continue;
    }
    const auto size_it = fields->find("dataset size");
    const auto classes_it = fields->find("num_classes");
    if (size_it == fields->end() && classes_it == fields->end()) continue;
    const std::string name = path.filename().string();
    if (size_it != fields->end()) {
      if (size_it->second.kind != JsonValue::Kind::kInteger) {
        Warn(&index->warnings, absl::StrCat(name, ": \"dataset size\" is not an integer"));
      } else if (size_it->second.integer != index->num_samples) {
        Warn(&index->warnings,
             absl::StrCat(name, " says \"dataset size\" ", size_it->second.integer,
                          " but the scan found ", index->num_samples, " usable samples"));
      }
    }
    if (classes_it != fields->end()) {
      if (classes_it->second.kind != JsonValue::Kind::kInteger ||
          classes_it->second.integer > std::numeric_limits<int32_t>::max()) {
        Warn(&index->warnings, absl::StrCat(name, ": \"num_classes\" is not a usable integer"));
      } else if (classes_it->second.integer > max_classes) {
        Warn(&index->warnings,
             absl::StrCat(name, " says \"num_classes\" ", classes_it->second.integer,
                          ", above --max-classes ", max_classes, "; using ", scanned_classes,
                          " from the labels"));
      } else if (max_label < 0 && classes_it->second.integer > 0) {
        // Served as a dataset without labels: a class count would size a classifier for
        // labels no sample carries.
        Warn(&index->warnings,
             absl::StrCat(name, " says \"num_classes\" ", classes_it->second.integer,
                          " but no sample has a label; serving num_classes 0 (labels -1)"));
      } else if (classes_it->second.integer < scanned_classes) {
        Warn(&index->warnings,
             absl::StrCat(name, " says \"num_classes\" ", classes_it->second.integer,
                          " but the scan found label ", max_label, "; using ", scanned_classes));
      } else {
        index->num_classes = static_cast<int32_t>(classes_it->second.integer);
      }
    }
    return;  // the first describing file wins (info.json first)
  }
}

// The labels the served samples carry: how many distinct ones, and the largest.
struct LabelSpread {
  int64_t distinct = 0;
  int64_t max_label = -1;
};

// Of the samples in memory, those below `num_classes` (all: it is bounded by the scan).
LabelSpread LabelSpreadOf(const DatasetIndex& index) {
  LabelSpread spread;
  if (index.num_classes <= 0) return spread;
  std::vector<bool> seen(static_cast<size_t>(index.num_classes), false);
  for (const ShardInfo& shard : index.shards) {
    for (const SampleEntry& e : shard.samples) {
      if (e.label < 0 || e.label >= index.num_classes) continue;  // bounded by the scan
      spread.max_label = std::max(spread.max_label, e.label);
      if (!seen[static_cast<size_t>(e.label)]) {
        seen[static_cast<size_t>(e.label)] = true;
        ++spread.distinct;
      }
    }
  }
  return spread;
}

// num_classes sizes the trainer's last layer: far more classes than distinct labels
// usually means one stray label or a wrong info.json, so it is worth a warning.
void WarnIfClassesSparse(const LabelSpread& spread, DatasetIndex* index) {
  if (index->num_classes <= 0) return;
  const int64_t distinct = spread.distinct;
  if (index->num_classes > 2 * distinct && index->num_classes - distinct >= kSparseClassesMinGap) {
    Warn(&index->warnings,
         absl::StrCat("num_classes is ", index->num_classes, " but only ", distinct,
                      " distinct labels occur (largest ", spread.max_label,
                      "): the model gets an output per class; check for a stray label or "
                      "info.json's \"num_classes\""));
  }
}

}  // namespace

uint64_t MaxIndexFileBytes(const std::vector<ShardInfo>& shards) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  const auto add = [](uint64_t a, uint64_t b) { return a > kMax - b ? kMax : a + b; };
  uint64_t bytes = uint64_t{1} << 20;
  for (const ShardInfo& s : shards) {
    const uint64_t factor = s.compressed ? 64 : 2;
    bytes = add(bytes, add(4096, s.file_size > kMax / factor ? kMax : s.file_size * factor));
  }
  return bytes;
}

void SetShardIdentity(const struct stat& st, ShardInfo* shard) {
  shard->file_size = static_cast<uint64_t>(st.st_size);
  shard->mtime_ns = Nanos(st.st_mtim);
  shard->ctime_ns = Nanos(st.st_ctim);
  shard->inode = static_cast<uint64_t>(st.st_ino);
  shard->device = static_cast<uint64_t>(st.st_dev);
}

std::string ShardChange(const ShardInfo& shard, const struct stat& st) {
  ShardInfo now;
  SetShardIdentity(st, &now);
  std::vector<std::string> changes;
  if (now.file_size != shard.file_size) {
    changes.push_back(absl::StrCat("size ", shard.file_size, " -> ", now.file_size, " bytes"));
  }
  if (now.mtime_ns != shard.mtime_ns) {
    changes.push_back(
        absl::StrCat("mtime ", FormatNanos(shard.mtime_ns), " -> ", FormatNanos(now.mtime_ns)));
  }
  if (now.ctime_ns != shard.ctime_ns) {
    changes.push_back(
        absl::StrCat("ctime ", FormatNanos(shard.ctime_ns), " -> ", FormatNanos(now.ctime_ns)));
  }
  if (now.inode != shard.inode || now.device != shard.device) {
    changes.push_back(absl::StrCat("inode ", shard.device, ":", shard.inode, " -> ", now.device,
                                   ":", now.inode, " (replaced)"));
  }
  return absl::StrJoin(changes, ", ");
}

absl::StatusOr<DatasetIndex> BuildDatasetIndex(const std::string& dir,
                                               const IndexOptions& options) {
  std::error_code ec;
  const fs::path root_path = fs::canonical(dir, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(dir, ": ", ec.message()));
  if (!fs::is_directory(root_path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": not a directory"));
  }
  ShardListing listing;
  listing.root = root_path.string();
  listing.local = true;
  absl::StatusOr<std::vector<ShardInfo>> listed = ListShards(listing.root, &listing.unlisted);
  if (!listed.ok()) return listed.status();
  if (listed->empty() && listing.unlisted.empty()) {
    return absl::NotFoundError(absl::StrCat(
        listing.root, ": no shard (*.tar, *.tar.gz, *.tgz) directly in this directory"));
  }
  listing.shards = *std::move(listed);
  listing.scan = [root = listing.root, &options](const ShardInfo& shard) {
    return ScanShardFile((fs::path(root) / shard.path).string(), shard, options,
                         /*check_identity=*/true);
  };
  return BuildIndexFromListing(std::move(listing), options);
}

namespace {

// The cache path for `listing`, "" for none; an error for a cache inside a local
// dataset directory.
absl::StatusOr<std::string> CachePathFor(const ShardListing& listing, const IndexOptions& options) {
  if (options.cache_dir.empty()) return std::string();
  std::error_code ec;
  const fs::path cache_dir = fs::weakly_canonical(fs::absolute(options.cache_dir), ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache dir ", options.cache_dir, ": ", ec.message()));
  }
  const std::string cache_str = cache_dir.string();
  if (listing.local &&
      (cache_str == listing.root || absl::StartsWith(cache_str, listing.root + "/"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache dir ", options.cache_dir, " is inside the dataset directory ", listing.root,
        "; put the index cache elsewhere (the dataset may be read-only or shared)"));
  }
  return CachePath(cache_str, listing.root);
}

// A shard as an index file records it: name, size, compression, content digest and
// the ETag it had in a store; no file identity (mtime, inode).
ShardInfo IndexFileRecord(const ShardInfo& shard) {
  ShardInfo bare;
  bare.path = shard.path;
  bare.file_size = shard.file_size;
  bare.compressed = shard.compressed;
  bare.etag = shard.etag;
  bare.content_digest = shard.content_digest;
  return bare;
}

// Whether the store's word on `listed` (its ETag) vouches for the index file's record
// of it: the ETag is a single-part upload's MD5 equal to the recorded digest, or the
// very ETag recorded when the file was made from this store. Names and sizes alone
// vouch for nothing: a shard rewritten in place with the same size keeps both.
bool Vouched(const ShardInfo& listed, const ShardInfo& recorded) {
  if (listed.etag.empty()) return false;
  if (!recorded.etag.empty() && recorded.etag == listed.etag) return true;
  const std::string md5 = EtagContentDigest(listed.etag);
  return !md5.empty() && md5 == recorded.content_digest;
}

// `scan` from the index file next to the shards, when it is an index of exactly the
// listed names and sizes (a warning says why not otherwise); `*vouched` says which
// shards' records the store vouches for: only those are used, with the listing's
// identities (the others are to be scanned).
bool LoadIndexFile(const ShardListing& listing, const IndexOptions& options, ScanOutcome* scan,
                   std::vector<bool>* vouched, std::vector<std::string>* warnings) {
  absl::StatusOr<std::optional<ScanOutcome>> parsed = ParseScanOutcome(
      *listing.index_file, /*root=*/"", options, listing.shards, IndexRecordKind::kIndexFile);
  if (parsed.ok() && parsed->has_value()) {
    *scan = **std::move(parsed);
    vouched->assign(scan->shards.size(), false);
    for (size_t i = 0; i < scan->shards.size(); ++i) {
      if (!Vouched(listing.shards[i], scan->shards[i])) continue;
      (*vouched)[i] = true;
      std::vector<SampleEntry> samples = std::move(scan->shards[i].samples);
      const std::string digest = scan->shards[i].content_digest;
      scan->shards[i] = listing.shards[i];
      scan->shards[i].samples = std::move(samples);
      scan->shards[i].content_digest = digest;
    }
    return true;
  }
  Warn(warnings, absl::StrCat(listing.root, kIndexFileName, ": ignored (",
                              parsed.ok() ? "it indexes other shards, another label field or "
                                            "another version"
                                          : parsed.status().message(),
                              "); scanning the shards"));
  return false;
}

// The index file's outcome where `vouched`, `scanned` (the scan of the other shards,
// in listing order) elsewhere, as one outcome in listing order.
ScanOutcome MergeOutcomes(ScanOutcome from_file, const std::vector<bool>& vouched,
                          ScanOutcome scanned, absl::string_view label_field) {
  ScanOutcome out;
  std::map<std::string, size_t> position;  // shard path -> listing index
  std::set<std::string> rescanned;
  size_t next_scanned = 0;
  for (size_t i = 0; i < from_file.shards.size(); ++i) {
    position[from_file.shards[i].path] = i;
    if (vouched[i]) {
      out.shards.push_back(std::move(from_file.shards[i]));
      out.skip_reasons.push_back(std::move(from_file.skip_reasons[i]));
    } else {
      rescanned.insert(from_file.shards[i].path);
      out.shards.push_back(std::move(scanned.shards[next_scanned]));
      out.skip_reasons.push_back(std::move(scanned.skip_reasons[next_scanned]));
      ++next_scanned;
    }
  }
  for (SkippedSample& s : from_file.skipped) {
    if (rescanned.count(s.shard) == 0) out.skipped.push_back(std::move(s));
  }
  for (SkippedSample& s : scanned.skipped) out.skipped.push_back(std::move(s));
  // The file's shards and the scanned ones were each ruled over themselves only.
  ApplyDatasetRules(label_field, &out);
  std::stable_sort(out.skipped.begin(), out.skipped.end(),
                   [&](const SkippedSample& a, const SkippedSample& b) {
                     return position[a.shard] < position[b.shard];
                   });
  for (const ShardInfo& shard : out.shards) {
    for (const SampleEntry& e : shard.samples) out.max_label = std::max(out.max_label, e.label);
  }
  // The file's names first; a scanned shard's fill the labels the file did not name.
  out.class_names = std::move(from_file.class_names);
  for (size_t label = 0; label < scanned.class_names.size(); ++label) {
    if (scanned.class_names[label].empty()) continue;
    if (out.class_names.size() <= label) out.class_names.resize(label + 1);
    if (out.class_names[label].empty()) out.class_names[label] = scanned.class_names[label];
  }
  if (!out.class_names.empty()) {
    out.class_names.resize(static_cast<size_t>(out.max_label + 1));
  }
  out.warnings = std::move(from_file.warnings);
  for (std::string& w : scanned.warnings) out.warnings.push_back(std::move(w));
  return out;
}

// `size` bytes of `fd` at `offset`, or the error naming `path`.
absl::StatusOr<std::string> ReadAt(int fd, const std::string& path, uint64_t offset,
                                   uint64_t size) {
  std::string out(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, out.data() + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return HostIoError(path, "read", errno);
    if (n == 0) return absl::DataLossError(absl::StrCat(path, ": shorter than its header says"));
    done += static_cast<size_t>(n);
  }
  return out;
}

// The index cache at `path` read header only (ParseDepth::kHeader): its first bytes, up
// to the header's size, not the tables after them; `*file_size` the file's size.
absl::StatusOr<std::optional<ScanOutcome>> ReadCacheHeader(const std::string& path,
                                                           const ShardListing& listing,
                                                           const IndexOptions& options,
                                                           uint64_t* file_size) {
  // O_NONBLOCK: a FIFO planted at the cache's name must not hang the start.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return HostIoError(path, "open", errno);
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) return HostIoError(path, "stat", errno);
  if (!S_ISREG(st.st_mode)) return absl::FailedPreconditionError("not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > static_cast<uint64_t>(MaxCacheBytes(listing.shards))) {
    return absl::FailedPreconditionError(absl::StrCat(size,
                                                      " bytes, more than an index of "
                                                      "these shards can take"));
  }
  *file_size = size;
  // The magic (8 + 8 bytes), the version and the header's size: 32 bytes.
  absl::StatusOr<std::string> start = ReadAt(fd, path, 0, std::min<uint64_t>(size, 32));
  if (!start.ok()) return start.status();
  uint64_t version = 0, head_size = 0;
  for (int i = 0; i < 8 && start->size() == 32; ++i) {
    version |= uint64_t{static_cast<unsigned char>((*start)[16 + i])} << (8 * i);
    head_size |= uint64_t{static_cast<unsigned char>((*start)[24 + i])} << (8 * i);
  }
  // Another version, or too short to say: the parser says which (stale or corrupt).
  if (version != kIndexVersion || head_size < 32 || head_size > size) {
    return ParseScanOutcome(*start, listing.root, options, listing.shards, IndexRecordKind::kCache,
                            ParseDepth::kHeader, size);
  }
  absl::StatusOr<std::string> head = ReadAt(fd, path, 0, head_size);
  if (!head.ok()) return head.status();
  return ParseScanOutcome(*head, listing.root, options, listing.shards, IndexRecordKind::kCache,
                          ParseDepth::kHeader, size);
}

// The outcome the index cache at `path` ("" for none) holds for `listing`, or nullopt
// when there is none or it is stale; a cache that cannot be read or is corrupt is
// warned about and rebuilt.
std::optional<ScanOutcome> LoadCache(const std::string& path, const ShardListing& listing,
                                     const IndexOptions& options, ParseDepth depth,
                                     uint64_t* file_size, std::vector<std::string>* warnings) {
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return std::nullopt;
  absl::StatusOr<std::optional<ScanOutcome>> parsed;
  if (depth == ParseDepth::kHeader) {
    parsed = ReadCacheHeader(path, listing, options, file_size);
  } else {
    absl::StatusOr<std::string> data = ReadRegularFile(path, MaxCacheBytes(listing.shards));
    parsed = data.ok() ? ParseScanOutcome(*data, listing.root, options, listing.shards,
                                          IndexRecordKind::kCache, depth)
                       : data.status();
    if (data.ok()) *file_size = data->size();
  }
  if (!parsed.ok()) {
    Warn(warnings,
         absl::StrCat(path, ": ignored (", parsed.status().message(), "); rebuilding the index"));
    return std::nullopt;
  }
  return *std::move(parsed);
}

// Writes `scan` as the index cache at `path`, its folder created; a cache that cannot
// be written is warned about (the index is served without one).
// Its size written, nullopt when it was not; `tables` gets where its tables lie.
std::optional<uint64_t> WriteCache(const std::string& path, const std::string& root,
                                   const IndexOptions& options, const ScanOutcome& scan,
                                   ScanOutcome* tables, std::vector<std::string>* warnings) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  absl::StatusOr<std::string> data = SerializeScanOutcome(root, options, scan, tables);
  absl::Status written = ec           ? absl::UnavailableError(ec.message())
                         : !data.ok() ? data.status()
                                      : WriteCacheFile(path, *data);
  if (!written.ok()) {
    Warn(warnings, absl::StrCat("index cache not written: ", written.message()));
    return std::nullopt;
  }
  return data->size();
}

// The outcome of `listing` from its index file: the file's records where the store
// vouches for them, the other shards scanned; nullopt (warned) when the file is of no
// use, so that every shard is scanned. Sets `index->loaded_from_index_file`, and
// warns in `index`.
absl::StatusOr<std::optional<ScanOutcome>> OutcomeFromIndexFile(const ShardListing& listing,
                                                                const IndexOptions& options,
                                                                DatasetIndex* index) {
  ScanOutcome from_file;
  std::vector<bool> vouched;
  if (!LoadIndexFile(listing, options, &from_file, &vouched, &index->warnings)) {
    return std::nullopt;
  }
  std::vector<ShardInfo> unvouched;
  for (size_t i = 0; i < vouched.size(); ++i) {
    if (!vouched[i]) unvouched.push_back(listing.shards[i]);
  }
  const std::string& root = listing.root;
  index->loaded_from_index_file = unvouched.size() < listing.shards.size();
  if (unvouched.empty()) return std::optional<ScanOutcome>(std::move(from_file));
  const std::string first_etag = unvouched[0].etag.empty() ? "none" : unvouched[0].etag;
  if (!index->loaded_from_index_file) {
    Warn(&index->warnings,
         absl::StrCat(root, kIndexFileName, ": no shard's ETag vouches for its record (",
                      unvouched[0].path, ": ETag ", first_etag, "); scanning the shards"));
    return std::nullopt;
  }
  Warn(&index->warnings,
       absl::StrCat(root, kIndexFileName, ": ", unvouched.size(), " of ", listing.shards.size(),
                    " shard(s) are not vouched for by their ETag (", unvouched[0].path, ": ETag ",
                    first_etag, "); scanning those, using the file for the others"));
  absl::StatusOr<ScanOutcome> scanned = ScanAll(root, unvouched, listing, options);
  if (!scanned.ok()) return scanned.status();
  return MergeOutcomes(std::move(from_file), vouched, *std::move(scanned), options.label_field);
}

// An index file's shard `i` (located by a header-only parse, `from_file`) decoded from
// the file's bytes into `*samples`; DATA_LOSS for a table that fails its checks, a
// skipped shard's (empty) table included, as a full parse checks every table.
absl::Status IndexFileSamples(const std::string& file, const ScanOutcome& from_file, size_t i,
                              std::vector<SampleEntry>* samples) {
  samples->clear();
  const ShardTableLocation& at = from_file.tables[i];
  if (at.offset > file.size() || at.size > file.size() - at.offset) {
    return absl::DataLossError("a shard table lies past the index file's end");
  }
  absl::StatusOr<CompactShardTable> table = CompactShardTable::Open(
      absl::string_view(file).substr(at.offset, at.size), from_file.exts.get(), at.limits);
  if (!table.ok()) return table.status();
  if (!from_file.skip_reasons[i].empty()) {
    return table->size() == 0 ? absl::OkStatus()
                              : absl::DataLossError("a skipped shard with samples");
  }
  return table->ForEach([&](uint32_t, const SampleEntry& e) { samples->push_back(e); });
}

// The outcome of `listing` from an index file the store vouches for shard by shard,
// when the samples stay on disk: each shard's table is decoded from the file and
// written again into the index cache at `path` (the cache's tables are bound to its
// header and the listed identities) one shard at a time, so the whole dataset's samples
// are never in memory; the outcome is then the cache's header, read back as a start
// would, `*file_size` its size and `*labels` the distinct labels served. nullopt when
// this does not apply (a file that does not parse, a shard the store does not vouch
// for, a table that fails its checks, a cache that cannot be written): the caller then
// goes the in-memory way, which says why in a warning.
std::optional<ScanOutcome> IndexFileIntoCache(const std::string& path, const ShardListing& listing,
                                              const IndexOptions& options, uint64_t* file_size,
                                              std::set<int64_t>* labels, DatasetIndex* index) {
  const std::string& file = *listing.index_file;
  absl::StatusOr<std::optional<ScanOutcome>> parsed = ParseScanOutcome(
      file, /*root=*/"", options, listing.shards, IndexRecordKind::kIndexFile, ParseDepth::kHeader);
  if (!parsed.ok() || !parsed->has_value()) return std::nullopt;
  const ScanOutcome& from_file = **parsed;
  ScanOutcome scan;
  for (size_t i = 0; i < listing.shards.size(); ++i) {
    if (!Vouched(listing.shards[i], from_file.shards[i])) return std::nullopt;
    scan.shards.push_back(listing.shards[i]);
    scan.shards.back().content_digest = from_file.shards[i].content_digest;
  }
  scan.skip_reasons = from_file.skip_reasons;
  scan.skipped = from_file.skipped;
  scan.class_names = from_file.class_names;
  scan.warnings = from_file.warnings;
  auto samples_of = [&](size_t i, std::vector<SampleEntry>* samples) {
    return IndexFileSamples(file, from_file, i, samples);
  };
  // What the header takes from the samples, taken from them (not from the file's
  // header), and the dataset rules a full parse checks: all samples alike.
  FingerprintDigest fingerprint(options, ServedShards(scan));
  DatasetTraits traits;
  bool without_image = false, without_label = false;
  std::vector<SampleEntry> samples;
  for (size_t i = 0; i < scan.shards.size(); ++i) {
    if (!samples_of(i, &samples).ok()) return std::nullopt;
    if (!scan.skip_reasons[i].empty()) continue;
    fingerprint.AddShard(scan.shards[i], samples);
    AddTraits(samples, &traits);
    for (const SampleEntry& e : samples) {
      scan.max_label = std::max(scan.max_label, e.label);
      if (e.label >= 0) labels->insert(e.label);
      without_image = without_image || ImageMember(e) == nullptr;
      without_label = without_label || e.label < 0;
    }
  }
  if ((traits.has_images && without_image) || (traits.has_labels && without_label)) {
    return std::nullopt;
  }
  scan.fingerprint = fingerprint.Hex();
  if (!scan.class_names.empty()) scan.class_names.resize(static_cast<size_t>(scan.max_label + 1));
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const absl::Status written =
      ec ? absl::UnavailableError(ec.message())
         : WriteFileAtomically(path, [&](int fd, const std::string& tmp) {
             return WriteScanOutcome(
                 listing.root, options, scan, samples_of,
                 [&](absl::string_view piece) { return WriteAll(fd, tmp, piece); });
           });
  if (!written.ok()) return std::nullopt;
  std::optional<ScanOutcome> cached =
      LoadCache(path, listing, options, ParseDepth::kHeader, file_size, &index->warnings);
  if (cached.has_value()) index->loaded_from_index_file = true;
  return cached;
}

// The name of the first shard listed twice in `sorted`, "" when none is.
std::string FirstDuplicate(const std::vector<ShardInfo>& sorted) {
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].path == sorted[i - 1].path) return sorted[i].path;
  }
  return "";
}

// Sorts the listing's shards in natural order; DATA_LOSS when one is listed twice.
absl::Status SortShardsListedOnce(ShardListing* listing) {
  std::sort(listing->shards.begin(), listing->shards.end(),
            [](const ShardInfo& a, const ShardInfo& b) { return NaturalLess(a.path, b.path); });
  // Samples served twice an epoch otherwise (a store whose listing repeats a key).
  if (const std::string twice = FirstDuplicate(listing->shards); !twice.empty()) {
    return absl::DataLossError(absl::StrCat("listing ", listing->root, ": shard ", twice,
                                            " is listed twice; the listing is not consistent"));
  }
  return absl::OkStatus();
}

// The scan an index is built from, and how it was got.
struct ObtainedScan {
  std::optional<ScanOutcome> scan;
  ParseDepth depth = ParseDepth::kFull;  // how much of the cache was (or is to be) read
  uint64_t cache_size = 0;
  // The labels seen as the samples were streamed into the cache; unset when they were not.
  std::optional<std::set<int64_t>> streamed_labels;
};

// Reads the index cache (its header alone where the samples stay on disk) into `got`;
// `got->scan` stays empty when there is no cache of use.
void ReadCacheAtDepth(const std::string& cache_path, const ShardListing& listing,
                      const IndexOptions& options, ObtainedScan* got,
                      std::vector<std::string>* warnings) {
  // A server that reads samples from the cache as it serves them reads its header
  // alone: time and memory that grow with the shards, not the samples.
  got->depth = options.samples_on_disk ? ParseDepth::kHeader : ParseDepth::kFull;
  got->scan = LoadCache(cache_path, listing, options, got->depth, &got->cache_size, warnings);
  if (got->scan.has_value() && got->depth == ParseDepth::kHeader &&
      got->scan->fingerprint.empty()) {
    got->depth = ParseDepth::kFull;  // a header without the fingerprint: read it all
    got->scan = LoadCache(cache_path, listing, options, got->depth, &got->cache_size, warnings);
  }
}

// Drops the listing's index file when it is larger than an index of its shards can be
// (warned): the shards are scanned instead.
void DropOversizedIndexFile(ShardListing* listing, std::vector<std::string>* warnings) {
  if (listing->index_file.has_value() &&
      listing->index_file->size() > MaxIndexFileBytes(listing->shards)) {
    Warn(warnings,
         absl::StrCat(listing->root, kIndexFileName, ": ignored (", listing->index_file->size(),
                      " bytes, more than an index of these shards can take); scanning the shards"));
    listing->index_file.reset();
  }
}

// Fills `got->scan` where the cache did not: from the index file, else streamed into
// the cache, else by scanning every shard.
absl::Status ScanWhatTheCacheLacks(const std::string& cache_path, const ShardListing& listing,
                                   const IndexOptions& options, ObtainedScan* got,
                                   DatasetIndex* index) {
  if (!got->scan.has_value() && listing.index_file.has_value() &&
      got->depth == ParseDepth::kHeader && !cache_path.empty()) {
    std::set<int64_t> labels;
    got->scan = IndexFileIntoCache(cache_path, listing, options, &got->cache_size, &labels, index);
    if (got->scan.has_value()) got->streamed_labels = std::move(labels);
  }
  if (!got->scan.has_value() && listing.index_file.has_value()) {
    absl::StatusOr<std::optional<ScanOutcome>> from_file =
        OutcomeFromIndexFile(listing, options, index);
    if (!from_file.ok()) return from_file.status();
    got->scan = *std::move(from_file);
  }
  // Samples on disk: each shard's samples go to its table in the cache as it is
  // scanned, never all of them in memory at once.
  if (!got->scan.has_value() && got->depth == ParseDepth::kHeader && !cache_path.empty()) {
    std::set<int64_t> labels;
    absl::StatusOr<std::optional<ScanOutcome>> streamed =
        ScanIntoCache(cache_path, listing, options, &got->cache_size, &labels);
    if (!streamed.ok()) return streamed.status();
    if (streamed->has_value()) got->streamed_labels = std::move(labels);
    got->scan = *std::move(streamed);
  }
  if (!got->scan.has_value()) {
    absl::StatusOr<ScanOutcome> scanned = ScanAll(listing.root, listing.shards, listing, options);
    if (!scanned.ok()) return scanned.status();
    got->scan = *std::move(scanned);
  }
  return absl::OkStatus();
}

// Opens the cache's tables that `located` places into `index->tables`, one for each
// shard of `scan` not skipped; false when `located` is not of `scan` or the cache
// cannot be opened.
bool OpenCacheTables(const std::string& cache_path, uint64_t cache_size, const ScanOutcome& scan,
                     const ScanOutcome& located, DatasetIndex* index) {
  if (located.tables.size() != scan.shards.size()) return false;
  auto opened = std::make_shared<IndexTables>();
  // A cache replaced between the read (or write) and this open is not used: the
  // samples then stay in memory.
  if (!opened->Open(cache_path, cache_size).ok()) return false;
  for (size_t i = 0; i < scan.shards.size(); ++i) {
    if (scan.skip_reasons[i].empty()) opened->shards.push_back(located.tables[i]);
  }
  opened->exts = located.exts;
  index->tables = std::move(opened);
  return true;
}

// Writes the cache for a scan that did not come from it, and opens the cache's tables;
// UNAVAILABLE when a header-only read must read the cache whole and it has changed.
absl::Status WriteCacheAndOpenTables(const std::string& cache_path, const ShardListing& listing,
                                     const IndexOptions& options, ObtainedScan* got,
                                     DatasetIndex* index) {
  // Where the tables lie in the cache file, by the scan's shard: as read, or as written.
  ScanOutcome written_tables;
  const bool streamed = got->streamed_labels.has_value();
  const ScanOutcome* tables = index->loaded_from_cache || streamed ? &*got->scan : nullptr;
  if (!index->loaded_from_cache && !streamed && !cache_path.empty()) {
    // Kept in the cache for a reader of its header alone.
    got->scan->fingerprint = ContentFingerprint(*got->scan, options);
    if (std::optional<uint64_t> size = WriteCache(cache_path, listing.root, options, *got->scan,
                                                  &written_tables, &index->warnings);
        size.has_value()) {
      got->cache_size = *size;
      tables = &written_tables;
    }
  }
  if (tables != nullptr &&
      !OpenCacheTables(cache_path, got->cache_size, *got->scan, *tables, index) &&
      got->depth == ParseDepth::kHeader) {
    // The samples must then come from the cache read whole.
    got->depth = ParseDepth::kFull;
    got->scan =
        LoadCache(cache_path, listing, options, got->depth, &got->cache_size, &index->warnings);
    if (!got->scan.has_value()) {
      return absl::UnavailableError(
          absl::StrCat(cache_path, ": the index cache changed while it was read; start again"));
    }
    OpenCacheTables(cache_path, got->cache_size, *got->scan, *got->scan, index);
  }
  return absl::OkStatus();
}

// Moves the scan's readable shards to `index->shards`, and the others (with those the
// listing left out, warned) to its skipped shards; DATA_LOSS when none could be read.
absl::Status SortOutShards(ScanOutcome* scan, ShardListing* listing, DatasetIndex* index) {
  for (std::string& w : scan->warnings) Warn(&index->warnings, std::move(w));
  for (size_t i = 0; i < scan->shards.size(); ++i) {
    if (scan->skip_reasons[i].empty()) {
      index->shards.push_back(std::move(scan->shards[i]));
    } else {
      index->skipped_shards.push_back(SkippedShard{scan->shards[i].path, scan->skip_reasons[i],
                                                   scan->shards[i].file_size, scan->shards[i].etag,
                                                   scan->shards[i].content_digest});
    }
  }
  for (SkippedShard& skipped : listing->unlisted) {
    Warn(&index->warnings, absl::StrCat("shard ", skipped.path, " skipped: ", skipped.reason,
                                        "; serving the other shards"));
    index->skipped_shards.push_back(std::move(skipped));
  }
  std::sort(
      index->skipped_shards.begin(), index->skipped_shards.end(),
      [](const SkippedShard& a, const SkippedShard& b) { return NaturalLess(a.path, b.path); });
  if (index->shards.empty()) {
    return absl::DataLossError(absl::StrCat(
        listing->root, ": none of its ", index->skipped_shards.size(), " shard(s) could be read (",
        index->skipped_shards[0].path, ": ", index->skipped_shards[0].reason, ")"));
  }
  index->skipped = std::move(scan->skipped);
  return absl::OkStatus();
}

// The index's counts and traits from the cache's header, its samples left there.
void CountFromCacheHeader(ScanOutcome* scan, DatasetIndex* index) {
  // The samples stay in the cache file: what planning needs comes from its header
  // (checked against the samples whenever the file is read whole).
  index->fingerprint = scan->fingerprint;
  index->samples_released = true;
  for (const ShardTableLocation& table : index->tables->shards) {
    index->released_sample_counts.push_back(table.samples);
    index->num_samples += table.samples;
  }
  index->released_extension_counts = std::move(scan->extension_counts);
  index->released_largest_image_bytes = scan->largest_image_bytes;
  index->has_images = scan->has_images;
  index->has_labels = scan->has_labels;
}

// The index's fingerprint, counts and traits from the samples it holds.
void CountFromSamples(const IndexOptions& options, DatasetIndex* index) {
  std::vector<const ShardInfo*> served;
  for (const ShardInfo& s : index->shards) served.push_back(&s);
  index->fingerprint = ContentFingerprint(served, options);
  DatasetTraits traits;
  for (const ShardInfo& s : index->shards) {
    index->num_samples += static_cast<int64_t>(s.samples.size());
    AddTraits(s.samples, &traits);
  }
  index->has_images = traits.has_images;
  index->has_labels = traits.has_labels;
}

// The index's classes: their number (info.json checked where the dataset is local),
// the warning when they are sparse, and their names.
void SetClasses(const ShardListing& listing, const IndexOptions& options, bool header_only,
                ObtainedScan* got, DatasetIndex* index) {
  ScanOutcome& scan = *got->scan;
  if (listing.local) {
    CheckInfoJson(listing.root, scan.max_label, options.max_classes, index);
  } else {
    index->num_classes = static_cast<int32_t>(scan.max_label + 1);
  }
  const bool streamed = got->streamed_labels.has_value();
  LabelSpread spread = LabelSpreadOf(*index);
  if (header_only && streamed) {
    spread.distinct = static_cast<int64_t>(got->streamed_labels->size());
    spread.max_label = got->streamed_labels->empty() ? -1 : *got->streamed_labels->rbegin();
  }
  // A start from the cache's header has no samples to count labels in (it would warn of
  // 0 distinct labels): the warning was given when the dataset was indexed.
  if (!header_only || streamed) WarnIfClassesSparse(spread, index);
  index->class_names = std::move(scan.class_names);
  if (!index->class_names.empty() &&
      index->class_names.size() < static_cast<size_t>(index->num_classes)) {
    index->class_names.resize(static_cast<size_t>(index->num_classes));
  }
}

}  // namespace

absl::StatusOr<DatasetIndex> BuildIndexFromListing(ShardListing listing,
                                                   const IndexOptions& options) {
  if (absl::Status listed_once = SortShardsListedOnce(&listing); !listed_once.ok()) {
    return listed_once;
  }
  const std::string& root = listing.root;
  DatasetIndex index;
  index.root = root;
  if (!listing.index_file_problem.empty()) {
    Warn(&index.warnings, absl::StrCat(root, kIndexFileName, ": ignored (",
                                       listing.index_file_problem, "); scanning the shards"));
  }
  absl::StatusOr<std::string> cache_path = CachePathFor(listing, options);
  if (!cache_path.ok()) return cache_path.status();

  ObtainedScan got;
  ReadCacheAtDepth(*cache_path, listing, options, &got, &index.warnings);
  index.loaded_from_cache = got.scan.has_value();
  DropOversizedIndexFile(&listing, &index.warnings);
  if (absl::Status scanned = ScanWhatTheCacheLacks(*cache_path, listing, options, &got, &index);
      !scanned.ok()) {
    return scanned;
  }
  if (absl::Status opened = WriteCacheAndOpenTables(*cache_path, listing, options, &got, &index);
      !opened.ok()) {
    return opened;
  }
  const bool streamed = got.streamed_labels.has_value();
  const bool header_only =
      (index.loaded_from_cache || streamed) && got.depth == ParseDepth::kHeader;
  if (absl::Status sorted = SortOutShards(&*got.scan, &listing, &index); !sorted.ok()) {
    return sorted;
  }
  if (header_only) {
    CountFromCacheHeader(&*got.scan, &index);
  } else {
    CountFromSamples(options, &index);
  }
  SetClasses(listing, options, header_only, &got, &index);
  return index;
}

absl::Status WriteIndexFile(const DatasetIndex& index, const IndexOptions& options,
                            absl::FunctionRef<absl::Status(absl::string_view)> write) {
  // The records, served and skipped shards together in listing order (as the loader
  // compares them with the listing), each with where its samples are: a served shard's
  // ordinal in `index`, or none.
  ScanOutcome records;
  std::vector<std::optional<uint32_t>> served_as;
  for (size_t i = 0; i < index.shards.size(); ++i) {
    records.shards.push_back(IndexFileRecord(index.shards[i]));
    records.skip_reasons.emplace_back();
    served_as.push_back(static_cast<uint32_t>(i));
  }
  for (const SkippedShard& skipped : index.skipped_shards) {
    ShardInfo shard;
    shard.path = skipped.path;
    shard.file_size = skipped.file_size;
    shard.etag = skipped.etag;
    shard.content_digest = skipped.content_digest;
    records.shards.push_back(std::move(shard));
    records.skip_reasons.push_back(skipped.reason.empty() ? "skipped" : skipped.reason);
    served_as.emplace_back();
  }
  std::vector<size_t> order(records.shards.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return NaturalLess(records.shards[a].path, records.shards[b].path);
  });
  ScanOutcome sorted;
  std::vector<std::optional<uint32_t>> sorted_served_as;
  for (size_t i : order) {
    sorted.shards.push_back(std::move(records.shards[i]));
    sorted.skip_reasons.push_back(std::move(records.skip_reasons[i]));
    sorted_served_as.push_back(served_as[i]);
  }
  // Each shard's samples, one shard at a time (from memory, or its table in the cache).
  auto samples_of = [&](size_t i, std::vector<SampleEntry>* samples) {
    samples->clear();
    if (!sorted_served_as[i].has_value()) return absl::OkStatus();
    return ForEachSample(index, *sorted_served_as[i],
                         [&](uint32_t, const SampleEntry& e) { samples->push_back(e); });
  };
  for (const std::optional<uint32_t>& shard : sorted_served_as) {
    if (!shard.has_value()) continue;
    absl::Status read = ForEachSample(index, *shard, [&](uint32_t, const SampleEntry& e) {
      sorted.max_label = std::max(sorted.max_label, e.label);
    });
    if (!read.ok()) return read;
  }
  sorted.skipped = index.skipped;
  if (!index.class_names.empty() && sorted.max_label >= 0) {
    sorted.class_names.assign(
        index.class_names.begin(),
        index.class_names.begin() +
            std::min<size_t>(index.class_names.size(), static_cast<size_t>(sorted.max_label + 1)));
    sorted.class_names.resize(static_cast<size_t>(sorted.max_label + 1));
  }
  return WriteScanOutcome(/*root=*/"", options, sorted, samples_of, write);
}

absl::StatusOr<std::string> SerializeIndexFile(const DatasetIndex& index,
                                               const IndexOptions& options) {
  std::string out;
  absl::Status written = WriteIndexFile(index, options, [&out](absl::string_view piece) {
    out.append(piece.data(), piece.size());
    return absl::OkStatus();
  });
  if (!written.ok()) return written;
  return out;
}

absl::Status WriteIndexFileAt(const DatasetIndex& index, const IndexOptions& options,
                              const std::string& path) {
  return WriteFileAtomically(path, [&](int fd, const std::string& tmp) {
    return WriteIndexFile(index, options,
                          [&](absl::string_view piece) { return WriteAll(fd, tmp, piece); });
  });
}

}  // namespace shardcast

// Split `sample` over .tar.gz shards vs the same shards as .tar, side by side in one run:
// the serve path's per-sample work (ShardReader::ReadMember of the image member, then
// DecodeAndTransform) in the order the epoch plan deals samples, on T threads, for
//  - plain .tar (one pread per member),
//  - .tar.gz through the reader's GzipIndex (inflate at most 1 MiB before a member),
//  - .tar.gz as the reader did before it (the whole shard inflated into an LRU of 3
//    shards), measured on a prefix of the same order since it is far slower.
// Plus index build time and the gzip indexes' memory.
//
//   gzip_shards_bench [--images N] [--per-shard P] [--size S] [--threads T]
//                     [--baseline-samples K]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/image/image_transform.h"
#include "common/plan/epoch_plan.h"
#include "common/shards/dataset_index.h"
#include "common/shards/gzip_index.h"
#include "common/shards/shard_reader.h"
#include "common/shards/tar_reader.h"
#include "tests/support/temp_dir.h"
#include "tools/pack/synthetic_dataset.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Flags {
  int64_t images = 2000;
  int64_t per_shard = 100;
  int size = 256;
  int threads = 2;
  int64_t baseline_samples = 200;
};

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i];
    int64_t value = 0;
    if (!absl::SimpleAtoi(argv[i + 1], &value) || value <= 0) {
      std::fprintf(stderr, "gzip_shards_bench: bad value for %s\n", name.c_str());
      std::exit(2);
    }
    if (name == "--images")
      flags.images = value;
    else if (name == "--per-shard")
      flags.per_shard = value;
    else if (name == "--size")
      flags.size = static_cast<int>(value);
    else if (name == "--threads")
      flags.threads = static_cast<int>(value);
    else if (name == "--baseline-samples")
      flags.baseline_samples = value;
    else {
      std::fprintf(stderr, "gzip_shards_bench: unknown flag %s\n", name.c_str());
      std::exit(2);
    }
  }
  return flags;
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

template <typename T>
T OrDie(absl::StatusOr<T> value, const char* what) {
  if (!value.ok()) {
    std::fprintf(stderr, "gzip_shards_bench: %s: %s\n", what, value.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(value);
}

// The reader before the gzip index, kept here as the baseline: a whole shard inflated
// per miss, an LRU of 3 inflated shards.
class WholeInflateReader {
 public:
  explicit WholeInflateReader(const shardcast::DatasetIndex& index) : index_(index) {}
  absl::StatusOr<std::string> ReadMember(uint32_t shard, const shardcast::MemberRef& member) {
    std::shared_ptr<const std::string> data;
    {
      absl::MutexLock lock(&mu_);
      for (auto it = lru_.begin(); it != lru_.end(); ++it) {
        if (it->first == shard) {
          data = it->second;
          lru_.splice(lru_.begin(), lru_, it);
          break;
        }
      }
    }
    if (data == nullptr) {
      absl::StatusOr<std::string> inflated =
          shardcast::ReadUncompressedStream(index_.root + "/" + index_.shards[shard].path);
      if (!inflated.ok()) return inflated.status();
      data = std::make_shared<const std::string>(*std::move(inflated));
      absl::MutexLock lock(&mu_);
      lru_.emplace_front(shard, data);
      if (lru_.size() > 3) lru_.pop_back();
    }
    return data->substr(member.offset, member.size);
  }

 private:
  const shardcast::DatasetIndex& index_;
  absl::Mutex mu_;
  std::list<std::pair<uint32_t, std::shared_ptr<const std::string>>> lru_ ABSL_GUARDED_BY(mu_);
};

using ReadFn = std::function<absl::StatusOr<std::string>(uint32_t, const shardcast::MemberRef&)>;

struct Row {
  double samples_per_second = 0;
  double seconds = 0;
  int64_t samples = 0;
};

// The first `count` samples of `order` on `threads` threads: read the image member,
// and decode + transform it when `decode`.
Row Run(const shardcast::DatasetIndex& index, const std::vector<shardcast::SampleRef>& order,
        int64_t count, int threads, bool decode, const ReadFn& read) {
  shardcast::TransformSpec spec;
  spec.resize = 256;
  spec.crop = 224;
  std::atomic<int64_t> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      std::vector<uint8_t> out(3 * 224 * 224);
      for (int64_t i = next++; i < count; i = next++) {
        const shardcast::SampleRef& ref = order[static_cast<size_t>(i)];
        const shardcast::SampleEntry& entry = index.shards[ref.shard].samples[ref.index];
        std::string bytes = OrDie(read(ref.shard, entry.members[entry.image_member]), "read");
        if (decode) {
          absl::Status s = shardcast::DecodeAndTransform(bytes, spec, ref.augment_seed, out.data());
          if (!s.ok()) std::exit(1);
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
  Row row;
  row.seconds = Seconds(start, Clock::now());
  row.samples = count;
  row.samples_per_second = static_cast<double>(count) / row.seconds;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  shardcast::testing_util::TempDir tmp;
  const std::string plain_dir = tmp / "tar", gzip_dir = tmp / "tgz";
  shardcast::pack::SyntheticOptions synth;
  synth.num_samples = flags.images;
  synth.width = flags.size;
  synth.height = flags.size;
  synth.per_shard = flags.per_shard;
  synth.seed = 3;
  OrDie(shardcast::pack::WriteSyntheticDataset(plain_dir, synth), "pack");
  fs::create_directories(gzip_dir);
  uint64_t plain_bytes = 0, gzip_bytes = 0;
  for (const auto& e : fs::directory_iterator(plain_dir)) {
    if (e.path().extension() != ".tar") continue;
    const std::string out = gzip_dir + "/" + e.path().filename().string() + ".gz";
    const std::string cmd = absl::StrCat("gzip -6 -c '", e.path().string(), "' > '", out, "'");
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "gzip_shards_bench: %s failed\n", cmd.c_str());
      return 1;
    }
    plain_bytes += fs::file_size(e.path());
    gzip_bytes += fs::file_size(out);
  }

  auto t0 = Clock::now();
  const shardcast::DatasetIndex plain =
      OrDie(shardcast::BuildDatasetIndex(plain_dir, {}), "index tar");
  auto t1 = Clock::now();
  const shardcast::DatasetIndex gzip =
      OrDie(shardcast::BuildDatasetIndex(gzip_dir, {}), "index tar.gz");
  auto t2 = Clock::now();
  if (plain.fingerprint.empty() || plain.num_samples != gzip.num_samples) return 1;

  // The order split `sample` deals samples in: every batch of rank 0 of a 1-rank job.
  shardcast::PlanConfig config;
  config.world_size = 1;
  config.batch_size = 32;
  config.split = shardcast::Split::kSample;
  config.seed = 1;
  auto plan = OrDie(shardcast::EpochPlan::Create(plain.ShardSampleCounts(), config, 0), "plan");
  std::vector<shardcast::SampleRef> order;
  auto it = plan->Iterate(0, 0);
  shardcast::PlannedBatch batch;
  while (it->Next(&batch)) {
    for (const shardcast::SampleRef& ref : batch.samples) order.push_back(ref);
  }
  const int64_t all = static_cast<int64_t>(order.size());
  const int64_t prefix = std::min(all, flags.baseline_samples);

  // The gzip indexes as the reader builds them (one per shard, default span).
  size_t index_bytes = 0;
  const auto g0 = Clock::now();
  for (const shardcast::ShardInfo& shard : gzip.shards) {
    const int fd = ::open((gzip.root + "/" + shard.path).c_str(), O_RDONLY);
    index_bytes += OrDie(shardcast::GzipIndex::Build(fd), "gzip index").memory_bytes();
    ::close(fd);
  }
  const double gzip_index_seconds = Seconds(g0, Clock::now());

  std::printf(
      "machine: %u cores; %lld synthetic %dx%d JPEGs in %zu shards of %lld; "
      "%.1f MB as .tar, %.1f MB as .tar.gz; %d threads\n",
      std::thread::hardware_concurrency(), static_cast<long long>(flags.images), flags.size,
      flags.size, plain.shards.size(), static_cast<long long>(flags.per_shard), plain_bytes / 1e6,
      gzip_bytes / 1e6, flags.threads);
  std::printf(
      "index build: .tar %.2f s, .tar.gz %.2f s; gzip seek indexes of all shards: "
      "%.2f s to build, %.2f MB (%.1f %% of the uncompressed size)\n\n",
      Seconds(t0, t1), Seconds(t1, t2), gzip_index_seconds, index_bytes / 1e6,
      100.0 * static_cast<double>(index_bytes) / static_cast<double>(plain_bytes));

  std::printf("%-44s %10s %12s %12s\n", "split sample, epoch 0 order", "samples", "read/s",
              "read+decode/s");
  const auto row = [&](const char* name, const shardcast::DatasetIndex& index, int64_t count,
                       const std::function<ReadFn()>& make) {
    const Row read_only = Run(index, order, count, flags.threads, false, make());
    const Row full = Run(index, order, count, flags.threads, true, make());
    std::printf("%-44s %10lld %12.0f %12.0f\n", name, static_cast<long long>(count),
                read_only.samples_per_second, full.samples_per_second);
  };
  for (int round = 0; round < 2; ++round) {  // interleaved, so drift hits all rows alike
    std::printf("round %d\n", round + 1);
    row("  .tar (pread)", plain, all, [&] {
      auto reader = std::make_shared<shardcast::ShardReader>(plain);
      return ReadFn(
          [reader](uint32_t s, const shardcast::MemberRef& m) { return reader->ReadMember(s, m); });
    });
    row("  .tar.gz, gzip seek index (now)", gzip, all, [&] {
      auto reader = std::make_shared<shardcast::ShardReader>(gzip);
      return ReadFn(
          [reader](uint32_t s, const shardcast::MemberRef& m) { return reader->ReadMember(s, m); });
    });
    row("  .tar.gz, whole-shard inflate LRU 3 (before)", gzip, prefix, [&] {
      auto reader = std::make_shared<WholeInflateReader>(gzip);
      return ReadFn(
          [reader](uint32_t s, const shardcast::MemberRef& m) { return reader->ReadMember(s, m); });
    });
  }
  return 0;
}

// The compact shard table (common/shards/compact_shard_table.h) against today's
// in-memory SampleEntry on LAION-like samples: bytes per sample of each, and the
// codec's CPU per sample (encode, Open = checksum + validation, lookup, iteration).
// Usage: compact_table_bench [shards] [samples per shard]   (default 20 x 10,000)
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_timing.h"
#include "common/shards/compact_shard_table.h"

namespace {

using shardcast::CompactShardTable;
using shardcast::ExtensionTable;
using shardcast::SampleEntry;
using shardcast::bench::ThreadCpuSeconds;

// One LAION-400M-like shard as webdataset writes it: keys "000123456" (shard number and
// sample number, zero-padded), no class label, a jpg of 5-60 KB, a caption txt of 40-300
// bytes and a json of 400-1,500 bytes, each member after a 512-byte header and the
// previous member's padding.
std::vector<SampleEntry> LaionShard(uint32_t shard, uint32_t n, std::mt19937_64& rng) {
  std::vector<SampleEntry> samples(n);
  uint64_t end = 0;
  for (uint32_t j = 0; j < n; ++j) {
    SampleEntry& e = samples[j];
    e.key = absl::StrCat(absl::Dec(uint64_t{shard} * 10000 + j, absl::kZeroPad9));
    e.members.reserve(3);
    for (auto [ext, lo, hi] : {std::tuple<const char*, uint64_t, uint64_t>{"jpg", 5000, 60000},
                               {"txt", 40, 300},
                               {"json", 400, 1500}}) {
      const uint64_t offset = (end + 511) / 512 * 512 + 512;
      const uint64_t size = lo + rng() % (hi - lo);
      e.members.push_back({ext, offset, size});
      end = offset + size;
    }
  }
  return samples;
}

// Heap bytes in use, as malloc counts them (its chunk overhead included): the arena's
// chunks and the mmapped ones (a shard's vector of 10,000 entries is one of those).
size_t HeapInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

}  // namespace

int main(int argc, char** argv) {
  const uint32_t shards = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 20;
  const uint32_t per_shard = argc > 2 ? static_cast<uint32_t>(std::atoi(argv[2])) : 10000;
  const double samples = static_cast<double>(shards) * per_shard;
  std::mt19937_64 rng(46);

  // Today's index: the heap that the shards' vectors of SampleEntry hold, measured.
  const size_t heap_before = HeapInUse();
  std::vector<std::vector<SampleEntry>> index;
  index.reserve(shards);
  for (uint32_t s = 0; s < shards; ++s) index.push_back(LaionShard(s, per_shard, rng));
  const double entry_bytes = static_cast<double>(HeapInUse() - heap_before) / samples;
  size_t usable = 0;
  for (const auto& shard : index) {
    for (const SampleEntry& e : shard)
      usable += malloc_usable_size(const_cast<shardcast::MemberRef*>(e.members.data()));
  }

  ExtensionTable exts;
  std::vector<std::string> tables(shards);
  double t = ThreadCpuSeconds();
  size_t table_bytes = 0;
  for (uint32_t s = 0; s < shards; ++s) {
    tables[s] = *shardcast::EncodeShardTable(index[s], &exts);
    table_bytes += tables[s].size();
  }
  const double encode_ns = (ThreadCpuSeconds() - t) * 1e9 / samples;
  const std::string ext_bytes = exts.Serialize();

  shardcast::ShardTableLimits limits;
  limits.data_size = uint64_t{1} << 40;
  std::vector<CompactShardTable> opened;
  t = ThreadCpuSeconds();
  for (uint32_t s = 0; s < shards; ++s) {
    opened.push_back(*CompactShardTable::Open(tables[s], &exts, limits));
  }
  const double open_ns = (ThreadCpuSeconds() - t) * 1e9 / samples;

  // Random lookups, each alone (the serve path's case: one sample of a batch).
  SampleEntry e;
  size_t checked = 0;
  const size_t lookups = static_cast<size_t>(samples);
  t = ThreadCpuSeconds();
  for (size_t i = 0; i < lookups; ++i) {
    const uint32_t s = static_cast<uint32_t>(rng() % shards);
    const uint32_t j = static_cast<uint32_t>(rng() % per_shard);
    if (!opened[s].LookupInto(j, &e).ok()) return 1;
    checked += e.members.size();
  }
  const double lookup_ns = (ThreadCpuSeconds() - t) * 1e9 / static_cast<double>(lookups);

  t = ThreadCpuSeconds();
  for (const CompactShardTable& table : opened) {
    if (!table.ForEach([&](uint32_t, const SampleEntry& x) { checked += x.members.size(); }).ok()) {
      return 1;
    }
  }
  const double iterate_ns = (ThreadCpuSeconds() - t) * 1e9 / samples;

  std::printf("LAION-like samples: %u shards x %u (jpg + txt + json, keys like \"%s\")\n", shards,
              per_shard, index[0][1].key.c_str());
  std::printf("%-52s %10s\n", "representation", "bytes/sample");
  std::printf("%-52s %10.1f\n", "SampleEntry in vectors: heap measured (mallinfo2)", entry_bytes);
  std::printf("%-52s %10.1f\n", "  of which sizeof(SampleEntry)",
              static_cast<double>(sizeof(SampleEntry)));
  std::printf("%-52s %10.1f\n", "  of which members' arrays (malloc_usable_size)",
              static_cast<double>(usable) / samples);
  std::printf("%-52s %10.2f\n", "compact shard tables (default restart interval)",
              static_cast<double>(table_bytes) / samples);
  std::printf("%-52s %10zu\n", "  + extension table, once per dataset (bytes)", ext_bytes.size());
  std::printf("\n%-52s %10s\n", "codec, CPU time of one thread", "ns/sample");
  std::printf("%-52s %10.0f\n", "encode", encode_ns);
  std::printf("%-52s %10.0f\n", "Open (checksum + validation of every record)", open_ns);
  std::printf("%-52s %10.0f\n", "Lookup(j), random j, each alone", lookup_ns);
  std::printf("%-52s %10.0f\n", "ForEach (sequential)", iterate_ns);

  // The restart interval's trade: a restart's record holds its whole key and an
  // absolute offset, and a lookup decodes up to `interval` records.
  std::printf("\n%-10s %14s %22s\n", "restarts", "bytes/sample", "Lookup ns (random j)");
  for (uint32_t interval : {1u, 4u, 8u, 16u, 32u, 64u}) {
    shardcast::ShardTableEncodeOptions options;
    options.restart_interval = interval;
    size_t bytes = 0;
    std::vector<CompactShardTable> views;
    for (uint32_t s = 0; s < shards; ++s) {
      tables[s] = *shardcast::EncodeShardTable(index[s], &exts, options);
      bytes += tables[s].size();
      views.push_back(*CompactShardTable::Open(tables[s], &exts, limits));
    }
    t = ThreadCpuSeconds();
    for (size_t i = 0; i < lookups; ++i) {
      const uint32_t s = static_cast<uint32_t>(rng() % shards);
      if (!views[s].LookupInto(static_cast<uint32_t>(rng() % per_shard), &e).ok()) return 1;
      checked += e.members.size();
    }
    std::printf("every %-4u %14.2f %22.0f\n", interval, static_cast<double>(bytes) / samples,
                (ThreadCpuSeconds() - t) * 1e9 / static_cast<double>(lookups));
  }
  return checked == 0 ? 1 : 0;
}

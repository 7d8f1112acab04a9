// libFuzzer harness: decoding hostile compact shard tables
// (common/shards/compact_shard_table.h), as the serve path will decode a table read from
// an index cache that was corrupted or replaced. The input is a table without its
// checksum; the harness appends the checksum it needs (SealWithTableChecksum), so the
// decoder's checks, not the checksum, are what is fuzzed. Whatever the bytes say, Open
// either refuses them or gives a table whose every sample, by Lookup and by ForEach
// alike, keeps the bounds the serve path relies on (a key, a label in range, an image
// member among its members, every member inside the shard), and whose samples encode
// again into the very bytes read (the encoding is one-to-one). The same bytes are also
// parsed as an extension table, which must serialise back to the bytes it came from.
//
// The seed corpus (a few valid tables: empty, LAION-like, mixed) is written by
//   SHARDCAST_FUZZ_WRITE_SEEDS=fuzz/corpus/compact_shard_table_fuzzer \
//     build-fuzz/fuzz/compact_shard_table_fuzzer -runs=0 $(mktemp -d)
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/shards/compact_shard_table.h"

namespace {

using shardcast::CompactShardTable;
using shardcast::ExtensionTable;
using shardcast::kNoImageMember;
using shardcast::SampleEntry;

// A shard of 1 MiB: small enough that random offsets fall outside it.
constexpr uint64_t kShardSize = uint64_t{1} << 20;
constexpr int64_t kMaxClasses = 1000;

// The dataset's extensions, in the order the seeds intern them.
const ExtensionTable& Extensions() {
  static const ExtensionTable* exts = [] {
    auto* t = new ExtensionTable;
    for (const char* e : {"jpg", "txt", "json", "cls", "seg.png"}) t->Intern(e);
    return t;
  }();
  return *exts;
}

shardcast::ShardTableLimits Limits() {
  shardcast::ShardTableLimits limits;
  limits.data_size = kShardSize;
  limits.max_classes = kMaxClasses;
  return limits;
}

bool SameEntry(const SampleEntry& a, const SampleEntry& b) {
  if (a.key != b.key || a.label != b.label || a.image_member != b.image_member ||
      a.members.size() != b.members.size()) {
    return false;
  }
  for (size_t i = 0; i < a.members.size(); ++i) {
    if (a.members[i].ext != b.members[i].ext || a.members[i].offset != b.members[i].offset ||
        a.members[i].size != b.members[i].size) {
      return false;
    }
  }
  return true;
}

void CheckBounds(const SampleEntry& e) {
  if (e.key.empty() || e.label < -1 || e.label >= kMaxClasses) std::abort();
  if (e.image_member != kNoImageMember && e.image_member >= e.members.size()) std::abort();
  for (const shardcast::MemberRef& m : e.members) {
    if (m.offset > kShardSize || m.size > kShardSize - m.offset) std::abort();
    if (Extensions().Find(m.ext) < 0) std::abort();
  }
}

// A table's bytes without its checksum, as the corpus holds them.
std::string Body(const std::vector<SampleEntry>& samples, uint32_t interval) {
  ExtensionTable exts = Extensions();
  shardcast::ShardTableEncodeOptions options;
  options.restart_interval = interval;
  std::string table = *shardcast::EncodeShardTable(samples, &exts, options);
  table.resize(table.size() - shardcast::kTableChecksumBytes);
  return table;
}

void WriteSeed(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void WriteSeeds(const std::string& dir) {
  WriteSeed(dir, "empty", Body({}, 16));
  std::vector<SampleEntry> laion(20);
  uint64_t end = 0;
  for (size_t j = 0; j < laion.size(); ++j) {
    laion[j].key = absl::StrCat("0001234", j < 10 ? "0" : "", j);
    laion[j].label = static_cast<int64_t>(j % 7);
    for (const char* ext : {"jpg", "txt", "json"}) {
      const uint64_t offset = (end + 511) / 512 * 512 + 512;
      laion[j].members.push_back({ext, offset, 100 + 37 * j});
      end = offset + 100 + 37 * j;
    }
  }
  WriteSeed(dir, "laion_interval4", Body(laion, 4));
  WriteSeed(dir, "laion_interval16", Body(laion, 16));
  // Samples without an image or a label, with no members, members out of tar order.
  std::vector<SampleEntry> mixed(6);
  for (size_t j = 0; j < mixed.size(); ++j) {
    mixed[j].key = absl::StrCat("dir/sub/k", j);
    mixed[j].image_member = j % 2 == 0 ? kNoImageMember : 0;
    if (j > 0) mixed[j].members.push_back({"seg.png", 9000 - 1000 * j, 10});
    if (j % 3 == 0) mixed[j].members.push_back({"cls", 100 * j, 2});
  }
  WriteSeed(dir, "mixed_interval2", Body(mixed, 2));
  std::string exts = Extensions().Serialize();
  WriteSeed(dir, "extension_table", exts.substr(0, exts.size() - shardcast::kTableChecksumBytes));
}

void FuzzExtensionTable(const std::string& sealed) {
  absl::StatusOr<ExtensionTable> parsed = ExtensionTable::Parse(sealed);
  if (parsed.ok() && parsed->Serialize() != sealed) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool seeded = [] {
    if (const char* dir = std::getenv("SHARDCAST_FUZZ_WRITE_SEEDS"); dir != nullptr) {
      WriteSeeds(dir);
    }
    return true;
  }();
  (void)seeded;
  const std::string sealed =
      shardcast::SealWithTableChecksum(std::string(reinterpret_cast<const char*>(data), size));
  FuzzExtensionTable(sealed);

  absl::StatusOr<CompactShardTable> table =
      CompactShardTable::Open(sealed, &Extensions(), Limits());
  if (!table.ok()) return 0;
  std::vector<SampleEntry> samples;
  samples.reserve(table->size());
  if (!table->ForEach([&](uint32_t, const SampleEntry& e) { samples.push_back(e); }).ok()) {
    std::abort();  // Open read every record: iteration cannot fail after it
  }
  if (samples.size() != table->size()) std::abort();
  for (uint32_t j = 0; j < table->size(); ++j) {
    absl::StatusOr<SampleEntry> e = table->Lookup(j);
    if (!e.ok() || !SameEntry(*e, samples[j])) std::abort();
    CheckBounds(*e);
  }
  if (table->Lookup(table->size()).ok()) std::abort();

  // The encoding is one-to-one: what decoded encodes again into the very bytes read.
  ExtensionTable exts = Extensions();
  shardcast::ShardTableEncodeOptions options;
  options.restart_interval = table->restart_interval();
  absl::StatusOr<std::string> again = shardcast::EncodeShardTable(samples, &exts, options);
  if (!again.ok() || *again != sealed || exts.size() != Extensions().size()) std::abort();
  return 0;
}

// libFuzzer harness: parsing the index cache format (common/shards/index_cache_format.h)
// as the index cache of a small real dataset. The input is a cache body; the harness
// seals each shard's compact table again under its binding (ResealShardTables) and
// appends the checksum it needs (so the parser's and the table decoder's checks, not
// the checksums, are what is fuzzed) and parses it against the dataset's listing. Whatever the body
// says, a parse either fails or gives an outcome whose every member lies inside its shard file and
// reads back with ShardReader (no out-of-bounds read, no huge buffer); read header
// first (ParseDepth::kHeader, as a server starts), every table it locates lies inside
// the file and decodes, if at all, to members inside the shard.
//
// The shard's mtime, ctime and inode differ on every machine; in the input they are
// the placeholders kMtime, kCtime, kInode, replaced by the real values before parsing,
// so a corpus made once reaches the parser's checks anywhere. The same goes for the
// fixture's directory, which the cache names: kRootPlaceholder in the input is this
// process's own directory (same length, from mkdtemp), so runs at the same time (CI's
// replay beside a long campaign) do not share a fixture. The seed is written by
//   SHARDCAST_FUZZ_SEED_OUT=fuzz/corpus/index_cache/valid index_cache_fuzzer -runs=0
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/shards/compact_shard_table.h"
#include "common/shards/dataset_index.h"
#include "common/shards/index_cache_format.h"
#include "common/shards/shard_reader.h"

namespace {
namespace fs = std::filesystem;

constexpr uint64_t kMtime = 0x1111111111111111, kCtime = 0x2222222222222222,
                   kInode = 0x3333333333333333;
// The directory the corpus was made in; mkdtemp's template has the same length.
constexpr char kRootPlaceholder[] = "/tmp/shardcast_index_cache_fuzzer";
constexpr char kRootTemplate[] = "/tmp/shardcast_index_cache_XXXXXX";
static_assert(sizeof(kRootPlaceholder) == sizeof(kRootTemplate));

struct Fixture {
  std::string root;
  std::string data_dir;
  std::string cache_dir;
  std::string cache_file;
  uint64_t mtime = 0, ctime = 0, inode = 0;  // of the shard
  shardcast::DatasetIndex index;             // as scanned: its root and listing
};

// Replaces every occurrence of `from` by `to`, a string of the same length.
void ReplaceSameLength(const std::string& from, const std::string& to, std::string* bytes) {
  for (size_t at = bytes->find(from); at != std::string::npos; at = bytes->find(from, at + 1)) {
    bytes->replace(at, from.size(), to);
  }
}

void ReplaceU64(uint64_t from, uint64_t to, std::string* bytes) {
  ReplaceSameLength(shardcast::EncodeU64(from), shardcast::EncodeU64(to), bytes);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A two-sample plain tar written with GNU tar, indexed once so the cache file exists.
const Fixture& GetFixture() {
  static const Fixture* fixture = [] {
    auto* f = new Fixture;
    char root_template[sizeof(kRootTemplate)];
    std::copy(std::begin(kRootTemplate), std::end(kRootTemplate), root_template);
    if (mkdtemp(root_template) == nullptr) std::abort();
    f->root = root_template;
    std::atexit([] { fs::remove_all(GetFixture().root); });
    const std::string& root = f->root;
    f->data_dir = root + "/data";
    f->cache_dir = root + "/cache";
    fs::create_directories(root + "/stage");
    fs::create_directories(f->data_dir);
    for (const char* key : {"a", "b"}) {
      WriteFile(absl::StrCat(root, "/stage/", key, ".jpg"), std::string(700, key[0]));
      WriteFile(absl::StrCat(root, "/stage/", key, ".cls"), key[0] == 'a' ? "1\n" : "3\n");
    }
    const std::string cmd = absl::StrCat("tar --format=gnu -cf ", f->data_dir, "/s.tar -C ", root,
                                         "/stage a.jpg a.cls b.jpg b.cls");
    if (std::system(cmd.c_str()) != 0) std::abort();
    shardcast::IndexOptions options;
    options.cache_dir = f->cache_dir;
    if (!shardcast::BuildDatasetIndex(f->data_dir, options).ok()) std::abort();
    f->cache_file = fs::directory_iterator(f->cache_dir)->path().string();
    f->index = *shardcast::BuildDatasetIndex(f->data_dir, options);
    f->mtime = static_cast<uint64_t>(f->index.shards[0].mtime_ns);
    f->ctime = static_cast<uint64_t>(f->index.shards[0].ctime_ns);
    f->inode = f->index.shards[0].inode;
    if (const char* seed_out = std::getenv("SHARDCAST_FUZZ_SEED_OUT"); seed_out != nullptr) {
      std::ifstream in(f->cache_file, std::ios::binary);
      std::string cache((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::string body = cache.substr(0, cache.size() - 40);
      ReplaceU64(f->mtime, kMtime, &body);
      ReplaceU64(f->ctime, kCtime, &body);
      ReplaceU64(f->inode, kInode, &body);
      ReplaceSameLength(f->root, kRootPlaceholder, &body);
      WriteFile(seed_out, body);
    }
    return f;
  }();
  return *fixture;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& f = GetFixture();
  std::string body(reinterpret_cast<const char*>(data), size);
  ReplaceU64(kMtime, f.mtime, &body);
  ReplaceU64(kCtime, f.ctime, &body);
  ReplaceU64(kInode, f.inode, &body);
  ReplaceSameLength(kRootPlaceholder, f.root, &body);
  // Each shard's compact table is sealed again too, so that hostile tables reach the
  // table decoder's checks, not only its checksum.
  const std::string sealed = shardcast::SealWithChecksum(
      shardcast::ResealShardTables(std::move(body), f.index.root, shardcast::IndexOptions()));

  // The server's start reads the header alone and each table later, at its location:
  // every location lies inside the file, and what a table decodes to lies inside its
  // shard.
  absl::StatusOr<std::optional<shardcast::ScanOutcome>> head = shardcast::ParseScanOutcome(
      sealed, f.index.root, shardcast::IndexOptions(), f.index.shards,
      shardcast::IndexRecordKind::kCache, shardcast::ParseDepth::kHeader);
  if (head.ok() && head->has_value()) {
    const shardcast::ScanOutcome& located = **head;
    for (size_t i = 0; i < located.tables.size(); ++i) {
      const shardcast::ShardTableLocation& t = located.tables[i];
      if (t.offset > sealed.size() || t.size > sealed.size() - t.offset) std::abort();
      absl::StatusOr<shardcast::CompactShardTable> table = shardcast::CompactShardTable::Open(
          absl::string_view(sealed).substr(t.offset, t.size), located.exts.get(), t.limits);
      if (!table.ok()) continue;
      const shardcast::ShardInfo& shard = located.shards[i];
      (void)table->ForEach([&](uint32_t, const shardcast::SampleEntry& e) {
        for (const shardcast::MemberRef& m : e.members) {
          if (!shard.compressed &&
              (m.offset > shard.file_size || m.size > shard.file_size - m.offset)) {
            std::abort();
          }
        }
      });
    }
  }

  absl::StatusOr<std::optional<shardcast::ScanOutcome>> parsed =
      shardcast::ParseScanOutcome(sealed, f.index.root, shardcast::IndexOptions(), f.index.shards,
                                  shardcast::IndexRecordKind::kCache);
  if (!parsed.ok() || !parsed->has_value()) return 0;  // corrupt or stale: a rescan
  const shardcast::ScanOutcome& scan = **parsed;
  if (scan.max_label < -1) std::abort();
  // The served shards, as BuildDatasetIndex takes them from the outcome.
  shardcast::DatasetIndex index;
  index.root = f.index.root;
  for (size_t i = 0; i < scan.shards.size(); ++i) {
    if (scan.skip_reasons[i].empty()) index.shards.push_back(scan.shards[i]);
  }
  shardcast::ShardReader reader(index);
  for (uint32_t s = 0; s < index.shards.size(); ++s) {
    const shardcast::ShardInfo& shard = index.shards[s];
    for (const shardcast::SampleEntry& e : shard.samples) {
      if (e.label < -1 || e.label > scan.max_label ||
          (e.image_member >= e.members.size() && e.image_member != shardcast::kNoImageMember)) {
        std::abort();
      }
      for (const shardcast::MemberRef& m : e.members) {
        if (!shard.compressed &&
            (m.offset > shard.file_size || m.size > shard.file_size - m.offset)) {
          std::abort();
        }
        (void)reader.ReadMember(s, m);
      }
    }
  }
  return 0;
}

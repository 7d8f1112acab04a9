// libFuzzer harness: tar scanning (common/shards/tar_reader) and the grouping of what it
// finds (common/shards/sample_grouping) on arbitrary bytes as a shard file, plain or gzip.
// Checks that every member it reports lies inside the file (plain tars) and that a
// scan never crashes, hangs or reads out of bounds (ASan/UBSan).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/shards/sample_grouping.h"
#include "common/shards/tar_reader.h"

namespace {

// The shard: an in-memory file, reached by path as ScanTar wants one.
int ShardFd() {
  static const int fd = memfd_create("shard.tar", MFD_CLOEXEC);
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = ShardFd();
  if (fd < 0 || ftruncate(fd, 0) != 0) std::abort();
  if (size > 0 && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  const std::string path = absl::StrCat("/proc/self/fd/", fd);
  absl::StatusOr<shardcast::TarScan> scan =
      shardcast::ScanTar(path, [](absl::string_view name, uint64_t member_size) {
        std::optional<shardcast::KeyExt> split = shardcast::SplitKeyExt(name);
        return member_size <= (1 << 20) && split.has_value() &&
               shardcast::IsLabelExt(absl::AsciiStrToLower(split->ext));
      });
  if (!scan.ok()) return 0;
  std::vector<absl::string_view> names;
  for (const shardcast::TarMember& m : scan->members) {
    if (!scan->compressed && (m.offset > size || m.size > size - m.offset)) std::abort();
    if (m.has_content && m.content.size() != m.size) std::abort();
    names.push_back(m.name);
  }
  shardcast::Grouping grouping = shardcast::GroupByKeys(names);
  for (const shardcast::MemberGroup& group : grouping.groups) {
    (void)shardcast::MakeSampleEntry(group, scan->members, "label");
  }
  return 0;
}

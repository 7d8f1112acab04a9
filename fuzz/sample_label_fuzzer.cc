// Fuzzes sample grouping and labelling (GroupByKeys + MakeSampleEntry), the step from a
// shard's member names and label files to index entries. The input is a list of tar
// members, each "name\n" followed by its content up to a NUL byte. Whatever the bytes:
// no crash, and every accepted label is inside [0, max_classes) or -1 (none).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "common/shards/sample_grouping.h"

namespace {

// Small, so that the bound is reached by short inputs too.
constexpr int64_t kMaxClasses = 1000;

std::vector<shardcast::TarMember> ParseMembers(const std::string& input) {
  std::vector<shardcast::TarMember> members;
  size_t pos = 0;
  while (pos < input.size() && members.size() < 256) {
    const size_t newline = input.find('\n', pos);
    if (newline == std::string::npos) break;
    shardcast::TarMember m;
    m.name = input.substr(pos, newline - pos);
    size_t end = input.find('\0', newline + 1);
    if (end == std::string::npos) end = input.size();
    m.content = input.substr(newline + 1, end - newline - 1);
    m.offset = 512 * (members.size() + 1);
    m.size = m.content.size();
    std::optional<shardcast::KeyExt> split = shardcast::SplitKeyExt(m.name);
    m.has_content = split.has_value() && shardcast::IsLabelExt(absl::AsciiStrToLower(split->ext));
    members.push_back(std::move(m));
    pos = end + 1;
  }
  return members;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<shardcast::TarMember> members =
      ParseMembers(std::string(reinterpret_cast<const char*>(data), size));
  std::vector<absl::string_view> names;
  for (const shardcast::TarMember& m : members) names.push_back(m.name);
  const shardcast::Grouping grouping = shardcast::GroupByKeys(names);
  for (const shardcast::MemberGroup& group : grouping.groups) {
    absl::StatusOr<shardcast::LabeledSample> sample =
        shardcast::MakeSampleEntry(group, members, "label", kMaxClasses);
    if (!sample.ok()) continue;
    const shardcast::SampleEntry& e = sample->entry;
    if (e.label < -1 || e.label >= kMaxClasses) std::abort();
    if (e.image_member >= e.members.size() && e.image_member != shardcast::kNoImageMember) {
      std::abort();
    }
  }
  return 0;
}

// libFuzzer harness: webdataset key/extension splitting, grouping and sample entries
// (common/shards/sample_grouping) on arbitrary member names and label contents. Checks the
// splitting's invariant (key + "." + ext is the name) and that grouping puts every
// non-metadata member in exactly one place.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/shards/sample_grouping.h"
#include "common/shards/tar_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string label_field = in.ConsumeRandomLengthString(16);
  std::vector<shardcast::TarMember> members;
  while (in.remaining_bytes() > 0 && members.size() < 256) {
    shardcast::TarMember m;
    m.name = in.ConsumeRandomLengthString(64);
    m.sparse = in.ConsumeBool();
    m.has_content = in.ConsumeBool();
    if (m.has_content) m.content = in.ConsumeRandomLengthString(64);
    m.size = m.has_content ? m.content.size() : in.ConsumeIntegral<uint64_t>();
    m.offset = in.ConsumeIntegral<uint64_t>();
    members.push_back(std::move(m));
  }
  std::vector<absl::string_view> names;
  size_t metadata = 0;
  for (const shardcast::TarMember& m : members) {
    names.push_back(m.name);
    if (shardcast::IsMetadataName(m.name)) ++metadata;
    std::optional<shardcast::KeyExt> split = shardcast::SplitKeyExt(m.name);
    if (split.has_value() && split->key + "." + split->ext != m.name) std::abort();
  }
  shardcast::Grouping grouping = shardcast::GroupByKeys(names);
  size_t covered = grouping.keyless.size();
  bool duplicates = false;  // a duplicate extension's member is in no group
  for (const shardcast::MemberGroup& group : grouping.groups) {
    duplicates = duplicates || !group.error.empty();
    if (group.members.size() != group.exts.size()) std::abort();
    covered += group.members.size();
    for (size_t i : group.members) {
      if (i >= members.size()) std::abort();
    }
    absl::StatusOr<shardcast::LabeledSample> sample =
        shardcast::MakeSampleEntry(group, members, label_field);
    if (sample.ok()) {
      const shardcast::SampleEntry& e = sample->entry;
      if (e.label < -1 ||
          (e.image_member >= e.members.size() && e.image_member != shardcast::kNoImageMember)) {
        std::abort();
      }
    }
  }
  // Every member is metadata, keyless, in exactly one group, or a duplicate.
  if (covered + metadata > members.size()) std::abort();
  if (!duplicates && covered + metadata != members.size()) std::abort();
  return 0;
}

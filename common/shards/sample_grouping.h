// WebDataset sample grouping (webdataset/tariterators.py: base_plus_ext + group_by_keys)
// and the step from a group of tar members to an index entry (image member + label).
#ifndef SHARDCAST_COMMON_SHARDS_SAMPLE_GROUPING_H_
#define SHARDCAST_COMMON_SHARDS_SAMPLE_GROUPING_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/shards/sample_entry.h"
#include "common/shards/tar_reader.h"

namespace shardcast {

struct KeyExt {
  std::string key;
  std::string ext;  // as in the name (NOT lower-cased)
};

// webdataset's base_plus_ext: re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$", name). The key
// runs to the first dot of the basename ("dir/abc.def.jpg" -> "dir/abc", "def.jpg").
// nullopt when the regex does not match (no dot in the basename, ".hidden" at top level).
std::optional<KeyExt> SplitKeyExt(absl::string_view name);

// webdataset's metadata names, skipped before grouping: a first path component of the
// form "__*__" (skip_meta=r"__[^/]*__($|/)"), or a slash-free name that starts and ends
// with "__".
bool IsMetadataName(absl::string_view name);

struct MemberGroup {
  std::string key;
  std::vector<size_t> members;    // indices into the scanned member list, archive order
  std::vector<std::string> exts;  // lower-cased, parallel to `members`
  std::string error;              // non-empty: the sample is bad (e.g. duplicate extension)
};

struct Grouping {
  std::vector<MemberGroup> groups;  // one per sample, archive order
  std::vector<size_t> keyless;      // members whose name gives no key (not metadata)
};

// Groups consecutive members with equal keys, as group_by_keys does for one shard.
Grouping GroupByKeys(absl::Span<const absl::string_view> names);

// Extensions whose member is the sample's image: we decode these (jpg, jpeg, png, webp).
bool IsDecodableImageExt(absl::string_view last_component);

struct LabeledSample {
  SampleEntry entry;
  std::string class_name;  // the json "class" string, when present and there is a label
};

// Turns a good group into an index entry. Image: the first member whose extension is
// exactly jpg/jpeg/png/webp, else the first whose last extension component is (e.g.
// "seg.png"); kNoImageMember when there is none. Label: the integer text of ".cls"
// when there is one, else the integer field `label_field` of ".json" (their contents
// must be in TarMember::content); -1 when neither gives one (a .json without that
// field is metadata). Whether a sample without an image or a label is served is decided
// for the whole dataset (dataset_index.cc), not here. Errors (the skip reason): a
// group error, a sparse member, an unreadable label member that is the only label
// source, a label that is not an integer, a label outside [0, max_classes).
absl::StatusOr<LabeledSample> MakeSampleEntry(const MemberGroup& group,
                                              absl::Span<const TarMember> members,
                                              absl::string_view label_field,
                                              int64_t max_classes = kDefaultMaxClasses);

// The skip reason of a sample without an image in a dataset with images (names an
// image-like member that is not decoded, e.g. "gif", when there is one).
std::string MissingImageReason(const SampleEntry& entry);

// The skip reason of a sample without a label in a dataset with labels.
std::string MissingLabelReason(const SampleEntry& entry, absl::string_view label_field);

// Whether the scan must read this member's bytes to label samples (.cls / .json).
bool IsLabelExt(absl::string_view lower_ext);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARDS_SAMPLE_GROUPING_H_

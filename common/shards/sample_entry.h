// One sample of the dataset index as the serve path reads it: its key, its label and
// where its members lie in the shard. Its own header so that what makes entries
// (sample_grouping.h) and the index that holds them (dataset_index.h) both include
// downward, not each other.
#ifndef SHARDCAST_COMMON_SHARDS_SAMPLE_ENTRY_H_
#define SHARDCAST_COMMON_SHARDS_SAMPLE_ENTRY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace shardcast {

// One tar member of a sample. `offset` is the position of the member's data in the
// UNCOMPRESSED tar stream: for a plain .tar that is a file offset (one pread reads it);
// for .tar.gz it is an offset into the decompressed stream.
struct MemberRef {
  std::string ext;  // lower-cased, e.g. "jpg", "json", "seg.png"
  uint64_t offset = 0;
  uint64_t size = 0;
};

// SampleEntry::image_member of a sample of a dataset that holds no image at all (text,
// audio, tokens): such samples are served for jobs that ask for members only.
inline constexpr uint32_t kNoImageMember = UINT32_MAX;

struct SampleEntry {
  std::string key;     // case preserved, may contain '/'
  int64_t label = -1;  // from .cls or the json label field; -1 in a dataset without labels
  // Index into `members` of the image to decode, or kNoImageMember (read it through
  // ImageMember, which never indexes past `members`).
  uint32_t image_member = 0;
  std::vector<MemberRef> members;
};

// The sample's image member; nullptr for a sample without one (kNoImageMember).
inline const MemberRef* ImageMember(const SampleEntry& entry) {
  return entry.image_member < entry.members.size() ? &entry.members[entry.image_member] : nullptr;
}

// Labels are accepted in [0, max_classes); see IndexOptions::max_classes.
inline constexpr int32_t kDefaultMaxClasses = 1000000;

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARDS_SAMPLE_ENTRY_H_

// The members of a WebDataset sample a job asks for beside (or instead of) the image,
// named as webdataset names them: by extension ("txt", "json", "seg.png", "npy"),
// with alternatives separated by ';' ("jpg;png;webp": the first the sample has), and
// a trailing '?' for a member that may be missing ("json?"). One spelling for every
// client: trainer flag, RankStream, Loader, ctl, and the wire (RegisterRequest.fields).
#ifndef SHARDCAST_COMMON_PLAN_FIELD_SPEC_H_
#define SHARDCAST_COMMON_PLAN_FIELD_SPEC_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardcast {

struct FieldSpec {
  // Lower-cased extensions, in the order asked: a sample's member is the first of
  // these it has. Never empty.
  std::vector<std::string> alternatives;
  // A sample without any of them is served with the field reported missing; a
  // required field's sample is left out of the job's plan instead.
  bool optional = false;

  // The field's name as asked, without '?': "jpg;png", "json". The key under which
  // clients hand the bytes out.
  std::string Name() const;
  // The spelling that parses back to this spec: "json?", "jpg;png".
  std::string ToString() const;
  bool operator==(const FieldSpec& other) const {
    return alternatives == other.alternatives && optional == other.optional;
  }
};

// Limits on what a job may ask for, so that a request cannot make the server match
// thousands of names per sample: refused with INVALID_ARGUMENT naming the limit.
inline constexpr size_t kMaxFields = 64;
inline constexpr size_t kMaxFieldSpecLength = 128;  // characters of one spec, '?' included

// Parses one spec. INVALID_ARGUMENT (naming the spec, shown escaped) for an empty
// spec or alternative, one longer than kMaxFieldSpecLength, a character outside
// printable ASCII, a '/', an empty extension component ("a..b", ".txt", "txt."), or
// the same alternative twice.
absl::StatusOr<FieldSpec> ParseFieldSpec(absl::string_view text);

// Parses a list (each element one spec), refusing more than kMaxFields and two specs
// with the same name.
absl::StatusOr<std::vector<FieldSpec>> ParseFieldSpecs(const std::vector<std::string>& texts);

// "txt,json?" (the specs' ToString joined by ','); "" for none.
std::string FieldSpecsString(const std::vector<FieldSpec>& fields);

// The comma-separated form a flag takes ("--fields txt,json?"): split, then
// ParseFieldSpecs. "" is no field.
absl::StatusOr<std::vector<FieldSpec>> ParseFieldSpecList(absl::string_view comma_separated);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_PLAN_FIELD_SPEC_H_

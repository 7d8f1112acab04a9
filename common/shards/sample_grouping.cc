// WebDataset grouping rules, kept line for line with tariterators.py so that the
// index holds exactly the samples webdataset would yield, in the same order.
#include "common/shards/sample_grouping.h"

#include <cstdint>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/util/json_fields.h"

namespace shardcast {

std::optional<KeyExt> SplitKeyExt(absl::string_view name) {
  const size_t last_slash = name.rfind('/');
  const size_t base_start = last_slash == absl::string_view::npos ? 0 : last_slash + 1;
  // The extension ([^/]*) cannot hold a slash, so the dot is in the basename; the key's
  // tail ([^.]+) cannot hold a dot, so it is the basename's first dot.
  const size_t dot = name.find('.', base_start);
  if (dot == absl::string_view::npos) return std::nullopt;
  const absl::string_view key = name.substr(0, dot);
  // The key must match (?:.*/|)[^.]+ : a non-empty dot-free tail that starts the name or
  // follows a '/'. ("dir/.jpg" -> key "dir/"; "a.b/.jpg" -> no match.)
  const size_t last_key_dot = key.rfind('.');
  const size_t tail_start = last_key_dot == absl::string_view::npos ? 0 : last_key_dot + 1;
  bool matches = false;
  for (size_t s = tail_start; s < key.size(); ++s) {
    if (s == 0 || key[s - 1] == '/') {
      matches = true;
      break;
    }
  }
  if (!matches) return std::nullopt;
  return KeyExt{std::string(key), std::string(name.substr(dot + 1))};
}

bool IsMetadataName(absl::string_view name) {
  const auto meta_affixes = [](absl::string_view s) {
    return s.size() >= 2 && s.substr(0, 2) == "__" && s.substr(s.size() - 2) == "__";
  };
  if (name.find('/') == absl::string_view::npos && meta_affixes(name)) return true;
  const absl::string_view first = name.substr(0, name.find('/'));
  return first.size() >= 4 && meta_affixes(first);
}

Grouping GroupByKeys(absl::Span<const absl::string_view> names) {
  Grouping out;
  // The current group's extensions: a set, so that a sample of 10,000 members costs no
  // more per member than one of three.
  std::unordered_set<std::string> group_exts;
  for (size_t i = 0; i < names.size(); ++i) {
    if (IsMetadataName(names[i])) continue;
    std::optional<KeyExt> split = SplitKeyExt(names[i]);
    if (!split.has_value()) {
      out.keyless.push_back(i);
      continue;
    }
    std::string ext = absl::AsciiStrToLower(split->ext);
    if (out.groups.empty() || out.groups.back().key != split->key) {
      out.groups.push_back(MemberGroup{std::move(split->key), {}, {}, {}});
      group_exts.clear();
    }
    MemberGroup& group = out.groups.back();
    if (!group_exts.insert(ext).second) {
      // group_by_keys raises here ("duplicate file name in tar file"); the sample is bad.
      if (group.error.empty()) {
        group.error = absl::StrCat("duplicate extension '", ext, "' (member '", names[i], "')");
      }
      continue;
    }
    group.members.push_back(i);
    group.exts.push_back(std::move(ext));
  }
  return out;
}

bool IsDecodableImageExt(absl::string_view last_component) {
  return last_component == "jpg" || last_component == "jpeg" || last_component == "png" ||
         last_component == "webp";
}

namespace {

// Where a sample's image is among its members (extensions lower-cased, archive order):
// the first whose extension is exactly an image's, else the first whose last component
// is ("seg.png"); `undecodable` names an image-like member we do not decode, for the
// reason text of a sample without an image.
struct ImageChoice {
  int index = -1;
  std::string undecodable;
};

template <typename ExtOf, typename Members>
ImageChoice ChooseImage(const Members& members, ExtOf ext_of) {
  ImageChoice choice;
  int fallback = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    const absl::string_view ext = ext_of(members[i]);
    const size_t last_dot = ext.rfind('.');
    const absl::string_view last =
        last_dot == absl::string_view::npos ? ext : ext.substr(last_dot + 1);
    if (IsDecodableImageExt(ext)) {
      if (choice.index < 0) choice.index = static_cast<int>(i);
    } else if (IsDecodableImageExt(last)) {
      if (fallback < 0) fallback = static_cast<int>(i);
    } else if (last == "ppm" || last == "pgm" || last == "pbm" || last == "pnm" || last == "bmp" ||
               last == "gif" || last == "tif" || last == "tiff") {
      if (choice.undecodable.empty()) choice.undecodable = std::string(ext);
    }
  }
  if (choice.index < 0) choice.index = fallback;
  return choice;
}

}  // namespace

std::string MissingImageReason(const SampleEntry& entry) {
  const std::string undecodable =
      ChooseImage(entry.members, [](const MemberRef& m) -> absl::string_view {
        return m.ext;
      }).undecodable;
  return undecodable.empty() ? std::string("no image member (jpg, jpeg, png or webp)")
                             : absl::StrCat("no decodable image member (found '", undecodable,
                                            "'; only jpg, jpeg, png and webp are decoded)");
}

std::string MissingLabelReason(const SampleEntry& entry, absl::string_view label_field) {
  for (const MemberRef& m : entry.members) {
    if (m.ext == "json") {
      // (The member's name as the scan saw it, but for the case of its extension.)
      return absl::StrCat("member '", entry.key, ".json' has no field '", label_field, "'");
    }
  }
  return absl::StrCat("no label (no .cls member and no .json with field '", label_field, "')");
}

bool IsLabelExt(absl::string_view lower_ext) { return lower_ext == "cls" || lower_ext == "json"; }

namespace {

// Labels size the class-name list, info.json's check and the trainer's last layer, so
// a label is only accepted below a configured bound: one hostile .cls must not make
// every consumer allocate gigabytes.
absl::StatusOr<int64_t> CheckLabel(int64_t label, int64_t max_classes, absl::string_view from) {
  if (label < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative label ", label, from,
                                                   " (labels must be in [0, ", max_classes, "))"));
  }
  if (label >= max_classes) {
    return absl::InvalidArgumentError(
        absl::StrCat("label ", label, from, " is outside [0, ", max_classes,
                     ") (raise --max-classes if the dataset has that many classes)"));
  }
  return label;
}

}  // namespace

absl::StatusOr<LabeledSample> MakeSampleEntry(const MemberGroup& group,
                                              absl::Span<const TarMember> members,
                                              absl::string_view label_field, int64_t max_classes) {
  if (!group.error.empty()) return absl::InvalidArgumentError(group.error);
  LabeledSample out;
  out.entry.key = group.key;
  int cls = -1;
  int json = -1;
  for (size_t i = 0; i < group.members.size(); ++i) {
    const TarMember& m = members[group.members[i]];
    const std::string& ext = group.exts[i];
    if (m.sparse) {
      return absl::InvalidArgumentError(
          absl::StrCat("member '", m.name, "' is a sparse file (not supported)"));
    }
    out.entry.members.push_back(MemberRef{ext, m.offset, m.size});
    if (ext == "cls") cls = static_cast<int>(i);
    if (ext == "json") json = static_cast<int>(i);
  }
  const int image = ChooseImage(group.exts, [](const std::string& ext) -> absl::string_view {
                      return ext;
                    }).index;
  // Whether an image-less sample is served is the dataset's question (it is when no
  // sample of the dataset has an image): see ApplyDatasetRules in dataset_index.cc.
  out.entry.image_member = image < 0 ? kNoImageMember : static_cast<uint32_t>(image);

  if (cls >= 0) {
    const TarMember& m = members[group.members[cls]];
    if (!m.has_content) {
      return absl::InvalidArgumentError(
          absl::StrCat("label member '", m.name, "' was not read (", m.size, " bytes)"));
    }
    const absl::string_view text = absl::StripAsciiWhitespace(m.content);
    absl::string_view digits = text;
    if (!digits.empty() && digits[0] == '+') digits.remove_prefix(1);  // int("+3") == 3
    int64_t label = 0;
    if (digits.empty() || !(digits[0] == '-' || (digits[0] >= '0' && digits[0] <= '9')) ||
        !absl::SimpleAtoi(digits, &label)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label member '", m.name, "' is not an integer: '", text.substr(0, 40), "'"));
    }
    absl::StatusOr<int64_t> checked =
        CheckLabel(label, max_classes, absl::StrCat(" in '", m.name, "'"));
    if (!checked.ok()) return checked.status();
    out.entry.label = *checked;
  }
  if (json >= 0) {
    const TarMember& m = members[group.members[json]];
    if (!m.has_content) {
      if (cls >= 0) return out;  // the label is known; the json was only for the class name
      return absl::InvalidArgumentError(
          absl::StrCat("label member '", m.name, "' was not read (", m.size, " bytes)"));
    }
    absl::StatusOr<std::map<std::string, JsonValue>> fields = ParseJsonObjectFields(m.content);
    if (!fields.ok()) {
      if (cls >= 0) return out;
      return absl::InvalidArgumentError(
          absl::StrCat("member '", m.name, "': ", fields.status().message()));
    }
    if (auto it = fields->find("class");
        it != fields->end() && it->second.kind == JsonValue::Kind::kString) {
      out.class_name = it->second.string;
    }
    // A json without the label field is metadata (img2dataset's): the sample has no label.
    if (auto it = fields->find(std::string(label_field)); cls < 0 && it != fields->end()) {
      if (it->second.kind != JsonValue::Kind::kInteger) {
        return absl::InvalidArgumentError(
            absl::StrCat("field '", label_field, "' of '", m.name, "' is not an integer"));
      }
      absl::StatusOr<int64_t> checked =
          CheckLabel(it->second.integer, max_classes,
                     absl::StrCat(" in field '", label_field, "' of '", m.name, "'"));
      if (!checked.ok()) return checked.status();
      out.entry.label = *checked;
    }
  }
  // Like the image, a missing label is the dataset's question; a class name without a
  // label names nothing.
  if (out.entry.label < 0) out.class_name.clear();
  return out;
}

}  // namespace shardcast

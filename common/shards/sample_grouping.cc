// WebDataset grouping rules, kept line for line with tariterators.py so that the
// index holds exactly the samples webdataset would yield, in the same order.
#include "common/shards/sample_grouping.h"

#include <cstdint>

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
    }
    MemberGroup& group = out.groups.back();
    bool duplicate = false;
    for (const std::string& seen : group.exts) duplicate = duplicate || seen == ext;
    if (duplicate) {
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
  int image = -1;
  int image_fallback = -1;
  int cls = -1;
  int json = -1;
  std::string undecodable;  // image-like extensions we do not decode, for the reason text
  for (size_t i = 0; i < group.members.size(); ++i) {
    const TarMember& m = members[group.members[i]];
    const std::string& ext = group.exts[i];
    if (m.sparse) {
      return absl::InvalidArgumentError(
          absl::StrCat("member '", m.name, "' is a sparse file (not supported)"));
    }
    out.entry.members.push_back(MemberRef{ext, m.offset, m.size});
    const size_t last_dot = ext.rfind('.');
    const absl::string_view last = last_dot == std::string::npos
                                       ? absl::string_view(ext)
                                       : absl::string_view(ext).substr(last_dot + 1);
    if (IsDecodableImageExt(ext)) {
      if (image < 0) image = static_cast<int>(i);
    } else if (IsDecodableImageExt(last)) {
      if (image_fallback < 0) image_fallback = static_cast<int>(i);
    } else if (last == "ppm" || last == "pgm" || last == "pbm" || last == "pnm" || last == "bmp" ||
               last == "gif" || last == "tif" || last == "tiff") {
      if (undecodable.empty()) undecodable = ext;
    }
    if (ext == "cls") cls = static_cast<int>(i);
    if (ext == "json") json = static_cast<int>(i);
  }
  if (image < 0) image = image_fallback;
  if (image < 0) {
    return absl::InvalidArgumentError(
        undecodable.empty() ? std::string("no image member (jpg, jpeg, png or webp)")
                            : absl::StrCat("no decodable image member (found '", undecodable,
                                           "'; only jpg, jpeg, png and webp are decoded)"));
  }
  out.entry.image_member = static_cast<uint32_t>(image);

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
    if (cls < 0) {
      auto it = fields->find(std::string(label_field));
      if (it == fields->end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("member '", m.name, "' has no field '", label_field, "'"));
      }
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
  if (out.entry.label < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no label (no .cls member and no .json with field '", label_field, "')"));
  }
  return out;
}

}  // namespace shardcast

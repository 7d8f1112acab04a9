// A small JSON reader for label files (.json members, info.json): validates a document and
// returns its top-level fields. No new dependency for what is a few hundred bytes per sample.
#ifndef SHARDCAST_COMMON_UTIL_JSON_FIELDS_H_
#define SHARDCAST_COMMON_UTIL_JSON_FIELDS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardcast {

// One top-level value. Nested objects/arrays are validated but not kept (kind only).
struct JsonValue {
  enum class Kind { kNull, kBool, kInteger, kNumber, kString, kObject, kArray };
  Kind kind = Kind::kNull;
  int64_t integer = 0;  // kInteger (an integer literal that fits int64); kBool: 0/1
  double number = 0;    // kInteger and kNumber
  std::string string;   // kString, unescaped to UTF-8
};

// Parses `text`, which must be one JSON object (surrounding whitespace allowed). Duplicate
// keys: the last wins, as in Python's json. Errors say what is wrong and where (byte offset).
absl::StatusOr<std::map<std::string, JsonValue>> ParseJsonObjectFields(absl::string_view text);

// A whole document, nested values kept: for the few inputs that are more than a flat
// object of fields (a mixture's schedule, mixture_text.h). Objects keep their members in
// document order, duplicates included, so the caller decides what a repeated key means.
struct JsonTree {
  JsonValue value;                 // its kind, and the contents of a scalar
  std::string key;                 // a member of an object: its name
  std::vector<JsonTree> children;  // kObject: its members; kArray: its elements
};

// Parses `text`, any one JSON value (surrounding whitespace allowed); errors as
// ParseJsonObjectFields's.
absl::StatusOr<JsonTree> ParseJsonTree(absl::string_view text);

// `s` as a quoted JSON string literal (control characters and quotes escaped; bytes that
// are not valid UTF-8 are replaced by U+FFFD so the output is always valid JSON).
std::string JsonQuote(absl::string_view s);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_UTIL_JSON_FIELDS_H_

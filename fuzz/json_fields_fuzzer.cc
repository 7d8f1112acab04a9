// Fuzzes the JSON reader of label members and info.json (ParseJsonObjectFields), the
// quoter, and the wire's UTF-8 escaping: whatever the bytes, no crash, quoted output
// is valid UTF-8, and escaping is one-to-one (its inverse gives the input back). The
// whole-document reader (ParseJsonTree, a mixture's schedule file) shares the parser:
// it accepts an object exactly when ParseJsonObjectFields does, with the same fields
// (the last of a repeated key, as there).
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "common/util/json_fields.h"
#include "common/util/utf8.h"

namespace {

void CheckEscaping(const std::string& bytes) {
  const std::string escaped = shardcast::EscapeToUtf8(bytes);
  if (!shardcast::IsValidUtf8(escaped)) std::abort();
  absl::StatusOr<std::string> back = shardcast::UnescapeFromUtf8(escaped);
  if (!back.ok() || *back != bytes) std::abort();
  if (!shardcast::IsValidUtf8(shardcast::JsonQuote(bytes))) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  CheckEscaping(text);
  absl::StatusOr<std::map<std::string, shardcast::JsonValue>> fields =
      shardcast::ParseJsonObjectFields(text);
  absl::StatusOr<shardcast::JsonTree> tree = shardcast::ParseJsonTree(text);
  const bool tree_is_object = tree.ok() && tree->value.kind == shardcast::JsonValue::Kind::kObject;
  if (fields.ok() != tree_is_object) std::abort();
  if (!fields.ok()) return 0;
  std::map<std::string, const shardcast::JsonValue*> last;
  for (const shardcast::JsonTree& member : tree->children) last[member.key] = &member.value;
  if (last.size() != fields->size()) std::abort();
  for (const auto& [key, value] : *fields) {
    auto it = last.find(key);
    if (it == last.end() || it->second->kind != value.kind ||
        it->second->integer != value.integer || it->second->string != value.string) {
      std::abort();
    }
    // NaN never comes out of a JSON literal, so numbers compare exactly.
    if (it->second->number != value.number) std::abort();
  }
  for (const auto& [key, value] : *fields) {
    CheckEscaping(key);
    if (value.kind == shardcast::JsonValue::Kind::kString) CheckEscaping(value.string);
  }
  return 0;
}

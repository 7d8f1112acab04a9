// Fuzzes the JSON reader of label members and info.json (ParseJsonObjectFields), the
// quoter, and the wire's UTF-8 escaping: whatever the bytes, no crash, quoted output
// is valid UTF-8, and escaping is one-to-one (its inverse gives the input back).
#include <cstdint>
#include <cstdlib>
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
  if (!fields.ok()) return 0;
  for (const auto& [key, value] : *fields) {
    CheckEscaping(key);
    if (value.kind == shardcast::JsonValue::Kind::kString) CheckEscaping(value.string);
  }
  return 0;
}

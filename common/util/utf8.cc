// UTF-8 checks and the backslash escaping of common/util/utf8.h.
#include "common/util/utf8.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardcast {

size_t Utf8SequenceLength(absl::string_view s, size_t i) { return DecodeUtf8At(s, i).length; }

Utf8Char DecodeUtf8At(absl::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  uint32_t min = 0;
  if (c < 0x80) return {c, 1};
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    min = 0x10000;
  } else {
    return {};
  }
  if (i + n > s.size()) return {};
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return {};
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {};
  return {static_cast<char32_t>(cp), n};
}

bool IsValidUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string EscapeToUtf8(absl::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = Utf8SequenceLength(bytes, i);
    if (n == 0) {
      const unsigned char c = static_cast<unsigned char>(bytes[i]);
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
      ++i;
    } else if (bytes[i] == '\\') {
      out += "\\\\";
      ++i;
    } else {
      out.append(bytes.data() + i, n);
      i += n;
    }
  }
  return out;
}

absl::StatusOr<std::string> UnescapeFromUtf8(absl::string_view escaped) {
  const auto hex_value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;  // EscapeToUtf8 writes lower case only
  };
  std::string out;
  out.reserve(escaped.size());
  for (size_t i = 0; i < escaped.size(); ++i) {
    if (escaped[i] != '\\') {
      out.push_back(escaped[i]);
      continue;
    }
    if (i + 1 < escaped.size() && escaped[i + 1] == '\\') {
      out.push_back('\\');
      ++i;
      continue;
    }
    if (i + 3 < escaped.size() && escaped[i + 1] == 'x' && hex_value(escaped[i + 2]) >= 0 &&
        hex_value(escaped[i + 3]) >= 0) {
      out.push_back(static_cast<char>(hex_value(escaped[i + 2]) * 16 + hex_value(escaped[i + 3])));
      i += 3;
      continue;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("bad escape at byte ", i, " (only \\\\ and \\xNN are produced)"));
  }
  // Only bytes that were not valid UTF-8 are escaped as \xNN: text that decodes to a
  // different escaping was not produced by EscapeToUtf8.
  if (EscapeToUtf8(out) != escaped) {
    return absl::InvalidArgumentError("not in EscapeToUtf8's canonical form");
  }
  return out;
}

}  // namespace shardcast

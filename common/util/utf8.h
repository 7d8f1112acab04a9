// UTF-8 validation and the one-to-one escaping that turns arbitrary bytes (tar member
// names, label text) into strings that proto3 `string` fields and JSON can carry.
#ifndef SHARDCAST_COMMON_UTIL_UTF8_H_
#define SHARDCAST_COMMON_UTIL_UTF8_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardcast {

// Length of the valid UTF-8 sequence that starts at s[i] (1 to 4), or 0 when the byte
// there does not start one (stray continuation byte, overlong form, surrogate, past
// U+10FFFF, cut short). REQUIRES: i < s.size().
size_t Utf8SequenceLength(absl::string_view s, size_t i);

// The character whose UTF-8 sequence starts at s[i]: its code point and its length,
// the length 0 (and the code point 0) where Utf8SequenceLength says 0.
// REQUIRES: i < s.size().
struct Utf8Char {
  char32_t code_point = 0;
  size_t length = 0;
};
Utf8Char DecodeUtf8At(absl::string_view s, size_t i);

bool IsValidUtf8(absl::string_view s);

// `bytes` as valid UTF-8, one-to-one: every backslash becomes "\\", every byte that is
// not part of a valid UTF-8 sequence becomes "\x" and two lower-case hex digits
// ("caf\xe9" for the Latin-1 bytes 63 61 66 e9); everything else is unchanged. Escaping
// the backslash itself is what keeps it one-to-one: the bytes "caf\xe9" (a literal
// backslash) come out as "caf\\xe9". Valid UTF-8 without a backslash (nearly every
// real name) is returned as it is.
std::string EscapeToUtf8(absl::string_view bytes);

// The inverse of EscapeToUtf8. InvalidArgument for text it cannot have produced (a
// lone or unknown backslash escape, a "\x" escape of a byte that would have been
// valid UTF-8 there).
absl::StatusOr<std::string> UnescapeFromUtf8(absl::string_view escaped);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_UTIL_UTF8_H_

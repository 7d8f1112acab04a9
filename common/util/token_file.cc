// PEM and bearer-token files (see token_file.h).
#include "common/util/token_file.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/util/regular_file.h"

namespace shardcast {
namespace {

// A certificate chain, a key or a token list is a few KB; a file of more is not one.
constexpr int64_t kMaxSecurityFileBytes = int64_t{1} << 20;

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseTokens(absl::string_view text) {
  std::vector<std::string> tokens;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    for (char c : line) {
      // What an HTTP/2 header value can carry unchanged: visible ASCII.
      const unsigned char u = static_cast<unsigned char>(c);
      if (u < 0x21 || u > 0x7e) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line_number,
                         ": a token is visible ASCII without whitespace or control characters"));
      }
    }
    tokens.emplace_back(line);
  }
  return tokens;
}

absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxSecurityFileBytes);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat(flag, " '", path, "': ", text.status().message()));
  }
  if (text->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "': empty"));
  }
  if (text->find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "': not a PEM file"));
  }
  return text;
}

absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxSecurityFileBytes);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("token file '", path, "': ", text.status().message()));
  }
  absl::StatusOr<std::vector<std::string>> tokens = ParseTokens(*text);
  if (!tokens.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file '", path, "': ", tokens.status().message()));
  }
  if (tokens->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token file '", path, "' holds no token (one a line; blank and '#' lines are ignored)"));
  }
  return tokens;
}

}  // namespace shardcast

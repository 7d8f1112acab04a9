// URL redaction (see url_redaction.h).
#include "common/util/url_redaction.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace shardcast {
namespace {

constexpr char kRedacted[] = "REDACTED";

bool IsSchemeChar(char c) { return absl::ascii_isalnum(c) || c == '+' || c == '-' || c == '.'; }

// Query parameters whose value is a secret: signatures, credentials, tokens, keys.
bool IsSecretParameter(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const absl::string_view exact : {"sig", "key", "pwd", "auth", "code", "apikey"}) {
    if (lower == exact) return true;
  }
  for (const absl::string_view part :
       {"token", "secret", "password", "passwd", "signature", "credential", "api_key", "api-key",
        "access_key", "accesskey", "private"}) {
    if (absl::StrContains(lower, part)) return true;
  }
  return false;
}

// "a=1&sig=2" -> "a=1&sig=REDACTED".
std::string RedactedQuery(absl::string_view query) {
  std::vector<std::string> params;
  for (absl::string_view param : absl::StrSplit(query, '&')) {
    const size_t eq = param.find('=');
    if (eq != absl::string_view::npos && IsSecretParameter(param.substr(0, eq))) {
      params.push_back(absl::StrCat(param.substr(0, eq + 1), kRedacted));
    } else {
      params.push_back(std::string(param));
    }
  }
  return absl::StrJoin(params, "&");
}

}  // namespace

size_t UrlAuthorityEnd(absl::string_view url, size_t start) {
  return std::min(url.find_first_of("/?#", start), url.size());
}

size_t UrlUserinfoEnd(absl::string_view url, size_t start, size_t end) {
  const size_t at = url.substr(0, end).rfind('@');
  return at != absl::string_view::npos && at >= start ? at : absl::string_view::npos;
}

std::string RedactedUrl(absl::string_view url) {
  const size_t sep = url.find("://");
  if (sep == absl::string_view::npos) return std::string(url);
  const size_t start = sep + 3;
  const size_t end = UrlAuthorityEnd(url, start);
  std::string out(url.substr(0, start));
  const size_t at = UrlUserinfoEnd(url, start, end);
  if (at != absl::string_view::npos) {
    const absl::string_view userinfo = url.substr(start, at - start);
    const size_t colon = userinfo.find(':');
    absl::StrAppend(&out, colon == absl::string_view::npos ? "" : userinfo.substr(0, colon + 1),
                    kRedacted, "@");
  }
  const size_t host = at == absl::string_view::npos ? start : at + 1;
  const size_t fragment = std::min(url.find('#', end), url.size());
  const size_t query = std::min(url.find('?', end), fragment);
  absl::StrAppend(&out, url.substr(host, query - host));
  if (query < fragment) {
    absl::StrAppend(&out, "?", RedactedQuery(url.substr(query + 1, fragment - query - 1)));
  }
  absl::StrAppend(&out, url.substr(fragment));
  return out;
}

std::string RedactUrlsIn(absl::string_view text) {
  std::string out;
  size_t done = 0;  // text[0, done) is in `out`
  for (size_t sep = text.find("://"); sep != absl::string_view::npos;
       sep = text.find("://", std::max(sep + 3, done))) {
    size_t begin = sep;
    while (begin > done && IsSchemeChar(text[begin - 1])) --begin;
    if (begin == sep || !absl::ascii_isalpha(text[begin])) continue;
    // A URL ends where quoting or a blank does; punctuation after it is the sentence's.
    size_t end = sep + 3;
    while (end < text.size() && !absl::ascii_isspace(text[end]) &&
           absl::string_view("\"'<>`").find(text[end]) == absl::string_view::npos) {
      ++end;
    }
    while (end > sep + 3 &&
           absl::string_view(").,;:]").find(text[end - 1]) != absl::string_view::npos) {
      --end;
    }
    absl::StrAppend(&out, text.substr(done, begin - done),
                    RedactedUrl(text.substr(begin, end - begin)));
    done = end;
  }
  absl::StrAppend(&out, text.substr(done));
  return out;
}

}  // namespace shardcast

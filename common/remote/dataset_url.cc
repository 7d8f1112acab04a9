// Dataset locations: the scheme decides the kind, braces expand HTTP(S) URLs the way
// webdataset's braceexpand does (without nesting), and the shared base is where shard
// names start.
#include "common/remote/dataset_url.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/util/url_redaction.h"

namespace shardcast::remote {
namespace {

// Bounds longer than this could overflow uint64_t; no shard count needs them.
constexpr size_t kMaxRangeDigits = 18;

// One piece of a pattern: literal text, a list {a,b,c} or a numeric range {lo..hi}.
// Ranges stay unexpanded until the product of all counts is known to be within
// kMaxExpandedUrls ({0..999999999} must not allocate a billion strings to be refused).
struct Segment {
  enum class Kind { kLiteral, kList, kRange };
  Kind kind = Kind::kLiteral;
  std::string literal;
  std::vector<std::string> items;
  uint64_t lo = 0;
  uint64_t hi = 0;
  int width = 0;  // zero-padding of a range: the first bound's length

  uint64_t Count() const {
    switch (kind) {
      case Kind::kLiteral:
        return 1;
      case Kind::kList:
        return items.size();
      case Kind::kRange:
        return hi - lo + 1;
    }
    return 1;
  }

  std::vector<std::string> Alternatives() const {
    switch (kind) {
      case Kind::kLiteral:
        return {literal};
      case Kind::kList:
        return items;
      case Kind::kRange: {
        std::vector<std::string> out;
        out.reserve(hi - lo + 1);
        for (uint64_t n = lo;; ++n) {
          out.push_back(absl::StrFormat("%0*d", width, n));
          if (n == hi) break;
        }
        return out;
      }
    }
    return {};
  }
};

bool AllDigits(absl::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}

absl::StatusOr<Segment> ParseGroup(absl::string_view body, absl::string_view pattern) {
  if (body.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("empty braces {} in \"", pattern, "\""));
  }
  Segment seg;
  // A comma makes a list even when an item contains "..": {a..b,c} is two names.
  if (!absl::StrContains(body, ',') && absl::StrContains(body, "..")) {
    const size_t dots = body.find("..");
    const absl::string_view first = body.substr(0, dots);
    const absl::string_view last = body.substr(dots + 2);
    if (!AllDigits(first) || !AllDigits(last)) {
      return absl::InvalidArgumentError(
          absl::StrCat("range {", body, "} in \"", pattern,
                       "\": both bounds must be non-negative integers (e.g. {000..127})"));
    }
    if (first.size() > kMaxRangeDigits || last.size() > kMaxRangeDigits) {
      return absl::InvalidArgumentError(
          absl::StrCat("range {", body, "} in \"", pattern, "\": bounds too large"));
    }
    seg.kind = Segment::Kind::kRange;
    // Cannot fail: all digits, at most 18 of them.
    (void)absl::SimpleAtoi(first, &seg.lo);
    (void)absl::SimpleAtoi(last, &seg.hi);
    if (seg.lo > seg.hi) {
      return absl::InvalidArgumentError(absl::StrCat(
          "range {", body, "} in \"", pattern, "\" runs backwards (", seg.lo, " > ", seg.hi, ")"));
    }
    seg.width = static_cast<int>(first.size());
    return seg;
  }
  seg.kind = Segment::Kind::kList;
  // Empty items are kept, as braceexpand keeps them: shard{,-b}.tar names two files.
  seg.items = absl::StrSplit(body, ',');
  return seg;
}

absl::StatusOr<std::vector<Segment>> ParsePattern(absl::string_view pattern) {
  std::vector<Segment> segments;
  std::string literal;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '}') {
      return absl::InvalidArgumentError(
          absl::StrCat("unbalanced '}' at offset ", i, " in \"", pattern, "\""));
    }
    if (c != '{') {
      literal.push_back(c);
      continue;
    }
    const size_t close = pattern.find_first_of("{}", i + 1);
    if (close == absl::string_view::npos || pattern[close] != '}') {
      if (close != absl::string_view::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("nested braces at offset ", close, " in \"", pattern,
                         "\" are not supported: write the groups side by side ({a,b}{0..9})"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("unbalanced '{' at offset ", i, " in \"", pattern, "\""));
    }
    if (!literal.empty()) {
      Segment lit;
      lit.literal = std::move(literal);
      literal.clear();
      segments.push_back(std::move(lit));
    }
    absl::StatusOr<Segment> group = ParseGroup(pattern.substr(i + 1, close - i - 1), pattern);
    if (!group.ok()) return group.status();
    segments.push_back(*std::move(group));
    i = close;
  }
  if (!literal.empty()) {
    Segment lit;
    lit.literal = std::move(literal);
    segments.push_back(std::move(lit));
  }
  return segments;
}

bool ValidBucketName(absl::string_view bucket) {
  return !bucket.empty() && std::none_of(bucket.begin(), bucket.end(), [](char c) {
    return absl::ascii_isspace(c) || absl::ascii_iscntrl(c);
  });
}

// "https://Host:8080/d/x.tar" -> "https://host:8080" (scheme and host compare without
// case); empty when there is no host.
std::string Origin(absl::string_view url) {
  const size_t sep = url.find("://");
  const size_t host_start = sep + 3;
  const size_t host_end = std::min(url.find_first_of("/?#", host_start), url.size());
  if (host_end == host_start) return std::string();
  return absl::AsciiStrToLower(url.substr(0, host_end));
}

// ---- Secrets in URLs (issue 35): the userinfo (redaction: common/util/url_redaction.h).

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX sequences decoded (curl sends the decoded user and password); others kept.
std::string PercentDecoded(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && HexValue(text[i + 1]) >= 0 &&
        HexValue(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(text[i + 1]) * 16 + HexValue(text[i + 2])));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

// The location with its userinfo taken out, and the credentials it held.
struct WithoutUserinfo {
  std::string bare;
  std::optional<UrlCredentials> credentials;
};

WithoutUserinfo SplitUserinfo(absl::string_view text) {
  WithoutUserinfo out;
  const size_t start = text.find("://") + 3;
  const size_t end = UrlAuthorityEnd(text, start);
  const size_t at = UrlUserinfoEnd(text, start, end);
  if (at == absl::string_view::npos) {
    out.bare = std::string(text);
    return out;
  }
  const absl::string_view userinfo = text.substr(start, at - start);
  const size_t colon = userinfo.find(':');
  UrlCredentials credentials;
  credentials.user = PercentDecoded(userinfo.substr(0, colon));
  if (colon != absl::string_view::npos) {
    credentials.password = PercentDecoded(userinfo.substr(colon + 1));
  }
  out.credentials = std::move(credentials);
  out.bare = absl::StrCat(text.substr(0, start), text.substr(at + 1));
  return out;
}

// `text` without its userinfo (SplitUserinfo took it); ParseDatasetUrl sets `text`.
absl::StatusOr<DatasetUrl> ParseHttp(absl::string_view text) {
  DatasetUrl out;
  out.kind = DatasetUrl::Kind::kHttp;
  absl::StatusOr<std::vector<std::string>> urls = ExpandBraces(text);
  if (!urls.ok()) return urls.status();
  out.urls = *std::move(urls);

  const std::string origin = Origin(out.urls.front());
  if (origin.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", out.urls.front(), "\" has no host"));
  }
  absl::string_view common = out.urls.front();
  for (const std::string& url : out.urls) {
    if (Origin(url) != origin) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", text, "\" expands to URLs on different hosts (", out.urls.front(),
                       ", ", url, "): a dataset's shards share one scheme and host"));
    }
    if (absl::EndsWith(url, "/")) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", url,
                       "\" ends in '/': a directory cannot be listed over plain HTTP; name "
                       "the shards with braces (https://host/d/shard-{000000..000127}.tar)"));
    }
    size_t n = 0;
    while (n < common.size() && n < url.size() && common[n] == url[n]) ++n;
    common = common.substr(0, n);
  }
  // A query string may hold '/' (presigned URLs do); the base ends in the path.
  common = common.substr(0, std::min(common.find_first_of("?#"), common.size()));
  const size_t slash = common.rfind('/');
  const size_t host_start = out.urls.front().find("://") + 3;
  if (slash == absl::string_view::npos || slash < host_start) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text, "\" names no path on its host: shards are files (https://host/d/x.tar)"));
  }
  out.base = std::string(common.substr(0, slash + 1));
  // Shard names are the URLs less the base, so two equal URLs would be one shard twice.
  std::vector<absl::string_view> sorted(out.urls.begin(), out.urls.end());
  std::sort(sorted.begin(), sorted.end());
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" names \"", *dup, "\" more than once"));
  }
  return out;
}

absl::StatusOr<DatasetUrl> ParseS3(absl::string_view text) {
  if (text.find_first_of("{}") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text, "\": braces are for http(s) URLs; s3:// lists the prefix (s3://bucket/d/)"));
  }
  DatasetUrl out;
  out.kind = DatasetUrl::Kind::kS3;
  out.text = std::string(text);
  const absl::string_view rest = text.substr(text.find("://") + 3);
  const size_t slash = rest.find('/');
  const absl::string_view bucket = rest.substr(0, slash);
  if (bucket.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" names no bucket (s3://bucket/prefix/)"));
  }
  if (absl::StrContains(bucket, '@')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text,
        "\": an s3:// URL carries no credentials; they come from "
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, --s3-profile or the instance's role"));
  }
  if (!ValidBucketName(bucket)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\": bucket name \"", bucket, "\" contains whitespace"));
  }
  out.bucket = std::string(bucket);
  if (slash != absl::string_view::npos) out.prefix = std::string(rest.substr(slash + 1));
  if (!out.prefix.empty() && out.prefix.back() != '/') out.prefix.push_back('/');
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandBraces(absl::string_view pattern) {
  absl::StatusOr<std::vector<Segment>> segments = ParsePattern(pattern);
  if (!segments.ok()) return segments.status();
  uint64_t total = 1;
  for (const Segment& seg : *segments) {
    const uint64_t count = seg.Count();
    if (count > kMaxExpandedUrls || total > kMaxExpandedUrls / count) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", pattern, "\" expands to more than ", kMaxExpandedUrls, " URLs"));
    }
    total *= count;
  }
  std::vector<std::string> out = {std::string()};
  // Each group multiplies what the groups to its left made, so the leftmost varies
  // slowest: {a,b}{0..1} -> a0 a1 b0 b1.
  for (const Segment& seg : *segments) {
    if (seg.kind == Segment::Kind::kLiteral) {
      for (std::string& s : out) s += seg.literal;
      continue;
    }
    const std::vector<std::string> alternatives = seg.Alternatives();
    std::vector<std::string> next;
    next.reserve(out.size() * alternatives.size());
    for (const std::string& prefix : out) {
      for (const std::string& alt : alternatives) next.push_back(absl::StrCat(prefix, alt));
    }
    out = std::move(next);
  }
  return out;
}

namespace {

// file:///path: the path after "file://" must be absolute (no host: file://host/...
// would name another machine's disk).
absl::StatusOr<DatasetUrl> ParseFile(absl::string_view text, size_t sep) {
  const absl::string_view path = text.substr(sep + 3);
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\": a file:// URL names an absolute path: file:///dir"));
  }
  DatasetUrl out;
  out.kind = DatasetUrl::Kind::kFile;
  out.text = std::string(text);
  out.dir = std::string(path);
  return out;
}

absl::StatusOr<DatasetUrl> ParseUnredacted(absl::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError("empty dataset location");
  const size_t sep = text.find("://");
  if (sep == absl::string_view::npos) {
    DatasetUrl out;
    out.kind = DatasetUrl::Kind::kLocal;
    out.text = std::string(text);
    out.dir = std::string(text);
    return out;
  }
  const std::string scheme = absl::AsciiStrToLower(text.substr(0, sep));
  if (scheme == "s3") return ParseS3(text);
  if (scheme == "http" || scheme == "https") {
    WithoutUserinfo split = SplitUserinfo(text);
    absl::StatusOr<DatasetUrl> url = ParseHttp(split.bare);
    if (!url.ok()) return url.status();
    url->credentials = std::move(split.credentials);
    return url;
  }
  if (scheme == "file") return ParseFile(text, sep);
  if (scheme == "gs") {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text,
        "\": gs:// is not supported; reach Google Cloud Storage through its S3 API: "
        "s3://BUCKET/PREFIX with --s3-endpoint https://storage.googleapis.com (and HMAC keys)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("\"", text, "\": unknown scheme \"", text.substr(0, sep),
                   "://\" (a dataset is a local directory, s3://bucket/prefix/ or "
                   "http(s):// URLs, or file:///path)"));
}

}  // namespace

absl::StatusOr<DatasetUrl> ParseDatasetUrl(absl::string_view text) {
  absl::StatusOr<DatasetUrl> url = ParseUnredacted(text);
  // Messages quote the location: they are shown (status, logs), so its secrets go.
  if (!url.ok()) return absl::Status(url.status().code(), RedactUrlsIn(url.status().message()));
  if (url->kind != DatasetUrl::Kind::kLocal) url->text = RedactedUrl(text);
  return url;
}

}  // namespace shardcast::remote

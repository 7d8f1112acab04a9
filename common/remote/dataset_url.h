// Where a dataset's shards live, from the text of --shards / --dataset NAME=...: a
// local directory, an S3 prefix (s3://bucket/prefix/), HTTP(S) URLs written with the
// brace notation webdataset users know (https://host/d/shard-{000000..000127}.tar), or
// a local directory read as an object store (file:///path/to/dir).
#ifndef SHARDCAST_COMMON_REMOTE_DATASET_URL_H_
#define SHARDCAST_COMMON_REMOTE_DATASET_URL_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/util/url_redaction.h"  // RedactedUrl, RedactUrlsIn: what parsing promises

namespace shardcast::remote {

// HTTP Basic credentials from a URL's userinfo (http://user:password@host/...),
// percent-decoded. They reach the fetcher only (HttpFetcher::AddCredentials), never a
// URL that is shown, logged or used as a key.
struct UrlCredentials {
  std::string user;
  std::string password;  // empty for a user alone (https://TOKEN@host/...)
};

struct DatasetUrl {
  enum class Kind { kLocal, kS3, kHttp, kFile };
  Kind kind = Kind::kLocal;
  // As given, with its secrets redacted (RedactedUrl): what logs and errors show.
  std::string text;

  // kLocal: the directory, as given. kFile: the absolute path of file:///path (the
  // URL's path verbatim: no percent-decoding).
  std::string dir;

  // kS3: "s3://bucket/prefix/" -> bucket "bucket", prefix "prefix/". The prefix is
  // used as ListObjectsV2's prefix verbatim, except that a non-empty prefix without a
  // trailing '/' gets one (a dataset is a "directory": s3://b/train lists train/...,
  // never train2/...).
  std::string bucket;
  std::string prefix;

  // kHttp: every URL the braces expand to, in expansion order (left to right,
  // numeric ranges keep the width of their first bound: {000..012} -> 000, 001, ...,
  // 012; lists {a,b,c}; several groups multiply). A URL without braces is one shard.
  std::vector<std::string> urls;
  // The part of every URL up to and including its last '/' shared by all of them
  // ("https://host/d/"): shard names (ShardInfo::path) are the URLs with it removed,
  // and the dataset index file is looked for there.
  std::string base;
  // kHttp: the userinfo of the location, taken out of `urls`, `base` and `text`.
  std::optional<UrlCredentials> credentials;
};

// INVALID_ARGUMENT with what is wrong: "s3://" without a bucket, an unknown scheme
// ("gs://..."; the message says to use the S3 API endpoint), unbalanced or empty
// braces, a range whose bounds are not numbers or run backwards, more than
// kMaxExpandedUrls URLs, an HTTP URL that ends in '/' (a directory cannot be listed
// over plain HTTP: name the shards with braces), URLs that do not share a base, or
// an s3:// URL with userinfo (S3 credentials come from the environment or a profile),
// a file:// URL with a host or without a path (file:///path is the form).
// No message holds a password or a secret query value (RedactUrlsIn,
// common/util/url_redaction.h).
absl::StatusOr<DatasetUrl> ParseDatasetUrl(absl::string_view text);

// Brace expansion alone (exposed for tests and for shardcast-ctl).
absl::StatusOr<std::vector<std::string>> ExpandBraces(absl::string_view pattern);

inline constexpr size_t kMaxExpandedUrls = 1000000;

}  // namespace shardcast::remote

#endif  // SHARDCAST_COMMON_REMOTE_DATASET_URL_H_

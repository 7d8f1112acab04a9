// Where a dataset's shards live, from the text of --shards / --dataset NAME=...: a
// local directory, an S3 prefix (s3://bucket/prefix/) or HTTP(S) URLs written with the
// brace notation webdataset users know (https://host/d/shard-{000000..000127}.tar).
#ifndef SHARDCAST_COMMON_REMOTE_DATASET_URL_H_
#define SHARDCAST_COMMON_REMOTE_DATASET_URL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardcast::remote {

struct DatasetUrl {
  enum class Kind { kLocal, kS3, kHttp };
  Kind kind = Kind::kLocal;
  std::string text;  // as given

  // kLocal: the directory, as given.
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
};

// INVALID_ARGUMENT with what is wrong: "s3://" without a bucket, an unknown scheme
// ("gs://..."; the message says to use the S3 API endpoint), unbalanced or empty
// braces, a range whose bounds are not numbers or run backwards, more than
// kMaxExpandedUrls URLs, an HTTP URL that ends in '/' (a directory cannot be listed
// over plain HTTP: name the shards with braces), or URLs that do not share a base.
absl::StatusOr<DatasetUrl> ParseDatasetUrl(absl::string_view text);

// Brace expansion alone (exposed for tests and for shardcast-ctl).
absl::StatusOr<std::vector<std::string>> ExpandBraces(absl::string_view pattern);

inline constexpr size_t kMaxExpandedUrls = 1000000;

}  // namespace shardcast::remote

#endif  // SHARDCAST_COMMON_REMOTE_DATASET_URL_H_

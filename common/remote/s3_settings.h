// How to reach S3 (or an S3-compatible store: MinIO, Ceph, GCS's S3 API) the way its
// users expect: credentials, region and endpoint from the standard environment
// variables and files of the AWS CLI and SDKs, overridable by flags.
#ifndef SHARDCAST_COMMON_REMOTE_S3_SETTINGS_H_
#define SHARDCAST_COMMON_REMOTE_S3_SETTINGS_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace shardcast::remote {

struct S3Settings {
  std::string access_key_id;  // empty = unsigned requests (a public bucket)
  std::string secret_access_key;
  std::string session_token;  // sent as x-amz-security-token when set
  std::string region = "us-east-1";
  // Scheme, host and port, no trailing '/': "https://s3.us-east-1.amazonaws.com" by
  // default, "http://127.0.0.1:9000" for a MinIO on loopback.
  std::string endpoint;
  // true: https://endpoint/bucket/key; false: https://bucket.endpoint/key (AWS's
  // default). A custom endpoint defaults to path-style (MinIO, Ceph and s3rver need it).
  // A bucket whose name cannot be a DNS label (uppercase, '_', a '.' under https) is
  // addressed path-style either way, as the AWS SDKs do.
  bool path_style = false;
  // Where each setting came from, for the server's startup log line and errors:
  // e.g. "credentials from AWS_ACCESS_KEY_ID; region from ~/.aws/config [profile x]".
  std::string described_source;

  // The URL of `key` in `bucket` (key's bytes percent-encoded as SigV4 expects: every
  // byte but unreserved ones and '/').
  std::string ObjectUrl(const std::string& bucket, const std::string& key) const;
  // The bucket's URL for ListObjectsV2, without a query: ".../bucket/" or "https://bucket.host/".
  std::string BucketUrl(const std::string& bucket) const;
};

// What the command line says; an unset optional leaves the environment's choice.
struct S3Flags {
  std::optional<std::string> endpoint;  // --s3-endpoint
  std::optional<std::string> region;    // --s3-region
  std::optional<std::string> profile;   // --s3-profile
  std::optional<bool> path_style;       // --s3-path-style
};

// Reads an environment variable; std::getenv by default (tests pass their own).
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup ProcessEnvironment();

// Resolution, as the AWS CLI does it:
// - credentials: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); else
//   the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, default
//   $HOME/.aws/credentials), section [profile] where profile = flag, AWS_PROFILE,
//   "default" (aws_access_key_id, aws_secret_access_key, aws_session_token); else the
//   same keys in the config file's [profile NAME] ([default] for default); else none
//   (unsigned). One of the pair without the other is an error naming both.
// - region: flag, AWS_REGION, AWS_DEFAULT_REGION, the config file (AWS_CONFIG_FILE,
//   default $HOME/.aws/config) [profile NAME] / [default] "region", else us-east-1.
// - endpoint: flag, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the config file's
//   endpoint_url, else https://s3.REGION.amazonaws.com.
// - path style: flag, else true for a custom endpoint, false for AWS's (an endpoint
//   given explicitly on *.amazonaws.com counts as AWS's).
// An environment variable set to "" counts as unset. The profile "default" may be in no
// file; any other profile named by the flag or AWS_PROFILE must be in one of them.
// Errors: INVALID_ARGUMENT naming the setting and its source (an endpoint that is not
// http(s)://host[:port], a profile named by the flag or AWS_PROFILE that no file has,
// half a key pair); a credentials or config file that exists but cannot be read.
absl::StatusOr<S3Settings> ResolveS3Settings(const S3Flags& flags,
                                             const EnvLookup& env = ProcessEnvironment());

}  // namespace shardcast::remote

#endif  // SHARDCAST_COMMON_REMOTE_S3_SETTINGS_H_

// The client side of the remote tests' loopback stores (object_servers.h): a fetcher
// whose retries are quick, and the S3 settings that s3rver and the fault proxy's SigV4
// verifier accept.
#ifndef SHARDCAST_TESTS_SUPPORT_REMOTE_CLIENTS_H_
#define SHARDCAST_TESTS_SUPPORT_REMOTE_CLIENTS_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/remote/http_fetcher.h"
#include "common/remote/s3_settings.h"
#include "gtest/gtest.h"
#include "tests/support/object_servers.h"

namespace shardcast::testing_util {

// Quick retries, so that the tests that retry take milliseconds between attempts.
inline remote::FetchOptions QuickRetryOptions() {
  remote::FetchOptions options;
  options.request_deadline = absl::Seconds(20);
  options.first_backoff = absl::Milliseconds(10);
  options.max_backoff = absl::Milliseconds(100);
  return options;
}

// A fetcher with `options`; null, and the test failed, when they are refused.
inline std::unique_ptr<remote::HttpFetcher> MakeQuickFetcher(
    const remote::FetchOptions& options = QuickRetryOptions()) {
  absl::StatusOr<std::unique_ptr<remote::HttpFetcher>> fetcher =
      remote::HttpFetcher::Create(options);
  EXPECT_TRUE(fetcher.ok()) << fetcher.status();
  return fetcher.ok() ? std::move(*fetcher) : nullptr;
}

// The secret the tests sign with: s3rver checks only the key id, the fault proxy's
// verifier (FaultProxy::VerifySigV4) the signature made with this secret.
inline constexpr char kS3rverTestSecret[] = "secret-test-key";

// Path-style S3 settings for `endpoint` (s3rver, or the proxy in front of it), signed
// with s3rver's only key id and `secret`.
inline remote::S3Settings S3rverSettings(const std::string& endpoint,
                                         const std::string& secret = kS3rverTestSecret) {
  remote::S3Settings settings;
  settings.endpoint = endpoint;
  settings.path_style = true;
  settings.access_key_id = S3rverServer::kAccessKeyId;
  settings.secret_access_key = secret;
  return settings;
}

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_SUPPORT_REMOTE_CLIENTS_H_

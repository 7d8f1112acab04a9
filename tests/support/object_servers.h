// Real object stores on loopback for the remote-shard tests (issue 27), started and
// stopped by the test: nginx serving a directory (HTTP range reads), s3rver (npm, on
// Debian's nodejs) serving buckets, and tools/fault_proxy.py in front of either to cut
// bodies, answer 500/503 with Retry-After, trickle, delay, or check SigV4 signatures.
// The programs come from tools/setup-test-servers.sh (CI runs it); a test that cannot
// find one fails, naming the script. No gtest dependency (benchmarks use it too).
#ifndef SHARDCAST_TESTS_SUPPORT_OBJECT_SERVERS_H_
#define SHARDCAST_TESTS_SUPPORT_OBJECT_SERVERS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace shardcast::testing_util {

// nginx serving `dir` read-only (range requests, ETags, keep-alive) on a free
// loopback port, in its own temporary prefix. Stopped by the destructor.
class NginxServer {
 public:
  static absl::StatusOr<std::unique_ptr<NginxServer>> Start(const std::string& dir);
  ~NginxServer();
  std::string url() const;  // "http://127.0.0.1:PORT" (no trailing '/')
  int port() const;
};

// s3rver on a free loopback port with its own temporary data directory. Accepts any
// credentials (it checks no signature: put a FaultProxy with verify_sigv4 in front to
// check them).
class S3rverServer {
 public:
  static absl::StatusOr<std::unique_ptr<S3rverServer>> Start();
  ~S3rverServer();
  std::string endpoint() const;  // "http://127.0.0.1:PORT"
  absl::Status CreateBucket(const std::string& bucket);
  // Puts `bytes` at `key` (replacing what was there: a new ETag when the bytes differ).
  absl::Status Put(const std::string& bucket, const std::string& key, const std::string& bytes);
  // Every regular file directly in `dir` at prefix + its name.
  absl::Status PutDirectory(const std::string& bucket, const std::string& prefix,
                            const std::string& dir);
};

// tools/fault_proxy.py forwarding to `upstream` ("http://127.0.0.1:PORT"). Faults are
// armed through its control endpoint and apply to requests whose path contains
// `match` (every request when empty), for the next `count` of them (-1 = all).
class FaultProxy {
 public:
  static absl::StatusOr<std::unique_ptr<FaultProxy>> Start(const std::string& upstream);
  ~FaultProxy();
  std::string url() const;  // "http://127.0.0.1:PORT"

  // Sends the response's headers and `after_bytes` bytes of its body, then closes.
  absl::Status CutBody(const std::string& match, int64_t after_bytes, int count);
  // Answers `status` (500, 503, ...) with Retry-After: retry_after_seconds (omitted when
  // < 0) instead of forwarding.
  absl::Status FailWith(const std::string& match, int status, int retry_after_seconds, int count);
  // Sends the body at `bytes_per_second`.
  absl::Status Trickle(const std::string& match, int64_t bytes_per_second, int count);
  // Waits `milliseconds` before forwarding each request (a round trip to a far store).
  absl::Status Delay(int milliseconds);
  // Answers 403 SignatureDoesNotMatch to any request whose AWS SigV4 signature (header
  // form) is not right for these credentials; nullopt turns the check off.
  absl::Status VerifySigV4(const std::string& access_key_id, const std::string& secret_access_key);
  absl::Status ClearFaults();

  // Requests forwarded or answered so far, by kind ("forwarded", "cut", "failed",
  // "trickled", "bad_signature") and in all ("requests").
  absl::StatusOr<int64_t> Count(const std::string& kind) const;
};

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_SUPPORT_OBJECT_SERVERS_H_

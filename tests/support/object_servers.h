// Real object stores on loopback for the remote-shard tests (issue 27), started and
// stopped by the test: nginx serving a directory (HTTP range reads), s3rver (npm, on
// Debian's nodejs) serving buckets, and tools/fault_proxy.py in front of either to cut
// bodies, answer 500/503 with Retry-After (or 403/404), trickle, send a malformed 206 or
// a body longer than the object, delay, or check SigV4 signatures.
// The programs come from tools/setup-test-servers.sh (CI runs it); a test that cannot
// find one fails (FAILED_PRECONDITION), naming the script. Overrides: SHARDCAST_NGINX,
// SHARDCAST_S3RVER (the programs), SHARDCAST_TEST_TOOLS (where the script put s3rver).
// No gtest dependency (benchmarks use it too).
#ifndef SHARDCAST_TESTS_SUPPORT_OBJECT_SERVERS_H_
#define SHARDCAST_TESTS_SUPPORT_OBJECT_SERVERS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace shardcast::testing_util {

class ChildProcess;
class TempDir;

// nginx serving `dir` read-only (range requests, ETags, keep-alive) on a free
// loopback port, in its own temporary prefix. Stopped by the destructor.
class NginxServer {
 public:
  static absl::StatusOr<std::unique_ptr<NginxServer>> Start(const std::string& dir);
  // The same, answering 401 to a request without HTTP Basic credentials `user` and
  // `password` (nginx's auth_basic).
  static absl::StatusOr<std::unique_ptr<NginxServer>> StartWithBasicAuth(
      const std::string& dir, const std::string& user, const std::string& password);
  ~NginxServer();
  std::string url() const;  // "http://127.0.0.1:PORT" (no trailing '/')
  int port() const;

 private:
  NginxServer();
  std::unique_ptr<TempDir> prefix_;  // nginx.conf, its log, pid and temp files
  std::unique_ptr<ChildProcess> process_;
  int port_ = 0;
};

// s3rver on a free loopback port with its own temporary data directory, path-style
// (endpoint/bucket/key). Unsigned requests are served. A signed one must name the access
// key id kAccessKeyId (s3rver knows no other: 403 InvalidAccessKeyId), with any secret
// (it checks no SigV4 signature: put a FaultProxy with VerifySigV4 in front to check
// them), and carry x-amz-content-sha256 (UNSIGNED-PAYLOAD or the body's hash).
class S3rverServer {
 public:
  static constexpr char kAccessKeyId[] = "S3RVER";

  static absl::StatusOr<std::unique_ptr<S3rverServer>> Start();
  ~S3rverServer();
  std::string endpoint() const;  // "http://127.0.0.1:PORT"
  absl::Status CreateBucket(const std::string& bucket);
  // Puts `bytes` at `key` (replacing what was there: a new ETag when the bytes differ).
  absl::Status Put(const std::string& bucket, const std::string& key, const std::string& bytes);
  // Every regular file directly in `dir` at prefix + its name.
  absl::Status PutDirectory(const std::string& bucket, const std::string& prefix,
                            const std::string& dir);

 private:
  S3rverServer();
  std::unique_ptr<TempDir> data_;  // the buckets, and s3rver's log
  std::unique_ptr<ChildProcess> process_;
  int port_ = 0;
};

// tools/fault_proxy.py forwarding to `upstream` ("http://127.0.0.1:PORT"). Faults are
// armed through its control endpoint and apply to requests whose path (without the
// query) contains `match` (every request when empty), for the next `count` of them
// (-1 = all). A request takes the first armed fault that applies, in the order armed.
// The proxy forwards Host as sent, so SigV4 signatures made for the proxy's URL stay
// right upstream.
class FaultProxy {
 public:
  static absl::StatusOr<std::unique_ptr<FaultProxy>> Start(const std::string& upstream);
  ~FaultProxy();
  std::string url() const;  // "http://127.0.0.1:PORT"

  // Sends the response's headers (the real Content-Length) and `after_bytes` bytes of
  // its body, then closes the connection (FIN): a short body (curl: error 18).
  absl::Status CutBody(const std::string& match, int64_t after_bytes, int count);
  // Answers `status` (500, 503, ...) with Retry-After: retry_after_seconds (omitted when
  // < 0) and an S3 error body (503: SlowDown, else InternalError) instead of forwarding;
  // the connection stays open.
  absl::Status FailWith(const std::string& match, int status, int retry_after_seconds, int count);
  // Sends the body at `bytes_per_second` (in pieces of 1/20 s).
  absl::Status Trickle(const std::string& match, int64_t bytes_per_second, int count);
  // Waits `milliseconds` before handling each request (a round trip to a far store);
  // 0 turns it off.
  absl::Status Delay(int milliseconds);
  // Answers 403 SignatureDoesNotMatch to any request whose AWS SigV4 signature (header
  // form) is not right for these credentials, as S3 computes it (the canonical query
  // sorted, see tools/fault_proxy.py); an empty access_key_id turns the check off. The
  // check comes before the faults: a refused request takes none.
  absl::Status VerifySigV4(const std::string& access_key_id, const std::string& secret_access_key);
  // Arms any fault as tools/fault_proxy.py takes it (a JSON object): the store faults
  // beyond the ones above, e.g. {"kind": "bad_range", "match": "shard-1"} (a malformed
  // 206), {"kind": "overlong", "extra_bytes": 1000000} (a body without Content-Length
  // longer than the object), {"kind": "fail", "status": 404, "method": "GET",
  // "skip": 10} (404 from the 11th GET on: an object deleted mid-epoch).
  absl::Status Arm(const std::string& fault_json);
  // Disarms the faults, the delay and the SigV4 check (the counts stay).
  absl::Status ClearFaults();

  // Requests forwarded or answered so far, by kind ("forwarded", "cut", "failed",
  // "trickled", "malformed", "overlong", "bad_signature": each request counts in
  // exactly one, "forwarded" being
  // those passed on untouched) and in all ("requests"). Control requests do not count.
  absl::StatusOr<int64_t> Count(const std::string& kind) const;

 private:
  FaultProxy();
  absl::Status Control(const std::string& action, const std::string& json) const;
  std::unique_ptr<TempDir> dir_;  // the proxy's log
  std::unique_ptr<ChildProcess> process_;
  int port_ = 0;
};

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_SUPPORT_OBJECT_SERVERS_H_

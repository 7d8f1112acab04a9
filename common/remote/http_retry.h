// The HTTP fetcher's retry rules as pure functions (http_fetcher.cc runs them; tests
// drive them with made-up answers on a fake clock, without a server): which answers
// are retried, what a Retry-After says, and what the fetcher does after an attempt
// that may be retried.
#ifndef SHARDCAST_COMMON_REMOTE_HTTP_RETRY_H_
#define SHARDCAST_COMMON_REMOTE_HTTP_RETRY_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/remote/fetch_options.h"
#include "common/util/retry_policy.h"

namespace shardcast::remote::internal {

// HTTP statuses that a later attempt may find otherwise: 5xx, 408 (Request Timeout),
// 429 (Too Many Requests). Every other non-2xx status is the answer.
bool IsRetryableHttpStatus(long status);

// Retry-After in either form: delta-seconds, or an HTTP-date (its distance from
// `now`, 0 when past). nullopt when it is neither.
std::optional<absl::Duration> ParseRetryAfter(absl::string_view value, absl::Time now);

// The fetcher's retry policy: its backoffs with half a backoff of jitter, the request
// deadline, the bound on Retry-After; attempts end before the deadline, never on it.
util::RetryOptions FetchRetryOptions(const FetchOptions& options);

// An attempt that may be retried: what went wrong, the server's Retry-After, and
// whether it delivered wanted bytes before it was cut (progress).
struct RetryableFailure {
  std::string error;
  std::optional<absl::Duration> retry_after;
  bool progress = false;
};

// What the fetcher does after such an attempt of `what` ("GET <url>"), by `policy`
// (whose deadline a deadline that follows progress has moved already): wait and
// attempt again, give up for the deadline (the caller says how many attempts in how
// long), or refuse a Retry-After over max_retry_after (`refusal`, UNAVAILABLE naming
// `what`, not yet marked a HostIoError).
struct RetryStep {
  enum Kind { kWait, kDeadline, kRefused };
  Kind kind = kWait;
  absl::Duration wait = absl::ZeroDuration();  // kWait
  absl::Status refusal;                        // kRefused
};
RetryStep NextRetryStep(util::RetryPolicy& policy, const RetryableFailure& failure,
                        absl::string_view what);

}  // namespace shardcast::remote::internal

#endif  // SHARDCAST_COMMON_REMOTE_HTTP_RETRY_H_

// The fetcher's retry rules (see http_retry.h).
#include "common/remote/http_retry.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardcast::remote::internal {

bool IsRetryableHttpStatus(long status) { return status >= 500 || status == 408 || status == 429; }

std::optional<absl::Duration> ParseRetryAfter(absl::string_view value, absl::Time now) {
  int64_t seconds = 0;
  if (absl::SimpleAtoi(value, &seconds)) return absl::Seconds(std::max<int64_t>(seconds, 0));
  const std::string date(value);
  const time_t when = curl_getdate(date.c_str(), nullptr);
  if (when < 0) return std::nullopt;
  return std::max(absl::FromTimeT(when) - now, absl::ZeroDuration());
}

util::RetryOptions FetchRetryOptions(const FetchOptions& options) {
  util::RetryOptions retry;
  retry.first_backoff = options.first_backoff;
  retry.max_backoff = options.max_backoff;
  retry.jitter = 0.5;  // so that many clients cut at once do not come back at once
  retry.window = options.request_deadline;
  retry.last_attempt_at_deadline = false;  // waiting only to fail delays the same answer
  retry.max_retry_after = options.max_retry_after;
  return retry;
}

RetryStep NextRetryStep(util::RetryPolicy& policy, const RetryableFailure& failure,
                        absl::string_view what) {
  // A cut body that delivered bytes is not a store getting worse: start over.
  if (failure.progress) policy.ResetBackoff();
  const util::RetryPolicy::Decision decision = policy.AfterFailure(failure.retry_after);
  switch (decision.verdict) {
    case util::RetryPolicy::Verdict::kRetry:
      return {RetryStep::kWait, decision.wait, absl::OkStatus()};
    case util::RetryPolicy::Verdict::kDeadline:
      return {RetryStep::kDeadline, absl::ZeroDuration(), absl::OkStatus()};
    case util::RetryPolicy::Verdict::kRetryAfterTooLong:
      break;
  }
  return {RetryStep::kRefused, absl::ZeroDuration(),
          absl::UnavailableError(absl::StrCat(
              what, ": ", failure.error, " asks to retry after ",
              absl::FormatDuration(decision.wait), ", longer than the ",
              absl::FormatDuration(policy.options().max_retry_after), " waited for at most"))};
}

}  // namespace shardcast::remote::internal

// A rank's first registration, with retries (see registration.h).
#include "client/reconnect/registration.h"

#include <string>

#include "absl/strings/str_format.h"
#include "client/base/error_kinds.h"
#include "client/checks/stream_checks.h"
#include "client/reconnect/retry_rules.h"
#include "common/util/retry_policy.h"

namespace shardcast::client {
namespace {

namespace v1 = ::shardcast::v1;

// The reconnect backoff, doubling, no jitter, until the reconnect deadline, with one last
// attempt on it (attempts fail fast, so the loop itself waits out the whole deadline).
util::RetryOptions RegisterRetry(const StreamSettings& settings) {
  util::RetryOptions retry;
  retry.first_backoff = absl::Seconds(settings.reconnect_initial_seconds);
  retry.max_backoff = absl::Seconds(settings.reconnect_max_seconds);
  retry.window = absl::Seconds(settings.reconnect_deadline_seconds);
  retry.last_attempt_at_deadline = true;
  return retry;
}

absl::Status Unreachable(const StreamSettings& settings, const v1::RegisterRequest& job,
                         int64_t attempts, const std::string& last_error) {
  return absl::UnavailableError(absl::StrFormat(
      "register rank %d of job '%s' at %s: server unreachable for %.1f s (%d attempts); "
      "last error: %s. Is shardcast-server running and listening there? Start it "
      "(shardcast-server --shards DIR --listen ADDRESS) or check the address",
      job.rank(), job.job_id(), settings.server, settings.reconnect_deadline_seconds, attempts,
      last_error));
}

std::string WaitingNotice(const StreamSettings& settings, const v1::RegisterRequest& job,
                          const std::string& target, const absl::Status& status) {
  return absl::StrFormat(
      "rank %d of job '%s': no shardcast-server answers at %s yet (%s); trying "
      "again for up to %.0f s (the reconnect deadline)",
      job.rank(), job.job_id(), target, status.message(), settings.reconnect_deadline_seconds);
}

}  // namespace

absl::StatusOr<v1::RegisterResponse> RegisterWithRetry(const StreamSettings& settings,
                                                       const v1::RegisterRequest& job,
                                                       ReplicaOrder* replicas,
                                                       const RegisterAttempt& attempt,
                                                       const util::CancelToken& stop) {
  util::RetryPolicy retry(RegisterRetry(settings), settings.clock);
  int64_t attempts = 0;
  HandshakeRefusalWatch refusal(absl::Seconds(settings.handshake_refusal_seconds));
  std::string last_error;
  while (true) {
    v1::RegisterResponse response;
    const absl::Status status = attempt(retry.deadline(), &response);
    ++attempts;
    if (status.ok()) return response;
    if (stop.cancelled()) return InterruptedError(job.job_id(), job.rank());
    const std::string what = absl::StrFormat("register rank %d of job '%s' at %s", job.rank(),
                                             job.job_id(), replicas->current_target());
    if (IsPermanent(status) || status.code() == absl::StatusCode::kCancelled) {
      return WithContext(status, what);
    }
    if (absl::Status refused = refusal.Observe(status, settings.clock->Now(), what);
        !refused.ok()) {
      return refused;
    }
    // The attempt that starts at the deadline ends at once with DEADLINE_EXCEEDED; the
    // error of the attempt before says more.
    if (status.code() != absl::StatusCode::kDeadlineExceeded || last_error.empty()) {
      last_error = std::string(status.message());
    }
    if (retry.Expired()) return Unreachable(settings, job, attempts, last_error);
    if (attempts == 1 && settings.on_waiting) {
      settings.on_waiting(WaitingNotice(settings, job, replicas->current_target(), status));
    }
    // Unreachable or draining: the next replica at once; a round that reached none
    // waits its backoff.
    if (replicas->MoveToNext()) continue;
    const util::RetryPolicy::Decision next = retry.AfterFailure();
    if (next.verdict != util::RetryPolicy::Verdict::kRetry) {
      return Unreachable(settings, job, attempts, last_error);
    }
    if (!retry.Wait(next.wait, &stop)) return InterruptedError(job.job_id(), job.rank());
  }
}

}  // namespace shardcast::client

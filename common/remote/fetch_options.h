// How the HTTP fetcher (http_fetcher.h) reaches stores: connections, deadlines, the
// retries' backoff, TLS. Apart from the fetcher so that its retry rules (http_retry.h),
// which the fetcher runs, read them without including the fetcher.
#ifndef SHARDCAST_COMMON_REMOTE_FETCH_OPTIONS_H_
#define SHARDCAST_COMMON_REMOTE_FETCH_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "common/util/clock.h"

namespace shardcast::remote {

struct FetchOptions {
  // Requests in flight at once, over at most this many kept-alive connections; a
  // request beyond it waits for a connection (its wait counts toward its deadline).
  int max_connections = 16;
  // One request, every retry and backoff included (Get, Head); for GetStreaming, the
  // longest time without a byte received, retries included. --remote-timeout.
  absl::Duration request_deadline = absl::Seconds(60);
  absl::Duration connect_timeout = absl::Seconds(10);
  // An attempt that receives fewer than `low_speed_bytes` per second for
  // `low_speed_time` (a trickle) is cut and retried from the last byte received.
  int64_t low_speed_bytes = 16 * 1024;
  absl::Duration low_speed_time = absl::Seconds(10);
  absl::Duration first_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  // A Retry-After longer than this is not waited for (the request fails instead).
  absl::Duration max_retry_after = absl::Seconds(30);
  bool verify_tls = true;  // --remote-insecure turns it off
  std::string ca_file;     // --remote-ca-file; empty = the system's CA store
  // What the backoffs wait on and the deadlines are read from (common/util/
  // retry_policy.h); not owned, never null. libcurl's own timeouts (connect, low speed,
  // the attempt's share of the deadline) run on real time.
  const util::Clock* clock = util::Clock::Real();
};

}  // namespace shardcast::remote

#endif  // SHARDCAST_COMMON_REMOTE_FETCH_OPTIONS_H_

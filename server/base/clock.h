// The time the serving core reads: job TTLs, idle streams, stalls, rates and uptime.
// The server runs on the real clock; tests pass a clock they move themselves
// (tests/server/fake_clock.h), so that a TTL of an hour is checked without waiting.
//
// Waits on real events (a condition, a socket, the admission queue's deadline) stay
// on real time: a clock nobody advances must not hang the server.
#ifndef SHARDCAST_SERVER_BASE_CLOCK_H_
#define SHARDCAST_SERVER_BASE_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace shardcast::server {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // absl::Now(); lives for the whole process.
  static const Clock* Real();
};

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

inline const Clock* Clock::Real() {
  static const RealClock* const real = new RealClock();
  return real;
}

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_BASE_CLOCK_H_

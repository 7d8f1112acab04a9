// The time the serving core reads: job TTLs, idle streams, stalls, rates and uptime.
// The server runs on the real clock; tests pass a clock they move themselves
// (tests/support/fake_clock.h), so that a TTL of an hour is checked without waiting.
// The clock itself is common/util/clock.h, shared with the retries of the fetcher and
// the client.
//
// Waits on real events (a condition, a socket, the admission queue's deadline) stay
// on real time: a clock nobody advances must not hang the server.
#ifndef SHARDCAST_SERVER_BASE_CLOCK_H_
#define SHARDCAST_SERVER_BASE_CLOCK_H_

#include "common/util/clock.h"

namespace shardcast::server {

using Clock = util::Clock;
using RealClock = util::RealClock;

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_BASE_CLOCK_H_

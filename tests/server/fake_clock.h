// A clock the test moves (server/clock.h): TTL, idle and stall rules are checked by
// advancing it past their limits instead of sleeping for them. The one fake clock of
// the tests (tests/support/fake_clock.h), under the name the server's tests use.
#ifndef SHARDCAST_TESTS_SERVER_FAKE_CLOCK_H_
#define SHARDCAST_TESTS_SERVER_FAKE_CLOCK_H_

#include "tests/support/fake_clock.h"

namespace shardcast::server_testing {

using FakeClock = util_testing::FakeClock;

}  // namespace shardcast::server_testing

#endif  // SHARDCAST_TESTS_SERVER_FAKE_CLOCK_H_

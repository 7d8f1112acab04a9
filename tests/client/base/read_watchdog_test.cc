// ReadWatchdog: an overdue read is cancelled once and reported as a stall; a deadline
// moved closer wakes it; disarmed or stopped, it cancels nothing.
#include "client/base/read_watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "tests/support/fake_clock.h"

namespace shardcast::client {
namespace {

TEST(ReadWatchdogTest, CancelsAnOverdueReadOnceAndReportsTheStall) {
  std::atomic<int> cancels{0};
  absl::Notification cancelled;
  ReadWatchdog watchdog([&] {
    if (cancels.fetch_add(1) == 0) cancelled.Notify();
  });
  watchdog.Start();
  watchdog.Arm(absl::Now() - absl::Seconds(1));
  cancelled.WaitForNotification();
  EXPECT_TRUE(watchdog.TakeStalled());
  EXPECT_FALSE(watchdog.TakeStalled());  // taken
  watchdog.Stop();
  EXPECT_EQ(cancels.load(), 1);  // the deadline is disarmed once it fired
}

TEST(ReadWatchdogTest, ADeadlineMovedCloserWakesIt) {
  absl::Notification cancelled;
  ReadWatchdog watchdog([&] { cancelled.Notify(); });
  watchdog.Start();
  watchdog.Arm(absl::Now() + absl::Hours(1));
  watchdog.Arm(absl::InfiniteFuture());
  watchdog.Arm(absl::Now());  // armed again, now due
  cancelled.WaitForNotification();
  EXPECT_TRUE(watchdog.TakeStalled());
}

TEST(ReadWatchdogTest, DisarmedOrStoppedItCancelsNothing) {
  std::atomic<int> cancels{0};
  ReadWatchdog watchdog([&] { ++cancels; });
  watchdog.Start();
  watchdog.Arm(absl::InfiniteFuture());
  watchdog.Stop();
  watchdog.Arm(absl::Now() - absl::Seconds(1));  // no thread runs
  EXPECT_FALSE(watchdog.TakeStalled());
  EXPECT_EQ(cancels.load(), 0);
}

TEST(ReadWatchdogTest, QuitEndsTheThreadAndItCanBeStartedAgain) {
  absl::Notification cancelled;
  ReadWatchdog watchdog([&] { cancelled.Notify(); });
  watchdog.Start();
  watchdog.Quit();
  watchdog.Start();  // joins the one that quit
  watchdog.Arm(absl::Now());
  cancelled.WaitForNotification();
  EXPECT_TRUE(watchdog.TakeStalled());
}

TEST(ReadWatchdogTest, WaitsOnItsClockForTheDeadline) {
  util_testing::FakeClock clock;
  const absl::Time start = clock.Now();
  absl::Notification cancelled;
  ReadWatchdog watchdog([&] { cancelled.Notify(); }, &clock);
  watchdog.Start();
  watchdog.Arm(start + absl::Seconds(30));
  cancelled.WaitForNotification();
  EXPECT_TRUE(watchdog.TakeStalled());
  watchdog.Stop();
  // One wait of the whole stream timeout on the fake clock, none on the real one.
  EXPECT_EQ(clock.Now() - start, absl::Seconds(30));
  EXPECT_EQ(clock.waits(), std::vector<absl::Duration>{absl::Seconds(30)});
}

}  // namespace
}  // namespace shardcast::client

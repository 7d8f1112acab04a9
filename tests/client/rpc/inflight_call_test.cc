// InflightCall: a stop refuses the next call and cancels the waits on its token until
// Reset; the watchdog's cancel does not stop; RunInterruptibly (interruptible.h) asks
// its check while the work runs elsewhere.
#include "client/rpc/inflight_call.h"

#include <gtest/gtest.h>

#include <atomic>

#include "absl/synchronization/notification.h"
#include "client/base/interruptible.h"

namespace shardcast::client {
namespace {

TEST(InflightCallTest, AStopRefusesTheNextCallAndCancelsTheWaitsUntilReset) {
  InflightCall call;
  grpc::ClientContext context;
  EXPECT_TRUE(call.Begin(&context));
  call.CancelCurrent();  // the watchdog's cut: the thread goes on
  EXPECT_FALSE(call.stopped());
  call.End();
  call.Stop();
  EXPECT_TRUE(call.stopped());
  EXPECT_TRUE(call.token().cancelled());
  grpc::ClientContext next;
  EXPECT_FALSE(call.Begin(&next));
  call.Reset();
  EXPECT_FALSE(call.stopped());
  EXPECT_FALSE(call.token().cancelled());
  EXPECT_TRUE(call.Begin(&next));
  call.End();
}

TEST(RunInterruptiblyTest, WithoutACheckTheWorkRunsHere) {
  EXPECT_EQ(RunInterruptibly([] { return absl::NotFoundError("w"); }, nullptr, [] {},
                             absl::CancelledError("i")),
            absl::NotFoundError("w"));
}

TEST(RunInterruptiblyTest, TheWorksStatusWhenTheCheckNeverSaysStop) {
  std::atomic<int> stops{0};
  EXPECT_EQ(RunInterruptibly([] { return absl::NotFoundError("w"); }, [] { return false; },
                             [&] { ++stops; }, absl::CancelledError("i")),
            absl::NotFoundError("w"));
  EXPECT_EQ(stops.load(), 0);
}

TEST(RunInterruptiblyTest, AnInterruptStopsTheWorkOnceAndReturnsTheInterruptedError) {
  absl::Notification stopped;
  std::atomic<int> stops{0};
  const absl::Status status = RunInterruptibly(
      [&] {
        stopped.WaitForNotification();  // blocked until stopped, like an RPC
        return absl::UnavailableError("cut");
      },
      [] { return true; },
      [&] {
        ++stops;
        stopped.Notify();
      },
      absl::CancelledError("interrupted"));
  EXPECT_EQ(status, absl::CancelledError("interrupted"));
  EXPECT_EQ(stops.load(), 1);
}

}  // namespace
}  // namespace shardcast::client

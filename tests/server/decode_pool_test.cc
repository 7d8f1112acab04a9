// A decode pool task that throws (std::bad_alloc from an allocation that failed) is
// logged and counted; the worker goes on and the process lives. A running task is
// counted from the moment it leaves the queue until it and what it held are gone.
#include "server/assembly/decode_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <new>
#include <thread>

#include "absl/synchronization/notification.h"

namespace shardcast::server {
namespace {

TEST(DecodePoolTest, AThrowingTaskNeverTerminatesTheProcess) {
  DecodePool pool(1);  // one worker: the later tasks run on the thread that saw the throw
  pool.Submit([] { throw std::bad_alloc(); });
  pool.Submit([] { throw 42; });
  std::atomic<int> ran{0};
  absl::Notification done;
  pool.Submit([&] { ran.fetch_add(1); });
  pool.Submit([&] {
    ran.fetch_add(1);
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(pool.task_exceptions(), 2);
}

TEST(DecodePoolTest, RunningCountsATaskUntilWhatItHeldIsFreed) {
  DecodePool pool(1);
  absl::Notification started, release;
  auto held = std::make_shared<int>(7);
  std::weak_ptr<int> watch = held;
  pool.Submit([&, held = std::move(held)] {
    started.Notify();
    release.WaitForNotification();
  });
  pool.Submit([] {});
  started.WaitForNotification();
  EXPECT_EQ(pool.running(), 1);
  EXPECT_EQ(pool.queue_depth(), 1);
  release.Notify();
  while (pool.queue_depth() > 0 || pool.running() > 0) std::this_thread::yield();
  // Both done, and the first task's capture was destroyed before it stopped counting.
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace shardcast::server

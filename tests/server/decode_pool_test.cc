// A decode pool task that throws (std::bad_alloc from an allocation that failed) is
// logged and counted; the worker goes on and the process lives.
#include "server/decode_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <new>

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

}  // namespace
}  // namespace shardcast::server

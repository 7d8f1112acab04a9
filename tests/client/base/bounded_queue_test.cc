// BoundedQueue: items in order, values bounded, an error always fits, Stop wakes the
// producer and Close the consumer, Restart empties it for the next producer.
#include "client/base/bounded_queue.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"

namespace shardcast::client {
namespace {

TEST(BoundedQueueTest, HandsOutValuesThenTheErrorInOrder) {
  BoundedQueue<int> queue(3);
  queue.Restart(/*finished=*/false);
  ASSERT_TRUE(queue.WaitForSpace());
  queue.Push(1);
  ASSERT_TRUE(queue.WaitForSpace());
  queue.Push(2);
  queue.Push(absl::UnavailableError("gone"));
  queue.FinishProducing();
  EXPECT_EQ(**queue.Pop(), 1);
  EXPECT_EQ(**queue.Pop(), 2);
  std::optional<absl::StatusOr<int>> error = queue.Pop();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->status(), absl::UnavailableError("gone"));
  EXPECT_TRUE(queue.Ready());  // the producer finished: Pop answers at once
  EXPECT_FALSE(queue.Pop().has_value());
}

TEST(BoundedQueueTest, AFreshQueueIsReadyAndEmpty) {
  BoundedQueue<int> queue(1);  // no producer has run
  EXPECT_TRUE(queue.Ready());
  EXPECT_FALSE(queue.Pop().has_value());
}

TEST(BoundedQueueTest, TheProducerWaitsForSpaceUntilTheConsumerTakesAValue) {
  BoundedQueue<int> queue(1);
  queue.Restart(false);
  ASSERT_TRUE(queue.WaitForSpace());
  queue.Push(1);
  absl::Notification pushed;
  std::thread producer([&] {
    if (queue.WaitForSpace()) queue.Push(2);
    pushed.Notify();
  });
  EXPECT_FALSE(pushed.WaitForNotificationWithTimeout(absl::Milliseconds(20)));
  EXPECT_EQ(**queue.Pop(), 1);  // makes room
  pushed.WaitForNotification();
  producer.join();
  EXPECT_EQ(**queue.Pop(), 2);
}

TEST(BoundedQueueTest, StopEndsTheProducersWaitForSpace) {
  BoundedQueue<int> queue(1);
  queue.Restart(false);
  queue.Push(1);
  bool got_space = true;
  std::thread producer([&] { got_space = queue.WaitForSpace(); });
  queue.Stop();
  producer.join();
  EXPECT_FALSE(got_space);
  EXPECT_FALSE(queue.WaitForSpace());  // and every later one
}

TEST(BoundedQueueTest, CloseWakesAWaitingConsumerAndEndsEveryLaterPop) {
  BoundedQueue<int> queue(2);
  queue.Restart(false);
  std::optional<absl::StatusOr<int>> got = 5;
  std::thread consumer([&] { got = queue.Pop(); });
  EXPECT_FALSE(queue.WaitReady(absl::Milliseconds(10)));
  queue.Close();
  consumer.join();
  EXPECT_FALSE(got.has_value());
  EXPECT_TRUE(queue.closed());
  queue.Push(1);  // a producer that had not seen it yet
  EXPECT_FALSE(queue.Pop().has_value());
  EXPECT_FALSE(queue.WaitForSpace());
  queue.Restart(false);  // a closed queue stays closed
  EXPECT_TRUE(queue.closed());
  EXPECT_FALSE(queue.Pop().has_value());
}

TEST(BoundedQueueTest, RestartForgetsTheLastProducersItemsAndStop) {
  BoundedQueue<int> queue(1);
  queue.Restart(false);
  queue.Push(1);
  queue.Stop();
  queue.Restart(false);
  EXPECT_FALSE(queue.Ready());
  EXPECT_TRUE(queue.WaitForSpace());
  queue.Push(2);
  EXPECT_EQ(**queue.Pop(), 2);
  queue.Restart(/*finished=*/true);  // nothing is to come
  EXPECT_TRUE(queue.Ready());
  EXPECT_FALSE(queue.Pop().has_value());
}

}  // namespace
}  // namespace shardcast::client

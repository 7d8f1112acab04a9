// The status page's history: samples on the injected clock, at most one per interval,
// bounded to the span, and the charts' rates and wait shares between them.
#include "server/status/status_history.h"

#include <gtest/gtest.h>

#include "tests/support/fake_clock.h"

namespace shardcast {
namespace {

using server::ChartPoint;
using server::StatusHistory;

v1::GetStatusResponse Counters(int64_t images, double waited_for_server, double waited_for_client) {
  v1::GetStatusResponse status;
  status.set_images_served(images);
  status.set_stream_wait_for_batch_seconds(waited_for_server);
  status.set_stream_wait_for_client_seconds(waited_for_client);
  return status;
}

TEST(StatusHistoryTest, RatesAndWaitSharesComeFromConsecutiveSamples) {
  util_testing::FakeClock clock;
  StatusHistory history(&clock, absl::Seconds(5), absl::Minutes(10));
  EXPECT_TRUE(history.Points().empty());
  history.Record(Counters(0, 0, 0));
  EXPECT_TRUE(history.Points().empty()) << "one sample is no interval";
  clock.Advance(absl::Seconds(5));
  history.Record(Counters(500, 3, 1));  // 100 images/s; 3 of 4 waiting s for the server
  clock.Advance(absl::Seconds(10));
  history.Record(Counters(500, 3, 1));  // nothing streamed: no share
  const std::vector<ChartPoint> points = history.Points();
  ASSERT_EQ(points.size(), 2u);
  EXPECT_DOUBLE_EQ(points[0].images_per_second, 100);
  EXPECT_DOUBLE_EQ(points[0].server_wait_share, 0.75);
  EXPECT_DOUBLE_EQ(points[0].seconds_ago, 10);
  EXPECT_DOUBLE_EQ(points[1].images_per_second, 0);
  EXPECT_LT(points[1].server_wait_share, 0);
  EXPECT_DOUBLE_EQ(points[1].seconds_ago, 0);
}

TEST(StatusHistoryTest, SamplesAtMostOncePerInterval) {
  util_testing::FakeClock clock;
  StatusHistory history(&clock, absl::Seconds(5), absl::Minutes(10));
  history.Record(Counters(0, 0, 0));
  clock.Advance(absl::Seconds(1));
  history.Record(Counters(10, 0, 0));  // a page reloaded at once: not a sample
  clock.Advance(absl::Seconds(4));
  history.Record(Counters(50, 0, 0));
  const std::vector<ChartPoint> points = history.Points();
  ASSERT_EQ(points.size(), 1u);
  EXPECT_DOUBLE_EQ(points[0].images_per_second, 10);  // 50 images in 5 s
}

TEST(StatusHistoryTest, KeepsOnlyTheSpan) {
  util_testing::FakeClock clock;
  StatusHistory history(&clock, absl::Seconds(5), absl::Seconds(60));
  for (int i = 0; i < 100; ++i) {
    history.Record(Counters(i * 5, 0, 0));
    clock.Advance(absl::Seconds(5));
  }
  const std::vector<ChartPoint> points = history.Points();
  ASSERT_EQ(points.size(), 12u);  // 60 s of 5 s intervals
  EXPECT_DOUBLE_EQ(points.front().seconds_ago, 60);
  EXPECT_DOUBLE_EQ(points.back().seconds_ago, 5);
}

TEST(StatusHistoryTest, ACounterThatWentBackDrawsZeroNotBelow) {
  util_testing::FakeClock clock;
  StatusHistory history(&clock, absl::Seconds(5), absl::Minutes(1));
  history.Record(Counters(100, 5, 5));
  clock.Advance(absl::Seconds(5));
  history.Record(Counters(0, 0, 0));
  const std::vector<ChartPoint> points = history.Points();
  ASSERT_EQ(points.size(), 1u);
  EXPECT_DOUBLE_EQ(points[0].images_per_second, 0);
  EXPECT_LT(points[0].server_wait_share, 0);
}

}  // namespace
}  // namespace shardcast

// RegisterWithRetry on a fake clock: the backoff doubles up to its bound and the
// reconnect deadline ends the retries, in microseconds of wall time; a stop ends them
// at once.
#include "client/reconnect/registration.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "client/checks/stream_checks.h"
#include "client/reconnect/replica_order.h"
#include "tests/support/fake_clock.h"

namespace shardcast::client {
namespace {

namespace v1 = ::shardcast::v1;

class RegistrationTest : public ::testing::Test {
 protected:
  RegistrationTest() {
    settings_.server = "127.0.0.1:1";
    settings_.clock = &clock_;
    job_.set_job_id("job");
    job_.set_rank(2);
  }

  util_testing::FakeClock clock_;
  StreamSettings settings_;
  v1::RegisterRequest job_;
  util::CancelToken stop_;
};

TEST_F(RegistrationTest, AnUnreachableServerIsRetriedUntilTheReconnectDeadline) {
  ReplicaOrder replicas({settings_.server});
  const absl::Time start = clock_.Now();
  int attempts = 0;
  absl::StatusOr<v1::RegisterResponse> response = RegisterWithRetry(
      settings_, job_, &replicas,
      [&](absl::Time, v1::RegisterResponse*) {
        ++attempts;
        return absl::Status(absl::StatusCode::kUnavailable, "connection refused");
      },
      stop_);
  ASSERT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(response.status().message(), "unreachable for 120.0 s"))
      << response.status();
  EXPECT_TRUE(absl::StrContains(response.status().message(), "connection refused"));
  EXPECT_GE(clock_.Now() - start, absl::Seconds(120));
  const std::vector<absl::Duration> waits = clock_.waits();
  ASSERT_GE(waits.size(), 6u);
  EXPECT_EQ(waits[0], absl::Milliseconds(100));
  EXPECT_EQ(waits[1], absl::Milliseconds(200));
  EXPECT_EQ(waits[5], absl::Seconds(2));  // 3.2 s capped at reconnect_max_seconds
  EXPECT_EQ(attempts, static_cast<int>(waits.size()) + 1);
}

TEST_F(RegistrationTest, WaitingForAServerIsToldOnceAndTheErrorSaysWhatToDo) {
  std::vector<std::string> notices;
  settings_.on_waiting = [&](const std::string& notice) { notices.push_back(notice); };
  ReplicaOrder replicas({settings_.server});
  absl::StatusOr<v1::RegisterResponse> response = RegisterWithRetry(
      settings_, job_, &replicas,
      [](absl::Time, v1::RegisterResponse*) {
        return absl::Status(absl::StatusCode::kUnavailable, "connection refused");
      },
      stop_);
  ASSERT_EQ(response.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(
      absl::StrContains(response.status().message(),
                        "Start it (shardcast-server --shards DIR --listen ADDRESS) or check "
                        "the address"))
      << response.status();
  ASSERT_EQ(notices.size(), 1u);  // once, not at every one of the attempts
  EXPECT_EQ(notices[0],
            "rank 2 of job 'job': no shardcast-server answers at 127.0.0.1:1 yet (connection "
            "refused); trying again for up to 120 s (the reconnect deadline)");
}

TEST_F(RegistrationTest, AStopDuringTheBackoffEndsItAsInterrupted) {
  ReplicaOrder replicas({settings_.server});
  clock_.set_on_wait([&](absl::Duration) { stop_.Cancel(); });
  absl::StatusOr<v1::RegisterResponse> response = RegisterWithRetry(
      settings_, job_, &replicas,
      [](absl::Time, v1::RegisterResponse*) {
        return absl::Status(absl::StatusCode::kUnavailable, "connection refused");
      },
      stop_);
  EXPECT_EQ(response.status(), InterruptedError("job", 2));
  EXPECT_EQ(clock_.waits().size(), 1u);
}

TEST_F(RegistrationTest, TheServersRefusalIsNotRetried) {
  ReplicaOrder replicas({settings_.server});
  absl::StatusOr<v1::RegisterResponse> response = RegisterWithRetry(
      settings_, job_, &replicas,
      [](absl::Time, v1::RegisterResponse*) {
        return absl::Status(absl::StatusCode::kInvalidArgument, "batch size 0");
      },
      stop_);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(clock_.waits().empty());
}

}  // namespace
}  // namespace shardcast::client

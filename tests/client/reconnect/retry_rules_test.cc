// IsPermanent and HandshakeRefusalWatch on made-up statuses and times.
#include "client/reconnect/retry_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace shardcast::client {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(RetryRulesTest, AWrongRequestOrARefusalIsPermanentAnOutageIsNot) {
  for (absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
        absl::StatusCode::kFailedPrecondition, absl::StatusCode::kOutOfRange,
        absl::StatusCode::kUnimplemented, absl::StatusCode::kPermissionDenied,
        absl::StatusCode::kUnauthenticated}) {
    EXPECT_TRUE(IsPermanent(absl::Status(code, "x"))) << code;
  }
  for (absl::StatusCode code :
       {absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded,
        absl::StatusCode::kInternal, absl::StatusCode::kResourceExhausted}) {
    EXPECT_FALSE(IsPermanent(absl::Status(code, "failed to connect to all addresses"))) << code;
  }
  // A failed TLS handshake is reported as UNAVAILABLE and is permanent all the same.
  EXPECT_TRUE(IsPermanent(
      absl::Status(absl::StatusCode::kUnavailable, "failed to connect: SSL handshake failed")));
}

TEST(RetryRulesTest, AHandshakeRefusalGivesUpOnlyOnceItLastedTheLimit) {
  const absl::Status closed(absl::StatusCode::kUnavailable,
                            "failed to connect to all addresses; last error: Socket closed");
  HandshakeRefusalWatch watch(absl::Seconds(10));
  EXPECT_TRUE(watch.Observe(closed, kT0, "register").ok());
  EXPECT_TRUE(watch.Observe(closed, kT0 + absl::Seconds(9), "register").ok());
  const absl::Status gave_up = watch.Observe(closed, kT0 + absl::Seconds(10), "register rank 0");
  EXPECT_EQ(gave_up.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(gave_up.message(), HasSubstr("register rank 0: the server accepted every "
                                           "connection for 10s but closed it during the "
                                           "handshake"));
}

TEST(RetryRulesTest, AnyOtherOutcomeEndsARunOfHandshakeRefusals) {
  const absl::Status closed(absl::StatusCode::kUnavailable,
                            "failed to connect to all addresses; last error: Socket closed");
  const absl::Status refused(absl::StatusCode::kUnavailable,
                             "failed to connect to all addresses; Connection refused");
  HandshakeRefusalWatch watch(absl::Seconds(10));
  EXPECT_TRUE(watch.Observe(closed, kT0, "r").ok());
  EXPECT_TRUE(watch.Observe(refused, kT0 + absl::Seconds(5), "r").ok());  // the run ends
  EXPECT_TRUE(watch.Observe(closed, kT0 + absl::Seconds(11), "r").ok());  // a new one starts
  EXPECT_FALSE(watch.Observe(closed, kT0 + absl::Seconds(21), "r").ok());
}

}  // namespace
}  // namespace shardcast::client

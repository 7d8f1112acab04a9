// IsPermanent and HandshakeRefusalWatch on made-up statuses and times.
#include "client/protocol/retry_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace shardcast::client {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(RetryRulesTest, AWrongRequestOrARefusalIsPermanentAnOutageIsNot) {
  for (grpc::StatusCode code :
       {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::NOT_FOUND,
        grpc::StatusCode::FAILED_PRECONDITION, grpc::StatusCode::OUT_OF_RANGE,
        grpc::StatusCode::UNIMPLEMENTED, grpc::StatusCode::PERMISSION_DENIED,
        grpc::StatusCode::UNAUTHENTICATED}) {
    EXPECT_TRUE(IsPermanent(grpc::Status(code, "x"))) << code;
  }
  for (grpc::StatusCode code : {grpc::StatusCode::UNAVAILABLE, grpc::StatusCode::DEADLINE_EXCEEDED,
                                grpc::StatusCode::INTERNAL, grpc::StatusCode::RESOURCE_EXHAUSTED}) {
    EXPECT_FALSE(IsPermanent(grpc::Status(code, "failed to connect to all addresses"))) << code;
  }
  // A failed TLS handshake is reported as UNAVAILABLE and is permanent all the same.
  EXPECT_TRUE(IsPermanent(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "failed to connect: SSL handshake failed")));
}

TEST(RetryRulesTest, AHandshakeRefusalGivesUpOnlyOnceItLastedTheLimit) {
  const grpc::Status closed(grpc::StatusCode::UNAVAILABLE,
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
  const grpc::Status closed(grpc::StatusCode::UNAVAILABLE,
                            "failed to connect to all addresses; last error: Socket closed");
  const grpc::Status refused(grpc::StatusCode::UNAVAILABLE,
                             "failed to connect to all addresses; Connection refused");
  HandshakeRefusalWatch watch(absl::Seconds(10));
  EXPECT_TRUE(watch.Observe(closed, kT0, "r").ok());
  EXPECT_TRUE(watch.Observe(refused, kT0 + absl::Seconds(5), "r").ok());  // the run ends
  EXPECT_TRUE(watch.Observe(closed, kT0 + absl::Seconds(11), "r").ok());  // a new one starts
  EXPECT_FALSE(watch.Observe(closed, kT0 + absl::Seconds(21), "r").ok());
}

}  // namespace
}  // namespace shardcast::client

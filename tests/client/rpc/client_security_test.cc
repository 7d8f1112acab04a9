// LoadClientSecurity, the one rule the flags and Python's keywords share: when TLS is on,
// how errors name each value, and where the token comes from.
#include "client/rpc/client_security.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

namespace shardcast::client {
namespace {

using ::testing::HasSubstr;

// Sets $SHARDCAST_TOKEN for one test (or unsets it) and restores it after.
class TokenEnv {
 public:
  explicit TokenEnv(const char* value) {
    if (const char* was = getenv(kTokenEnvVar); was != nullptr) was_ = was;
    if (value == nullptr) {
      unsetenv(kTokenEnvVar);
    } else {
      setenv(kTokenEnvVar, value, 1);
    }
  }
  ~TokenEnv() {
    if (was_.has_value()) {
      setenv(kTokenEnvVar, was_->c_str(), 1);
    } else {
      unsetenv(kTokenEnvVar);
    }
  }

 private:
  std::optional<std::string> was_;
};

TEST(ClientSecurityTest, PlaintextUnlessTlsOrACaOrACertificateIsGiven) {
  TokenEnv env(nullptr);
  absl::StatusOr<ClientSecurity> plain = LoadClientSecurity(ClientSecurityValues{});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->credentials, nullptr);
  EXPECT_EQ(plain->bearer_token, "");
  ClientSecurityValues tls;
  tls.tls = true;  // the system's roots
  absl::StatusOr<ClientSecurity> secure = LoadClientSecurity(tls);
  ASSERT_TRUE(secure.ok()) << secure.status();
  EXPECT_NE(secure->credentials, nullptr);
}

TEST(ClientSecurityTest, ErrorsNameTheValueAsItsCallerKnowsIt) {
  ClientSecurityValues half;
  half.tls_cert = "/nonexistent/client.pem";
  absl::Status flags = LoadClientSecurity(half).status();
  EXPECT_EQ(flags.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(flags.message(), HasSubstr("--tls-cert and --tls-key go together"));
  absl::Status keywords = LoadClientSecurity(half, KeywordNames()).status();
  EXPECT_THAT(keywords.message(), HasSubstr("tls_cert and tls_key go together"));
  ClientSecurityValues missing;
  missing.tls_ca = "/nonexistent/ca.pem";
  EXPECT_THAT(LoadClientSecurity(missing, KeywordNames()).status().message(),
              HasSubstr("tls_ca '/nonexistent/ca.pem'"));
}

TEST(ClientSecurityTest, TheEnvironmentTokenIsOneTokenOrNone) {
  {
    TokenEnv env("  secret-1  ");
    absl::StatusOr<ClientSecurity> security = LoadClientSecurity(ClientSecurityValues{});
    ASSERT_TRUE(security.ok()) << security.status();
    EXPECT_EQ(security->bearer_token, "secret-1");
  }
  {
    TokenEnv env("two tokens");
    absl::Status status = LoadClientSecurity(ClientSecurityValues{}).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("SHARDCAST_TOKEN: one token"));
    EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("two")));  // a token never appears
  }
}

TEST(ClientSecurityTest, ATokenGivenAsAValueWinsOverTheEnvironment) {
  TokenEnv env("two tokens");  // not read
  ClientSecurityValues values;
  values.token = "given";
  absl::StatusOr<ClientSecurity> security = LoadClientSecurity(values);
  ASSERT_TRUE(security.ok()) << security.status();
  EXPECT_EQ(security->bearer_token, "given");
  values.token = "";  // given empty: no token, and still no environment
  EXPECT_EQ(LoadClientSecurity(values)->bearer_token, "");
}

}  // namespace
}  // namespace shardcast::client

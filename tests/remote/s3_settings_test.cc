// ResolveS3Settings against a fake environment and temporary ~/.aws files: the AWS CLI's
// order for credentials, region and endpoint, the errors that name their source, and
// the URLs built from the result.
#include "common/remote/s3_settings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "tests/support/temp_dir.h"

namespace shardcast::remote {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::TempDir;

// A HOME with optional ~/.aws/credentials and ~/.aws/config, and the variables a test
// sets; nothing of the real environment leaks in.
class FakeEnv {
 public:
  FakeEnv() { vars_["HOME"] = home_.path(); }

  void Set(const std::string& name, const std::string& value) { vars_[name] = value; }
  void WriteCredentials(const std::string& text) { Write(".aws/credentials", text); }
  void WriteConfig(const std::string& text) { Write(".aws/config", text); }
  std::string Path(const std::string& relative) const { return home_ / relative; }
  void Write(const std::string& relative, const std::string& text) const {
    std::filesystem::create_directories(std::filesystem::path(Path(relative)).parent_path());
    std::ofstream(Path(relative), std::ios::binary) << text;
  }

  EnvLookup Lookup() const {
    return [vars = vars_](const std::string& name) -> std::optional<std::string> {
      auto it = vars.find(name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }

 private:
  TempDir home_{"s3_settings_test"};
  std::map<std::string, std::string> vars_;
};

S3Settings Resolve(const FakeEnv& env, const S3Flags& flags = {}) {
  absl::StatusOr<S3Settings> settings = ResolveS3Settings(flags, env.Lookup());
  EXPECT_TRUE(settings.ok()) << settings.status();
  return settings.ok() ? *settings : S3Settings();
}

absl::Status ResolveError(const FakeEnv& env, const S3Flags& flags = {}) {
  absl::StatusOr<S3Settings> settings = ResolveS3Settings(flags, env.Lookup());
  EXPECT_FALSE(settings.ok()) << "resolved: " << settings->described_source;
  return settings.status();
}

TEST(S3SettingsTest, NothingSetIsUnsignedUsEast1OnAws) {
  FakeEnv env;
  S3Settings s = Resolve(env);
  EXPECT_EQ(s.access_key_id, "");
  EXPECT_EQ(s.secret_access_key, "");
  EXPECT_EQ(s.region, "us-east-1");
  EXPECT_EQ(s.endpoint, "https://s3.us-east-1.amazonaws.com");
  EXPECT_FALSE(s.path_style);
  EXPECT_THAT(s.described_source, HasSubstr("no credentials"));
  EXPECT_THAT(s.described_source, HasSubstr("virtual-hosted"));
}

TEST(S3SettingsTest, EnvironmentKeysWinOverTheFiles) {
  FakeEnv env;
  env.WriteCredentials(
      "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = FILESECRET\n");
  env.Set("AWS_ACCESS_KEY_ID", "ENVKEY");
  env.Set("AWS_SECRET_ACCESS_KEY", "ENVSECRET");
  env.Set("AWS_SESSION_TOKEN", "ENVTOKEN");
  env.Set("AWS_REGION", "us-west-2");
  env.Set("AWS_ENDPOINT_URL", "http://127.0.0.1:9000");
  S3Settings s = Resolve(env);
  EXPECT_EQ(s.access_key_id, "ENVKEY");
  EXPECT_EQ(s.secret_access_key, "ENVSECRET");
  EXPECT_EQ(s.session_token, "ENVTOKEN");
  EXPECT_EQ(s.described_source,
            "credentials from AWS_ACCESS_KEY_ID (with session token); region us-west-2 from "
            "AWS_REGION; endpoint http://127.0.0.1:9000 from AWS_ENDPOINT_URL, path-style");
  // The line goes to logs: no secret in it.
  EXPECT_THAT(s.described_source, AllOf(Not(HasSubstr("ENVSECRET")), Not(HasSubstr("ENVTOKEN")),
                                        Not(HasSubstr("FILESECRET"))));
}

TEST(S3SettingsTest, HalfAKeyPairInTheEnvironmentIsAnError) {
  FakeEnv env;
  env.Set("AWS_ACCESS_KEY_ID", "K");
  absl::Status status = ResolveError(env);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("AWS_ACCESS_KEY_ID"), HasSubstr("AWS_SECRET_ACCESS_KEY")));

  FakeEnv env2;
  env2.Set("AWS_SECRET_ACCESS_KEY", "S");
  EXPECT_THAT(ResolveError(env2).message(), HasSubstr("AWS_SECRET_ACCESS_KEY is set but"));
}

TEST(S3SettingsTest, EmptyVariablesCountAsUnset) {
  FakeEnv env;
  env.Set("AWS_ACCESS_KEY_ID", "");
  env.Set("AWS_REGION", "");
  env.Set("AWS_DEFAULT_REGION", "eu-west-1");
  S3Settings s = Resolve(env);
  EXPECT_EQ(s.access_key_id, "");
  EXPECT_EQ(s.region, "eu-west-1");
  EXPECT_EQ(s.endpoint, "https://s3.eu-west-1.amazonaws.com");
}

TEST(S3SettingsTest, CredentialsFileDefaultProfile) {
  FakeEnv env;
  env.WriteCredentials(
      "# written by aws configure\n"
      "[default]\n"
      "  aws_access_key_id=AKIDDEFAULT  \n"
      "aws_secret_access_key = SECRETDEFAULT ; an inline comment\n"
      "\n"
      "[other]\n"
      "aws_access_key_id = AKIDOTHER\n"
      "aws_secret_access_key = SECRETOTHER\n");
  S3Settings s = Resolve(env);
  EXPECT_EQ(s.access_key_id, "AKIDDEFAULT");
  EXPECT_EQ(s.secret_access_key, "SECRETDEFAULT");
  EXPECT_EQ(s.session_token, "");
  EXPECT_THAT(s.described_source,
              HasSubstr("credentials from " + env.Path(".aws/credentials") + " [default];"));
}

TEST(S3SettingsTest, ProfileFromTheFlagThenAwsProfile) {
  FakeEnv env;
  env.WriteCredentials(
      "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n"
      "[env]\naws_access_key_id = E\naws_secret_access_key = ES\n"
      "[flag]\naws_access_key_id = F\naws_secret_access_key = FS\naws_session_token = FT\n");
  env.Set("AWS_PROFILE", "env");
  EXPECT_EQ(Resolve(env).access_key_id, "E");
  S3Flags flags;
  flags.profile = "flag";
  S3Settings s = Resolve(env, flags);
  EXPECT_EQ(s.access_key_id, "F");
  EXPECT_EQ(s.session_token, "FT");
  EXPECT_THAT(s.described_source, HasSubstr("[flag] (with session token)"));
  EXPECT_THAT(s.described_source, HasSubstr("profile flag from --s3-profile"));
}

TEST(S3SettingsTest, ConfigFileProfilesAreProfileName) {
  FakeEnv env;
  env.WriteConfig(
      "[default]\nregion = eu-central-1\n"
      "[profile   work]\n"
      "aws_access_key_id = CFGKEY\n"
      "aws_secret_access_key = CFGSECRET\n"
      "region = ap-south-1\n"
      "endpoint_url = https://minio.example:9000/\n"
      "s3 =\n"
      "    addressing_style = virtual\n"
      "    endpoint_url = https://ignored.example\n"
      "[work]\n"
      "region = never-read\n");
  S3Settings def = Resolve(env);
  EXPECT_EQ(def.region, "eu-central-1");
  EXPECT_THAT(def.described_source, HasSubstr("from " + env.Path(".aws/config") + " [default]"));

  env.Set("AWS_PROFILE", "work");
  S3Settings s = Resolve(env);
  EXPECT_EQ(s.access_key_id, "CFGKEY");
  EXPECT_EQ(s.secret_access_key, "CFGSECRET");
  EXPECT_EQ(s.region, "ap-south-1");
  EXPECT_EQ(s.endpoint, "https://minio.example:9000");
  EXPECT_TRUE(s.path_style);
  EXPECT_THAT(s.described_source, HasSubstr(env.Path(".aws/config") + " [profile work]"));
}

TEST(S3SettingsTest, CredentialsFileBeatsConfigFile) {
  FakeEnv env;
  env.WriteCredentials("[p]\naws_access_key_id = CRED\naws_secret_access_key = CREDS\n");
  env.WriteConfig("[profile p]\naws_access_key_id = CFG\naws_secret_access_key = CFGS\n");
  env.Set("AWS_PROFILE", "p");
  EXPECT_EQ(Resolve(env).access_key_id, "CRED");
}

TEST(S3SettingsTest, FilesNamedByTheirVariables) {
  FakeEnv env;
  env.Write("elsewhere/creds", "[default]\naws_access_key_id = X\naws_secret_access_key = XS\n");
  env.Write("elsewhere/conf", "[default]\nregion = sa-east-1\n");
  env.WriteCredentials("[default]\naws_access_key_id = HOME\naws_secret_access_key = HS\n");
  env.Set("AWS_SHARED_CREDENTIALS_FILE", env.Path("elsewhere/creds"));
  env.Set("AWS_CONFIG_FILE", env.Path("elsewhere/conf"));
  S3Settings s = Resolve(env);
  EXPECT_EQ(s.access_key_id, "X");
  EXPECT_EQ(s.region, "sa-east-1");
}

TEST(S3SettingsTest, MissingProfileIsAnErrorNamingItsSource) {
  FakeEnv env;
  env.WriteCredentials("[default]\naws_access_key_id = D\naws_secret_access_key = DS\n");
  env.Set("AWS_PROFILE", "typo");
  absl::Status status = ResolveError(env);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), AllOf(HasSubstr("\"typo\""), HasSubstr("AWS_PROFILE")));

  S3Flags flags;
  flags.profile = "nope";
  EXPECT_THAT(ResolveError(env, flags).message(),
              AllOf(HasSubstr("\"nope\""), HasSubstr("--s3-profile")));

  // "default" is implied, so naming it needs no file.
  FakeEnv bare;
  bare.Set("AWS_PROFILE", "default");
  EXPECT_EQ(Resolve(bare).access_key_id, "");
}

TEST(S3SettingsTest, HalfAKeyPairInAFileIsAnError) {
  FakeEnv env;
  env.WriteCredentials("[default]\naws_access_key_id = D\n");
  absl::Status status = ResolveError(env);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(env.Path(".aws/credentials") + " [default]"),
                    HasSubstr("aws_access_key_id"), HasSubstr("aws_secret_access_key")));
}

TEST(S3SettingsTest, UnreadableFileIsAnErrorAbsentFileIsNot) {
  FakeEnv env;
  env.Set("AWS_CONFIG_FILE", env.Path("no/such/file"));
  EXPECT_EQ(Resolve(env).region, "us-east-1");

  // A directory where the credentials file should be.
  std::filesystem::create_directories(env.Path(".aws/credentials"));
  absl::Status status = ResolveError(env);
  EXPECT_THAT(status.message(), AllOf(HasSubstr(env.Path(".aws/credentials")), HasSubstr("$HOME")));

  // Larger than any AWS file.
  FakeEnv big;
  big.WriteConfig("[default]\n" + std::string(2 << 20, '#'));
  EXPECT_THAT(ResolveError(big).message(), HasSubstr(big.Path(".aws/config")));
}

TEST(S3SettingsTest, WithoutHomeThereAreNoFiles) {
  FakeEnv env;
  env.Set("HOME", "");
  env.Set("AWS_PROFILE", "x");
  EXPECT_THAT(ResolveError(env).message(), HasSubstr("no HOME"));
}

TEST(S3SettingsTest, RegionOrder) {
  FakeEnv env;
  env.WriteConfig("[default]\nregion = from-config\n");
  EXPECT_EQ(Resolve(env).region, "from-config");
  env.Set("AWS_DEFAULT_REGION", "from-default-region");
  EXPECT_EQ(Resolve(env).region, "from-default-region");
  env.Set("AWS_REGION", "from-region");
  EXPECT_EQ(Resolve(env).region, "from-region");
  S3Flags flags;
  flags.region = "from-flag";
  S3Settings s = Resolve(env, flags);
  EXPECT_EQ(s.region, "from-flag");
  EXPECT_EQ(s.endpoint, "https://s3.from-flag.amazonaws.com");
  EXPECT_THAT(s.described_source, HasSubstr("region from-flag from --s3-region"));

  flags.region = "us-east-1/evil";
  EXPECT_THAT(ResolveError(env, flags).message(),
              AllOf(HasSubstr("us-east-1/evil"), HasSubstr("--s3-region")));
  flags.region = "";
  EXPECT_THAT(ResolveError(env, flags).message(), HasSubstr("--s3-region is empty"));
}

TEST(S3SettingsTest, EndpointOrder) {
  FakeEnv env;
  env.WriteConfig("[default]\nendpoint_url = http://config:1\n");
  EXPECT_EQ(Resolve(env).endpoint, "http://config:1");
  env.Set("AWS_ENDPOINT_URL", "http://generic:2");
  EXPECT_EQ(Resolve(env).endpoint, "http://generic:2");
  env.Set("AWS_ENDPOINT_URL_S3", "http://s3-specific:3");
  EXPECT_EQ(Resolve(env).endpoint, "http://s3-specific:3");
  S3Flags flags;
  flags.endpoint = "HTTP://127.0.0.1:9000/";
  S3Settings s = Resolve(env, flags);
  EXPECT_EQ(s.endpoint, "http://127.0.0.1:9000");
  EXPECT_THAT(s.described_source,
              HasSubstr("endpoint http://127.0.0.1:9000 from --s3-endpoint, path-style"));
}

TEST(S3SettingsTest, BadEndpointsNameTheirSource) {
  FakeEnv env;
  for (const std::string bad :
       {"127.0.0.1:9000", "ftp://h", "https://", "https://h/path", "https://h:0", "https://h:99999",
        "https://h:", "https://u@h", "https://h?x=1", "https://h:90a"}) {
    env.Set("AWS_ENDPOINT_URL_S3", bad);
    absl::Status status = ResolveError(env);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), AllOf(HasSubstr(bad), HasSubstr("AWS_ENDPOINT_URL_S3")));
  }
  env.Set("AWS_ENDPOINT_URL_S3", "http://[::1]:9000");
  EXPECT_EQ(Resolve(env).endpoint, "http://[::1]:9000");
}

TEST(S3SettingsTest, PathStyleDefaultsAndFlag) {
  FakeEnv env;
  EXPECT_FALSE(Resolve(env).path_style);
  env.Set("AWS_ENDPOINT_URL", "http://minio:9000");
  EXPECT_TRUE(Resolve(env).path_style);
  S3Flags flags;
  flags.path_style = false;
  S3Settings s = Resolve(env, flags);
  EXPECT_FALSE(s.path_style);
  EXPECT_THAT(s.described_source, HasSubstr("virtual-hosted (--s3-path-style)"));
  // An explicit endpoint of AWS's own keeps AWS's default.
  env.Set("AWS_ENDPOINT_URL", "https://s3.eu-west-1.amazonaws.com");
  EXPECT_FALSE(Resolve(env).path_style);
  flags.path_style = true;
  env.Set("AWS_ENDPOINT_URL", "");
  EXPECT_TRUE(Resolve(env, flags).path_style);
}

TEST(S3SettingsUrlTest, VirtualHostedStyle) {
  S3Settings s;
  s.endpoint = "https://s3.us-east-1.amazonaws.com";
  s.path_style = false;
  EXPECT_EQ(s.BucketUrl("bucket"), "https://bucket.s3.us-east-1.amazonaws.com/");
  EXPECT_EQ(s.ObjectUrl("bucket", "d/shard-000.tar"),
            "https://bucket.s3.us-east-1.amazonaws.com/d/shard-000.tar");
  // Names that cannot be a host's label go path-style, as in the AWS SDKs.
  EXPECT_EQ(s.BucketUrl("my.bucket"), "https://s3.us-east-1.amazonaws.com/my.bucket/");
  EXPECT_EQ(s.BucketUrl("My_Bucket"), "https://s3.us-east-1.amazonaws.com/My_Bucket/");
}

TEST(S3SettingsUrlTest, PathStyle) {
  S3Settings s;
  s.endpoint = "http://127.0.0.1:9000";
  s.path_style = true;
  EXPECT_EQ(s.BucketUrl("b"), "http://127.0.0.1:9000/b/");
  EXPECT_EQ(s.ObjectUrl("b", "d/x.tar"), "http://127.0.0.1:9000/b/d/x.tar");
}

TEST(S3SettingsUrlTest, KeysArePercentEncodedAsSigV4Expects) {
  S3Settings s;
  s.endpoint = "http://h:1";
  s.path_style = true;
  EXPECT_EQ(s.ObjectUrl("b", "a b+c/d.tar"), "http://h:1/b/a%20b%2Bc/d.tar");
  EXPECT_EQ(s.ObjectUrl("b", "AZaz09-._~/x"), "http://h:1/b/AZaz09-._~/x");
  EXPECT_EQ(s.ObjectUrl("b", "%?#=&:@"), "http://h:1/b/%25%3F%23%3D%26%3A%40");
  EXPECT_EQ(s.ObjectUrl("b", "caf\xC3\xA9"), "http://h:1/b/caf%C3%A9");
}

}  // namespace
}  // namespace shardcast::remote

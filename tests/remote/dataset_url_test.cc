// ParseDatasetUrl and ExpandBraces: the kinds of location, webdataset's brace notation
// (widths, several groups) and the mistakes a user can make in it.
#include "common/remote/dataset_url.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace shardcast::remote {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

std::vector<std::string> Expand(const std::string& pattern) {
  absl::StatusOr<std::vector<std::string>> urls = ExpandBraces(pattern);
  EXPECT_TRUE(urls.ok()) << pattern << ": " << urls.status();
  return urls.ok() ? *urls : std::vector<std::string>();
}

absl::Status ExpandError(const std::string& pattern) {
  absl::StatusOr<std::vector<std::string>> urls = ExpandBraces(pattern);
  EXPECT_FALSE(urls.ok()) << pattern << " expanded";
  EXPECT_EQ(urls.status().code(), absl::StatusCode::kInvalidArgument) << urls.status();
  return urls.status();
}

absl::Status ParseError(const std::string& text) {
  absl::StatusOr<DatasetUrl> url = ParseDatasetUrl(text);
  EXPECT_FALSE(url.ok()) << text << " parsed";
  EXPECT_EQ(url.status().code(), absl::StatusCode::kInvalidArgument) << url.status();
  return url.status();
}

TEST(ExpandBracesTest, WithoutBracesIsThePatternItself) {
  EXPECT_THAT(Expand("https://h/d/a.tar"), ElementsAre("https://h/d/a.tar"));
}

TEST(ExpandBracesTest, RangeWithoutLeadingZerosIsNotPadded) {
  EXPECT_THAT(Expand("s{0..10}"),
              ElementsAre("s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10"));
  EXPECT_THAT(Expand("{8..8}"), ElementsAre("8"));
}

TEST(ExpandBracesTest, RangeKeepsTheFirstBoundsWidth) {
  std::vector<std::string> urls = Expand("shard-{000..010}.tar");
  ASSERT_THAT(urls, SizeIs(11));
  EXPECT_EQ(urls.front(), "shard-000.tar");
  EXPECT_EQ(urls[7], "shard-007.tar");
  EXPECT_EQ(urls.back(), "shard-010.tar");
  // Numbers wider than the first bound are written whole.
  EXPECT_THAT(Expand("{098..100}"), ElementsAre("098", "099", "100"));
  EXPECT_THAT(Expand("{08..11}"), ElementsAre("08", "09", "10", "11"));
  EXPECT_THAT(Expand("{000000..000127}"), SizeIs(128));
}

TEST(ExpandBracesTest, Lists) {
  EXPECT_THAT(Expand("d/{train,val,test}.tar"),
              ElementsAre("d/train.tar", "d/val.tar", "d/test.tar"));
  // A comma makes a list even where an item holds "..".
  EXPECT_THAT(Expand("{a..b,c}"), ElementsAre("a..b", "c"));
  // Empty items are names too, as in braceexpand.
  EXPECT_THAT(Expand("x{,-b}.tar"), ElementsAre("x.tar", "x-b.tar"));
  EXPECT_THAT(Expand("{only}"), ElementsAre("only"));
}

TEST(ExpandBracesTest, SeveralGroupsMultiplyLeftmostSlowest) {
  EXPECT_THAT(Expand("{a,b}/{0..2}-{x,y}"),
              ElementsAre("a/0-x", "a/0-y", "a/1-x", "a/1-y", "a/2-x", "a/2-y", "b/0-x", "b/0-y",
                          "b/1-x", "b/1-y", "b/2-x", "b/2-y"));
  EXPECT_THAT(Expand("{0..1}{0..1}"), ElementsAre("00", "01", "10", "11"));
}

TEST(ExpandBracesTest, MalformedBracesAreRefused) {
  EXPECT_THAT(ExpandError("a{0..3").message(), HasSubstr("unbalanced '{'"));
  EXPECT_THAT(ExpandError("a}0").message(), HasSubstr("unbalanced '}'"));
  EXPECT_THAT(ExpandError("a{0..1}}").message(), HasSubstr("unbalanced '}'"));
  EXPECT_THAT(ExpandError("a{}b").message(), HasSubstr("empty braces"));
  EXPECT_THAT(ExpandError("{a,{b,c}}").message(), HasSubstr("nested braces"));
}

TEST(ExpandBracesTest, BadRangesAreRefused) {
  EXPECT_THAT(ExpandError("{a..z}").message(), HasSubstr("non-negative integers"));
  EXPECT_THAT(ExpandError("{-1..3}").message(), HasSubstr("non-negative integers"));
  EXPECT_THAT(ExpandError("{1..}").message(), HasSubstr("non-negative integers"));
  EXPECT_THAT(ExpandError("{1..2..3}").message(), HasSubstr("non-negative integers"));
  EXPECT_THAT(ExpandError("{10..2}").message(), HasSubstr("runs backwards"));
  EXPECT_THAT(ExpandError("{0..1234567890123456789}").message(), HasSubstr("too large"));
}

TEST(ExpandBracesTest, TooManyUrlsAreRefusedBeforeExpansion) {
  // A billion-entry range would take gigabytes if it were expanded before the check.
  EXPECT_THAT(ExpandError("{0..999999999}").message(), HasSubstr("more than 1000000 URLs"));
  // Each group alone is small; their product is not.
  EXPECT_THAT(ExpandError("{0..999}{0..999}{0..9}").message(), HasSubstr("more than"));
  EXPECT_THAT(ExpandBraces("{0..999}{0..999}").value(), SizeIs(kMaxExpandedUrls));
}

TEST(ParseDatasetUrlTest, LocalDirectory) {
  for (const std::string text : {"/data/train", "relative/dir", "./x", "C:dir"}) {
    absl::StatusOr<DatasetUrl> url = ParseDatasetUrl(text);
    ASSERT_TRUE(url.ok()) << url.status();
    EXPECT_EQ(url->kind, DatasetUrl::Kind::kLocal);
    EXPECT_EQ(url->dir, text);
    EXPECT_EQ(url->text, text);
  }
  EXPECT_THAT(ParseError("").message(), HasSubstr("empty"));
}

TEST(ParseDatasetUrlTest, S3PrefixGetsATrailingSlash) {
  struct Case {
    std::string text, bucket, prefix;
  };
  for (const Case& c : std::vector<Case>{{"s3://bkt/train", "bkt", "train/"},
                                         {"s3://bkt/train/", "bkt", "train/"},
                                         {"s3://bkt/a/b/c", "bkt", "a/b/c/"},
                                         {"s3://bkt", "bkt", ""},
                                         {"s3://bkt/", "bkt", ""},
                                         {"S3://my.bucket_1/x", "my.bucket_1", "x/"}}) {
    absl::StatusOr<DatasetUrl> url = ParseDatasetUrl(c.text);
    ASSERT_TRUE(url.ok()) << c.text << ": " << url.status();
    EXPECT_EQ(url->kind, DatasetUrl::Kind::kS3);
    EXPECT_EQ(url->bucket, c.bucket) << c.text;
    EXPECT_EQ(url->prefix, c.prefix) << c.text;
    EXPECT_EQ(url->text, c.text);
  }
}

TEST(ParseDatasetUrlTest, BadS3Urls) {
  EXPECT_THAT(ParseError("s3://").message(), HasSubstr("no bucket"));
  EXPECT_THAT(ParseError("s3:///prefix").message(), HasSubstr("no bucket"));
  EXPECT_THAT(ParseError("s3://my bucket/p").message(), HasSubstr("whitespace"));
  EXPECT_THAT(ParseError("s3://b/shard-{0..3}.tar").message(),
              HasSubstr("braces are for http(s) URLs; s3:// lists the prefix"));
}

TEST(ParseDatasetUrlTest, HttpUrlsExpandAroundACommonBase) {
  absl::StatusOr<DatasetUrl> url =
      ParseDatasetUrl("https://host.example/d/shard-{000000..000127}.tar");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->kind, DatasetUrl::Kind::kHttp);
  ASSERT_THAT(url->urls, SizeIs(128));
  EXPECT_EQ(url->urls.front(), "https://host.example/d/shard-000000.tar");
  EXPECT_EQ(url->urls.back(), "https://host.example/d/shard-000127.tar");
  EXPECT_EQ(url->base, "https://host.example/d/");
}

TEST(ParseDatasetUrlTest, HttpBaseIsTheSharedDirectory) {
  // Groups in the directory: the base stops before them.
  absl::StatusOr<DatasetUrl> url = ParseDatasetUrl("http://h:8080/d/{train,val}/s-{0..1}.tar");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_THAT(url->urls,
              ElementsAre("http://h:8080/d/train/s-0.tar", "http://h:8080/d/train/s-1.tar",
                          "http://h:8080/d/val/s-0.tar", "http://h:8080/d/val/s-1.tar"));
  EXPECT_EQ(url->base, "http://h:8080/d/");

  // Names that share a prefix ("t") do not make it part of the base.
  url = ParseDatasetUrl("https://h/data/{train,test}.tar");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->base, "https://h/data/");

  // One URL: one shard, named by its last path element.
  url = ParseDatasetUrl("https://h/x.tar");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_THAT(url->urls, ElementsAre("https://h/x.tar"));
  EXPECT_EQ(url->base, "https://h/");

  // A '/' in a query string (a presigned URL's) is not a directory.
  url = ParseDatasetUrl("https://h/d/{a,b}.tar?cred=AKIA/2024/x");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->base, "https://h/d/");
}

TEST(ParseDatasetUrlTest, BadHttpUrls) {
  EXPECT_THAT(ParseError("https://h/d/").message(), HasSubstr("cannot be listed"));
  EXPECT_THAT(ParseError("https://h/d/{a,b/}").message(), HasSubstr("cannot be listed"));
  EXPECT_THAT(ParseError("https://{a,b}.example/x.tar").message(), HasSubstr("different hosts"));
  EXPECT_THAT(ParseError("https://h").message(), HasSubstr("no path"));
  EXPECT_THAT(ParseError("https:///x.tar").message(), HasSubstr("no host"));
  EXPECT_THAT(ParseError("https://h/{a,a}.tar").message(), HasSubstr("more than once"));
  EXPECT_THAT(ParseError("https://h/{0..3.tar").message(), HasSubstr("unbalanced"));
  EXPECT_THAT(ParseError("https://h/{0..9999999}.tar").message(), HasSubstr("more than"));
}

TEST(ParseDatasetUrlTest, OtherSchemesAreRefused) {
  absl::Status gs = ParseError("gs://bucket/train");
  EXPECT_THAT(gs.message(), HasSubstr("s3://"));
  EXPECT_THAT(gs.message(), HasSubstr("--s3-endpoint https://storage.googleapis.com"));
  EXPECT_THAT(ParseError("ftp://h/x.tar").message(), HasSubstr("unknown scheme \"ftp://\""));
  // (file:///data was refused here before file:// became a store kind.)
  EXPECT_THAT(ParseError("gopher:///data").message(), HasSubstr("unknown scheme"));
}

TEST(ParseDatasetUrlTest, FileUrlsNameAnAbsoluteDirectory) {
  absl::StatusOr<DatasetUrl> url = ParseDatasetUrl("file:///data/train");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->kind, DatasetUrl::Kind::kFile);
  EXPECT_EQ(url->dir, "/data/train");
  EXPECT_EQ(url->text, "file:///data/train");
  EXPECT_EQ(ParseDatasetUrl("FILE:///data/")->dir, "/data/");
  // A host would be another machine's disk; a relative path has no meaning in a URL.
  EXPECT_THAT(ParseError("file://host/data").message(), HasSubstr("file:///dir"));
  EXPECT_THAT(ParseError("file://").message(), HasSubstr("absolute path"));
}

// Issue 35: a password in a dataset URL reached GetStatus, stream errors and the log.
// Parsing takes the userinfo out: what flows on (urls, base, text) never holds it, and
// the fetcher gets it as credentials.
TEST(ParseDatasetUrlTest, UserinfoBecomesCredentialsAndLeavesTheUrls) {
  absl::StatusOr<DatasetUrl> url =
      ParseDatasetUrl("http://alice:s3cr%40t@h:8080/d/shard-{0..1}.tar");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_THAT(url->urls, ElementsAre("http://h:8080/d/shard-0.tar", "http://h:8080/d/shard-1.tar"));
  EXPECT_EQ(url->base, "http://h:8080/d/");
  ASSERT_TRUE(url->credentials.has_value());
  EXPECT_EQ(url->credentials->user, "alice");
  EXPECT_EQ(url->credentials->password, "s3cr@t");  // percent-decoded, as curl sends it
  EXPECT_EQ(url->text, "http://alice:REDACTED@h:8080/d/shard-{0..1}.tar");

  url = ParseDatasetUrl("https://h/d/x.tar");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_FALSE(url->credentials.has_value());

  // A user alone (a token as user name) is a credential too.
  url = ParseDatasetUrl("https://ghp_TOKEN@h/d/x.tar");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->urls.front(), "https://h/d/x.tar");
  EXPECT_EQ(url->credentials->user, "ghp_TOKEN");
  EXPECT_EQ(url->credentials->password, "");
  EXPECT_THAT(url->text, Not(HasSubstr("ghp_TOKEN")));
}

TEST(ParseDatasetUrlTest, ErrorsNeverEchoAPassword) {
  for (const std::string text :
       {"http://u:hunter2@h/d/", "http://u:hunter2@h/{0..3.tar", "http://u:hunter2@h",
        "http://u:hunter2@h/{a,a}.tar", "ftp://u:hunter2@h/x.tar", "s3://u:hunter2@bucket/p",
        "http://u:hunter2@h/d/x.tar?X-Amz-Signature=abc/"}) {
    absl::StatusOr<DatasetUrl> url = ParseDatasetUrl(text);
    ASSERT_FALSE(url.ok()) << text;
    EXPECT_THAT(url.status().message(), Not(HasSubstr("hunter2"))) << url.status();
  }
}

TEST(RedactedUrlTest, PasswordsAndSecretQueryValuesAreReplaced) {
  EXPECT_EQ(RedactedUrl("http://u:pw@h/d/x.tar"), "http://u:REDACTED@h/d/x.tar");
  EXPECT_EQ(RedactedUrl("https://tok@h/x.tar"), "https://REDACTED@h/x.tar");
  EXPECT_EQ(RedactedUrl("https://h/d/x.tar"), "https://h/d/x.tar");
  EXPECT_EQ(RedactedUrl("/data/train"), "/data/train");
  EXPECT_EQ(RedactedUrl("s3://bucket/prefix/"), "s3://bucket/prefix/");
  // A '@' in the path is not userinfo.
  EXPECT_EQ(RedactedUrl("https://h/d/a@b.tar"), "https://h/d/a@b.tar");
  // Presigned S3 URLs: the signature, the credential and the session token go; the
  // rest (what is signed for how long) stays, it helps to read an error.
  EXPECT_EQ(RedactedUrl("https://b.s3.amazonaws.com/x.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256&"
                        "X-Amz-Credential=AKIA%2F20240101&X-Amz-Expires=3600&"
                        "X-Amz-Security-Token=FQoG&X-Amz-Signature=deadbeef#frag"),
            "https://b.s3.amazonaws.com/x.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256&"
            "X-Amz-Credential=REDACTED&X-Amz-Expires=3600&X-Amz-Security-Token=REDACTED&"
            "X-Amz-Signature=REDACTED#frag");
  EXPECT_EQ(RedactedUrl("https://h/x.tar?token=1&sig=2&Signature=3&password=4&key=5&"
                        "access_token=6&api_key=7&page=8"),
            "https://h/x.tar?token=REDACTED&sig=REDACTED&Signature=REDACTED&password=REDACTED&"
            "key=REDACTED&access_token=REDACTED&api_key=REDACTED&page=8");
  // Google's and Azure's signed URLs.
  EXPECT_EQ(RedactedUrl("https://h/x?X-Goog-Signature=a&sv=2020&sig=b"),
            "https://h/x?X-Goog-Signature=REDACTED&sv=2020&sig=REDACTED");
}

TEST(RedactedUrlTest, EveryUrlInAMessageIsRedacted) {
  EXPECT_EQ(RedactUrlsIn("GET http://u:pw@h/d/x.tar?sig=abc: HTTP 403 Forbidden"),
            "GET http://u:REDACTED@h/d/x.tar?sig=REDACTED: HTTP 403 Forbidden");
  EXPECT_EQ(RedactUrlsIn("dataset 'a' (http://u:pw@h/d/{0..3}.tar), then "
                         "\"https://v:pw2@g/y.tar?token=t\"."),
            "dataset 'a' (http://u:REDACTED@h/d/{0..3}.tar), then "
            "\"https://v:REDACTED@g/y.tar?token=REDACTED\".");
  EXPECT_EQ(RedactUrlsIn("no url here: a://"), "no url here: a://");
  EXPECT_EQ(RedactUrlsIn(""), "");
}

}  // namespace
}  // namespace shardcast::remote

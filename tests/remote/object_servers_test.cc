// The harness of the remote tests (tests/support/object_servers.h) against libcurl: what
// each server and each fault of tools/fault_proxy.py looks like to a client. Timing
// checks are lower bounds only (a loaded machine is slower, never faster).
#include "tests/support/object_servers.h"

#include <curl/curl.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_dir.h"

namespace shardcast::testing_util {
namespace {

using ::testing::HasSubstr;

// `size` bytes that differ from one offset to the next, so a wrong slice shows.
std::string Pattern(size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131 + i / 251) & 0xff);
  return bytes;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

struct Reply {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string body;
  std::string headers;  // as received, lower-cased names not guaranteed
  long new_connections = 0;
  double seconds = 0;
};

size_t Append(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

// One libcurl client, reused from request to request (as the remote reader reuses its
// handles), so that keep-alive through the proxy shows in new_connections.
class Client {
 public:
  Client() : curl_(curl_easy_init()) {}
  ~Client() { curl_easy_cleanup(curl_); }

  struct Options {
    std::string method = "GET";
    std::string range;       // "0-9"
    std::string body;        // PUT
    std::string sigv4_user;  // "AKID:SECRET": signed with CURLOPT_AWS_SIGV4

    Options& Range(const std::string& r) { return range = r, *this; }
    Options& Put(const std::string& b) { return method = "PUT", body = b, *this; }
    Options& SignAs(const std::string& user) { return sigv4_user = user, *this; }
  };

  Reply Fetch(const std::string& url, const Options& options) {
    curl_easy_reset(curl_);
    Reply reply;
    curl_slist* headers = nullptr;
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, Append);
    curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &reply.body);
    curl_easy_setopt(curl_, CURLOPT_HEADERFUNCTION, Append);
    curl_easy_setopt(curl_, CURLOPT_HEADERDATA, &reply.headers);
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl_, CURLOPT_TIMEOUT, 30L);
    if (!options.range.empty()) curl_easy_setopt(curl_, CURLOPT_RANGE, options.range.c_str());
    if (options.method == "PUT") {
      curl_easy_setopt(curl_, CURLOPT_CUSTOMREQUEST, "PUT");
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, options.body.data());
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE_LARGE,
                       static_cast<curl_off_t>(options.body.size()));
      headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
      headers = curl_slist_append(headers, "Expect:");
    }
    if (!options.sigv4_user.empty()) {
      curl_easy_setopt(curl_, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:s3");
      curl_easy_setopt(curl_, CURLOPT_USERPWD, options.sigv4_user.c_str());
      // S3 (and s3rver) require it on a signed request; libcurl signs it and uses it as
      // the payload hash.
      headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    }
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers);
    const auto start = std::chrono::steady_clock::now();
    reply.code = curl_easy_perform(curl_);
    reply.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &reply.status);
    curl_easy_getinfo(curl_, CURLINFO_NUM_CONNECTS, &reply.new_connections);
    curl_slist_free_all(headers);
    return reply;
  }
  Reply Get(const std::string& url) { return Fetch(url, {}); }

 private:
  CURL* curl_;
};

TEST(NginxServerTest, ServesAFileAndItsRanges) {
  TempDir dir;
  const std::string bytes = Pattern(100000);
  WriteFile(dir / "shard-0.tar", bytes);
  auto nginx = NginxServer::Start(dir.path());
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  EXPECT_EQ((*nginx)->url(), absl::StrCat("http://127.0.0.1:", (*nginx)->port()));

  Client client;
  Reply whole = client.Get((*nginx)->url() + "/shard-0.tar");
  ASSERT_EQ(whole.code, CURLE_OK);
  EXPECT_EQ(whole.status, 200);
  EXPECT_EQ(whole.body, bytes);
  EXPECT_THAT(absl::AsciiStrToLower(whole.headers), HasSubstr("etag:"));

  Reply slice =
      client.Fetch((*nginx)->url() + "/shard-0.tar", Client::Options().Range("1000-1999"));
  ASSERT_EQ(slice.code, CURLE_OK);
  EXPECT_EQ(slice.status, 206);
  EXPECT_EQ(slice.body, bytes.substr(1000, 1000));
  EXPECT_EQ(slice.new_connections, 0) << "keep-alive";

  EXPECT_EQ(client.Get((*nginx)->url() + "/missing").status, 404);
}

TEST(NginxServerTest, NotADirectoryIsAnError) {
  auto nginx = NginxServer::Start("/nonexistent/shardcast");
  EXPECT_EQ(nginx.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(S3rverServerTest, PutsAndServesObjects) {
  auto s3 = S3rverServer::Start();
  ASSERT_TRUE(s3.ok()) << s3.status();
  ASSERT_TRUE((*s3)->CreateBucket("data").ok());
  const std::string bytes = Pattern(70000);
  // A key that needs encoding: a space, a '+', a '$'.
  ASSERT_TRUE((*s3)->Put("data", "train/a b+c$.tar", bytes).ok());

  Client client;
  Reply got = client.Get((*s3)->endpoint() + "/data/train/a%20b%2Bc%24.tar");
  ASSERT_EQ(got.code, CURLE_OK);
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, bytes);
  Reply slice = client.Fetch((*s3)->endpoint() + "/data/train/a%20b%2Bc%24.tar",
                             Client::Options().Range("5-14"));
  EXPECT_EQ(slice.status, 206);
  EXPECT_EQ(slice.body, bytes.substr(5, 10));

  // Replacing an object changes its ETag.
  const auto etag = [&] {
    std::string headers = absl::AsciiStrToLower(
        client.Fetch((*s3)->endpoint() + "/data/train/a%20b%2Bc%24.tar", Client::Options())
            .headers);
    const size_t at = headers.find("etag:");
    return at == std::string::npos ? std::string()
                                   : headers.substr(at, headers.find('\n', at) - at);
  };
  const std::string before = etag();
  ASSERT_TRUE((*s3)->Put("data", "train/a b+c$.tar", "other bytes").ok());
  EXPECT_NE(etag(), before);

  TempDir dir;
  WriteFile(dir / "shard-0.tar", "zero");
  WriteFile(dir / "shard-1.tar", "one");
  ASSERT_TRUE((*s3)->PutDirectory("data", "set/", dir.path()).ok());
  EXPECT_EQ(client.Get((*s3)->endpoint() + "/data/set/shard-1.tar").body, "one");
  Reply list = client.Get((*s3)->endpoint() + "/data?list-type=2&prefix=set%2F");
  EXPECT_EQ(list.status, 200);
  EXPECT_THAT(list.body, HasSubstr("<Key>set/shard-0.tar</Key>"));
  EXPECT_THAT(list.body, HasSubstr("<Key>set/shard-1.tar</Key>"));

  EXPECT_FALSE((*s3)->Put("no-such-bucket", "k", "v").ok());
}

// nginx behind the proxy, with one 20 KB file.
class FaultProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bytes_ = Pattern(20000);
    WriteFile(dir_ / "shard-0.tar", bytes_);
    auto nginx = NginxServer::Start(dir_.path());
    ASSERT_TRUE(nginx.ok()) << nginx.status();
    nginx_ = *std::move(nginx);
    auto proxy = FaultProxy::Start(nginx_->url());
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = *std::move(proxy);
    url_ = proxy_->url() + "/shard-0.tar";
  }

  int64_t Count(const std::string& kind) {
    auto count = proxy_->Count(kind);
    EXPECT_TRUE(count.ok()) << count.status();
    return count.value_or(-1);
  }

  TempDir dir_;
  std::string bytes_;
  std::unique_ptr<NginxServer> nginx_;
  std::unique_ptr<FaultProxy> proxy_;
  std::string url_;
  Client client_;
};

TEST_F(FaultProxyTest, ForwardsRangesWithKeepAlive) {
  Reply whole = client_.Get(url_);
  ASSERT_EQ(whole.code, CURLE_OK);
  EXPECT_EQ(whole.body, bytes_);
  Reply slice = client_.Fetch(url_, Client::Options().Range("100-199"));
  EXPECT_EQ(slice.status, 206);
  EXPECT_EQ(slice.body, bytes_.substr(100, 100));
  EXPECT_EQ(slice.new_connections, 0);
  EXPECT_EQ(Count("forwarded"), 2);
  EXPECT_EQ(Count("requests"), 2);
  EXPECT_FALSE(proxy_->Count("no-such-kind").ok());
}

TEST_F(FaultProxyTest, CutBodyEndsTheBodyEarly) {
  ASSERT_TRUE(proxy_->CutBody("shard-0", 1000, 1).ok());
  Reply cut = client_.Get(url_);
  EXPECT_EQ(cut.code, CURLE_PARTIAL_FILE) << curl_easy_strerror(cut.code);
  EXPECT_EQ(cut.body, bytes_.substr(0, 1000));
  EXPECT_THAT(cut.headers, HasSubstr("Content-Length: 20000"));
  // The count is spent: the next one is whole.
  Reply whole = client_.Get(url_);
  EXPECT_EQ(whole.code, CURLE_OK);
  EXPECT_EQ(whole.body, bytes_);
  EXPECT_EQ(Count("cut"), 1);
  EXPECT_EQ(Count("forwarded"), 1);
}

TEST_F(FaultProxyTest, CutBodyMatchesOnlyItsPaths) {
  WriteFile(dir_ / "other.tar", "other");
  ASSERT_TRUE(proxy_->CutBody("shard-0", 0, -1).ok());
  EXPECT_EQ(client_.Get(proxy_->url() + "/other.tar").body, "other");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(client_.Get(url_).code, CURLE_PARTIAL_FILE);
  ASSERT_TRUE(proxy_->ClearFaults().ok());
  EXPECT_EQ(client_.Get(url_).code, CURLE_OK);
  EXPECT_EQ(Count("cut"), 3);
  EXPECT_EQ(Count("requests"), 5);
}

TEST_F(FaultProxyTest, FailWithAnswersRetryAfterAndKeepsTheConnection) {
  ASSERT_TRUE(proxy_->FailWith("", 503, 2, 1).ok());
  Reply failed = client_.Get(url_);
  ASSERT_EQ(failed.code, CURLE_OK);
  EXPECT_EQ(failed.status, 503);
  EXPECT_THAT(failed.headers, HasSubstr("Retry-After: 2\r\n"));
  EXPECT_THAT(failed.body, HasSubstr("<Code>SlowDown</Code>"));
  Reply ok = client_.Get(url_);
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, bytes_);
  EXPECT_EQ(ok.new_connections, 0);

  ASSERT_TRUE(proxy_->FailWith("shard", 500, -1, 1).ok());
  Reply internal = client_.Get(url_);
  EXPECT_EQ(internal.status, 500);
  EXPECT_THAT(internal.headers, ::testing::Not(HasSubstr("Retry-After")));
  EXPECT_THAT(internal.body, HasSubstr("<Code>InternalError</Code>"));
  EXPECT_EQ(Count("failed"), 2);
}

TEST_F(FaultProxyTest, TrickleSlowsTheBody) {
  ASSERT_TRUE(proxy_->Trickle("", 40000, 1).ok());
  Reply slow = client_.Get(url_);
  ASSERT_EQ(slow.code, CURLE_OK);
  EXPECT_EQ(slow.body, bytes_);
  EXPECT_GE(slow.seconds, 0.4) << "20 KB at 40 KB/s";
  EXPECT_EQ(Count("trickled"), 1);
}

TEST_F(FaultProxyTest, DelayWaitsBeforeEachRequest) {
  ASSERT_TRUE(proxy_->Delay(300).ok());
  EXPECT_GE(client_.Get(url_).seconds, 0.3);
  EXPECT_GE(client_.Get(url_).seconds, 0.3);
  ASSERT_TRUE(proxy_->Delay(0).ok());
  EXPECT_EQ(client_.Get(url_).body, bytes_);
}

TEST_F(FaultProxyTest, FaultsApplyInTheOrderArmed) {
  ASSERT_TRUE(proxy_->FailWith("", 503, 1, 1).ok());
  ASSERT_TRUE(proxy_->CutBody("", 10, 1).ok());
  EXPECT_EQ(client_.Get(url_).status, 503);
  EXPECT_EQ(client_.Get(url_).code, CURLE_PARTIAL_FILE);
  EXPECT_EQ(client_.Get(url_).body, bytes_);
}

// s3rver behind the proxy, the proxy checking SigV4 signatures.
class SigV4Test : public ::testing::Test {
 protected:
  static constexpr char kSecret[] = "a-test-secret/with+signs";

  void SetUp() override {
    auto s3 = S3rverServer::Start();
    ASSERT_TRUE(s3.ok()) << s3.status();
    s3_ = *std::move(s3);
    ASSERT_TRUE(s3_->CreateBucket("data").ok());
    bytes_ = Pattern(5000);
    ASSERT_TRUE(s3_->Put("data", "a/shard 0.tar", bytes_).ok());
    auto proxy = FaultProxy::Start(s3_->endpoint());
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = *std::move(proxy);
    ASSERT_TRUE(proxy_->VerifySigV4(S3rverServer::kAccessKeyId, kSecret).ok());
  }

  std::string User(const std::string& secret = kSecret) {
    return absl::StrCat(S3rverServer::kAccessKeyId, ":", secret);
  }

  std::unique_ptr<S3rverServer> s3_;
  std::unique_ptr<FaultProxy> proxy_;
  std::string bytes_;
  Client client_;
};

TEST_F(SigV4Test, RefusesUnsignedAndWronglySignedRequests) {
  Reply unsigned_reply = client_.Get(proxy_->url() + "/data/a/shard%200.tar");
  EXPECT_EQ(unsigned_reply.status, 403);
  EXPECT_THAT(unsigned_reply.body, HasSubstr("<Code>SignatureDoesNotMatch</Code>"));
  Reply wrong = client_.Fetch(proxy_->url() + "/data/a/shard%200.tar",
                              Client::Options().SignAs(User("another secret")));
  EXPECT_EQ(wrong.status, 403);
  EXPECT_THAT(wrong.body, HasSubstr("<Code>SignatureDoesNotMatch</Code>"));
  auto bad = proxy_->Count("bad_signature");
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 2);
}

TEST_F(SigV4Test, AcceptsLibcurlsSignature) {
  Reply got =
      client_.Fetch(proxy_->url() + "/data/a/shard%200.tar", Client::Options().SignAs(User()));
  ASSERT_EQ(got.code, CURLE_OK);
  EXPECT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.body, bytes_);
  Reply slice = client_.Fetch(proxy_->url() + "/data/a/shard%200.tar",
                              Client::Options().Range("10-19").SignAs(User()));
  EXPECT_EQ(slice.status, 206) << slice.body;
  EXPECT_EQ(slice.body, bytes_.substr(10, 10));
  Reply put = client_.Fetch(proxy_->url() + "/data/b/new.tar",
                            Client::Options().Put("new bytes").SignAs(User()));
  EXPECT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(client_.Get(s3_->endpoint() + "/data/b/new.tar").body, "new bytes");
  // The check off again: unsigned requests pass.
  ASSERT_TRUE(proxy_->VerifySigV4("", "").ok());
  EXPECT_EQ(client_.Get(proxy_->url() + "/data/a/shard%200.tar").status, 200);
}

// ListObjectsV2 signed by libcurl. S3 signs the query canonicalized: parameters sorted
// by name, each AWS-encoded (AWS's "Get Bucket (List Objects)" example, checked by
// fault_proxy.py --self-test). libcurl up to at least 7.88 (Debian 12) signs the query
// exactly as it is in the URL instead (curl issue #9717), so a signed list request is
// right only when the URL's query is canonical already: sorted and AWS-encoded.
TEST_F(SigV4Test, ListObjectsIsSignedRightOnlyWithACanonicalQuery) {
  Reply sorted = client_.Fetch(proxy_->url() + "/data?delimiter=%2F&list-type=2&prefix=a%2F",
                               Client::Options().SignAs(User()));
  EXPECT_EQ(sorted.status, 200) << sorted.body;
  EXPECT_THAT(sorted.body, HasSubstr("<Key>a/shard 0.tar</Key>"));

  Reply unsorted = client_.Fetch(proxy_->url() + "/data?list-type=2&prefix=a%2F&delimiter=%2F",
                                 Client::Options().SignAs(User()));
  if (curl_version_info(CURLVERSION_NOW)->version_num <= 0x075801) {  // 7.88.1
    EXPECT_EQ(unsorted.status, 403) << "libcurl signed the query sorted: curl issue #9717 is "
                                       "fixed in this version, update this test";
    EXPECT_THAT(unsorted.body, HasSubstr("<Code>SignatureDoesNotMatch</Code>"));
  } else {
    // A newer libcurl may sort the query itself: both are then right.
    EXPECT_THAT(unsorted.status, ::testing::AnyOf(200, 403));
  }
}

TEST(ObjectServersTest, AMissingProgramNamesTheSetupScript) {
  setenv("SHARDCAST_S3RVER", "/nonexistent/s3rver", 1);
  auto s3 = S3rverServer::Start();
  unsetenv("SHARDCAST_S3RVER");
  EXPECT_EQ(s3.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s3.status().message()), HasSubstr("tools/setup-test-servers.sh"));

  setenv("SHARDCAST_NGINX", "/nonexistent/nginx", 1);
  TempDir dir;
  auto nginx = NginxServer::Start(dir.path());
  unsetenv("SHARDCAST_NGINX");
  EXPECT_EQ(nginx.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ObjectServersTest, AProgramThatExitsAtOnceIsAnError) {
  // /bin/false takes s3rver's arguments and exits: every attempt fails, and the error
  // names the program.
  setenv("SHARDCAST_S3RVER", "/bin/false", 1);
  auto s3 = S3rverServer::Start();
  unsetenv("SHARDCAST_S3RVER");
  EXPECT_EQ(s3.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s3.status().message()), HasSubstr("s3rver exited"));
}

}  // namespace
}  // namespace shardcast::testing_util

// HttpFetcher against real servers on loopback: nginx serving files, s3rver serving a
// bucket, and the fault proxy in front of either cutting bodies, failing, trickling,
// delaying and checking SigV4 signatures.
#include "common/remote/http_fetcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/remote/s3_settings.h"
#include "common/shards/shard_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_clock.h"
#include "tests/support/object_servers.h"
#include "tests/support/remote_clients.h"
#include "tests/support/temp_dir.h"

namespace shardcast::remote {
namespace {

using ::shardcast::testing_util::FaultProxy;
using ::shardcast::testing_util::MakeQuickFetcher;
using ::shardcast::testing_util::NginxServer;
using ::shardcast::testing_util::QuickRetryOptions;
using ::shardcast::testing_util::S3rverServer;
using ::shardcast::testing_util::S3rverSettings;
using ::shardcast::testing_util::TempDir;
using ::testing::HasSubstr;

constexpr size_t kObjectBytes = 1 << 20;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 random(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(random());
  return out;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

RangeRequest Range(const std::string& url, uint64_t offset, uint64_t length) {
  RangeRequest request;
  request.url = url;
  request.offset = offset;
  request.length = length;
  return request;
}

// From `offset` to the object's end.
RangeRequest ToEnd(const std::string& url, uint64_t offset = 0) {
  RangeRequest request;
  request.url = url;
  request.offset = offset;
  request.to_end = true;
  return request;
}

// nginx serving one 1 MiB file, alone and behind a fault proxy; shared by the suite
// (servers take a while to start), faults cleared before each test.
class NginxFetchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("http_fetcher_test");
    bytes_ = new std::string(RandomBytes(kObjectBytes, 1));
    WriteFile(*dir_ / "data.tar", *bytes_);
    absl::StatusOr<std::unique_ptr<NginxServer>> nginx = NginxServer::Start(dir_->path());
    ASSERT_TRUE(nginx.ok()) << nginx.status();
    nginx_ = nginx->release();
    absl::StatusOr<std::unique_ptr<FaultProxy>> proxy = FaultProxy::Start(nginx_->url());
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = proxy->release();
  }
  static void TearDownTestSuite() {
    delete proxy_;
    delete nginx_;
    delete bytes_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_NE(proxy_, nullptr);
    ASSERT_TRUE(proxy_->ClearFaults().ok());
  }

  static std::string DirectUrl() { return nginx_->url() + "/data.tar"; }
  static std::string ProxiedUrl() { return proxy_->url() + "/data.tar"; }

  static TempDir* dir_;
  static std::string* bytes_;
  static NginxServer* nginx_;
  static FaultProxy* proxy_;
};
TempDir* NginxFetchTest::dir_ = nullptr;
std::string* NginxFetchTest::bytes_ = nullptr;
NginxServer* NginxFetchTest::nginx_ = nullptr;
FaultProxy* NginxFetchTest::proxy_ = nullptr;

TEST_F(NginxFetchTest, RangeReadsEqualTheFile) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  const std::vector<std::pair<uint64_t, uint64_t>> ranges = {
      {0, 1}, {0, 512}, {12345, 100000}, {kObjectBytes - 7, 7}, {0, kObjectBytes}};
  for (const auto& [offset, length] : ranges) {
    absl::StatusOr<std::string> got = fetcher->Get(Range(DirectUrl(), offset, length));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == bytes_->substr(offset, length)) << offset << "+" << length;
  }
  // To the end, from the start and from the middle.
  absl::StatusOr<std::string> whole = fetcher->Get(ToEnd(DirectUrl()));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(*whole == *bytes_);
  absl::StatusOr<std::string> tail = fetcher->Get(ToEnd(DirectUrl(), 1000));
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_TRUE(*tail == bytes_->substr(1000));

  EXPECT_EQ(fetcher->counters().requests.load(), 7);
  EXPECT_EQ(fetcher->counters().retries.load(), 0);
  EXPECT_EQ(fetcher->counters().failures.load(), 0);
  EXPECT_EQ(fetcher->counters().requests_ok.load(), 7);
  EXPECT_GE(fetcher->counters().bytes.load(), static_cast<int64_t>(3 * kObjectBytes));
}

TEST_F(NginxFetchTest, RangePastTheEndIsInvalidArgument) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  absl::StatusOr<std::string> got = fetcher->Get(Range(DirectUrl(), kObjectBytes - 10, 20));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(DirectUrl()));
  got = fetcher->Get(Range(DirectUrl(), kObjectBytes + 10, 20));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
}

TEST_F(NginxFetchTest, WholeObjectStreamsInOrder) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  std::string streamed;
  int chunks = 0;
  absl::Status status = fetcher->GetStreaming(ToEnd(DirectUrl()), [&](absl::string_view chunk) {
    streamed.append(chunk.data(), chunk.size());
    ++chunks;
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(streamed == *bytes_);
  EXPECT_GT(chunks, 1);  // handed over as it arrives, not as one buffer
}

TEST_F(NginxFetchTest, SinkErrorEndsTheRead) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  absl::Status status = fetcher->GetStreaming(ToEnd(DirectUrl()), [](absl::string_view) {
    return absl::ResourceExhaustedError("disk full");
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_EQ(fetcher->counters().retries.load(), 0);
}

TEST_F(NginxFetchTest, HeadGivesSizeAndEtag) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  absl::StatusOr<ObjectHead> head = fetcher->Head(DirectUrl(), std::nullopt);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->size, kObjectBytes);
  EXPECT_TRUE(absl::StartsWith(head->etag, "\"")) << head->etag;
}

// An object that is not there is the store's failure (it was deleted, or the listing
// was wrong), not bad data: marked HostIoError and counted, like any store error.
// Only a file looked for where it may not be (may_be_absent) takes a 404 as an answer.
TEST_F(NginxFetchTest, MissingObjectIsNotFoundNamingTheUrl) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  const std::string url = nginx_->url() + "/absent.tar";
  absl::StatusOr<std::string> got = fetcher->Get(Range(url, 0, 10));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
  EXPECT_TRUE(IsHostIoError(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(url));
  EXPECT_THAT(got.status().message(), HasSubstr("404"));
  absl::StatusOr<ObjectHead> head = fetcher->Head(url, std::nullopt);
  EXPECT_EQ(head.status().code(), absl::StatusCode::kNotFound) << head.status();
  EXPECT_EQ(fetcher->counters().retries.load(), 0);  // never retried here
  EXPECT_EQ(fetcher->counters().failures.load(), 2);

  RangeRequest optional = ToEnd(url);
  optional.may_be_absent = true;
  got = fetcher->Get(optional);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
  EXPECT_FALSE(IsHostIoError(got.status())) << "an answer, not a failing store";
  EXPECT_EQ(fetcher->counters().failures.load(), 2);
}

// 403 (credentials expired), 404 (object deleted) and a malformed 206 in the middle of
// reads: each is the store's error, marked HostIoError (retried by the serve path,
// then failing the stream, never substituted), naming the object and the status, and
// counted in failures. (Before: none marked, so each sample became a grey substitute;
// the 404 not counted at all.)
TEST_F(NginxFetchTest, StoreErrorsOfEveryKindAreHostIoErrorsNamingTheObjectAndCounted) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  struct Case {
    std::string fault;
    std::string want;  // in the message
  };
  const std::vector<Case> cases = {
      {R"({"kind": "fail", "status": 403, "match": "data.tar", "count": 1})", "403"},
      {R"({"kind": "fail", "status": 404, "match": "data.tar", "count": 1})", "404"},
      {R"({"kind": "bad_range", "match": "data.tar", "count": 1})", "206"},
      {R"({"kind": "bad_range", "match": "data.tar", "count": 1, "content_range": "bytes x"})",
       "206"},
  };
  int64_t failures = 0;
  for (const Case& c : cases) {
    ASSERT_TRUE(proxy_->ClearFaults().ok());
    ASSERT_TRUE(proxy_->Arm(c.fault).ok()) << c.fault;
    absl::StatusOr<std::string> got = fetcher->Get(Range(ProxiedUrl(), 1000, 5000));
    EXPECT_FALSE(got.ok()) << c.fault;
    EXPECT_TRUE(IsHostIoError(got.status())) << c.fault << ": " << got.status();
    EXPECT_FALSE(IsShardChanged(got.status())) << got.status();
    EXPECT_THAT(got.status().message(), HasSubstr(ProxiedUrl())) << c.fault;
    EXPECT_THAT(got.status().message(), HasSubstr(c.want)) << c.fault;
    EXPECT_EQ(fetcher->counters().failures.load(), ++failures) << c.fault;
  }
  EXPECT_EQ(*proxy_->Count("malformed"), 2);
  // The store answering again: the same read is whole.
  ASSERT_TRUE(proxy_->ClearFaults().ok());
  absl::StatusOr<std::string> got = fetcher->Get(Range(ProxiedUrl(), 1000, 5000));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == bytes_->substr(1000, 5000));
}

// Length 0 is 0 bytes, never "to the end": no request at all. To the end is its own
// kind of request. (Before: a 0-length range read the object from the offset to its
// end, on every read.)
TEST_F(NginxFetchTest, ZeroLengthRangeSendsNoRequest) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  absl::StatusOr<std::string> got = fetcher->Get(Range(ProxiedUrl(), 4096, 0));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 0u);
  int chunks = 0;
  absl::Status streamed = fetcher->GetStreaming(Range(ProxiedUrl(), 0, 0), [&](absl::string_view) {
    ++chunks;
    return absl::OkStatus();
  });
  EXPECT_TRUE(streamed.ok()) << streamed;
  EXPECT_EQ(chunks, 0);
  EXPECT_EQ(fetcher->counters().requests.load(), 0);
  EXPECT_EQ(fetcher->counters().bytes.load(), 0);
  RangeRequest both = ToEnd(ProxiedUrl());
  both.length = 10;
  EXPECT_EQ(fetcher->Get(both).status().code(), absl::StatusCode::kInvalidArgument);
}

// A whole-object body without Content-Length that goes on past the object's pinned
// size is the store's error, found at the first byte too many: never a buffer growing
// until the deadline. (Before: every byte was taken, 9 MiB for a 1 MiB object.)
TEST_F(NginxFetchTest, BodyLongerThanThePinnedSizeIsAStoreErrorNotAnUnboundedBuffer) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  for (const bool streaming : {false, true}) {
    ASSERT_TRUE(proxy_->ClearFaults().ok());
    ASSERT_TRUE(
        proxy_->Arm(R"({"kind": "overlong", "match": "data.tar", "extra_bytes": 8388608})").ok());
    RangeRequest whole = ToEnd(ProxiedUrl());
    whole.size = kObjectBytes;
    uint64_t sunk = 0;
    absl::Status status;
    if (streaming) {
      status = fetcher->GetStreaming(whole, [&](absl::string_view chunk) {
        sunk += chunk.size();
        return absl::OkStatus();
      });
    } else {
      absl::StatusOr<std::string> got = fetcher->Get(whole);
      status = got.status();
      if (got.ok()) sunk = got->size();
    }
    EXPECT_FALSE(status.ok()) << streaming;
    EXPECT_TRUE(IsHostIoError(status)) << status;
    EXPECT_THAT(status.message(), HasSubstr(ProxiedUrl()));
    EXPECT_THAT(status.message(), HasSubstr("past the end"));
    EXPECT_LE(sunk, kObjectBytes) << "no byte past the object's end is handed on";
  }
  EXPECT_EQ(*proxy_->Count("overlong"), 2);
}

// A big object on a slow but steady link: GetStreaming's deadline bounds progress, not
// the whole read, so it is read whole though that takes longer than request_deadline.
// A Get keeps its deadline for the whole request. (Before: the stream failed at the
// deadline; a shard slower than --remote-timeout could never be indexed.) Every
// attempt is trickled, so the read cannot finish early on an untrickled retry; a
// retry is allowed (a loaded machine may stall the proxy past the low-speed limit,
// and the fetcher then resumes from the last byte), a read cut at the deadline is not.
TEST_F(NginxFetchTest, StreamingASlowButSteadyObjectOutlastsTheDeadline) {
  FetchOptions options = QuickRetryOptions();
  options.request_deadline = absl::Seconds(1);
  options.low_speed_bytes = 4096;
  options.low_speed_time = absl::Seconds(1);
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher(options);
  ASSERT_TRUE(proxy_->Trickle("data.tar", /*bytes_per_second=*/400000, -1).ok());
  std::string streamed;
  const absl::Time start = absl::Now();
  absl::Status status = fetcher->GetStreaming(ToEnd(ProxiedUrl()), [&](absl::string_view chunk) {
    streamed.append(chunk.data(), chunk.size());
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(streamed == *bytes_);
  EXPECT_GT(absl::Now() - start, 2 * options.request_deadline)
      << "1 MiB at 400 kB/s takes 2.6 s: the read outlasted the deadline";
  EXPECT_GE(*proxy_->Count("trickled"), 1);

  absl::StatusOr<std::string> got = fetcher->Get(ToEnd(ProxiedUrl()));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_TRUE(IsHostIoError(got.status()));
}

// ...but a stream that receives nothing fails after request_deadline without a byte.
TEST_F(NginxFetchTest, StreamingWithoutProgressFailsAfterTheDeadline) {
  FetchOptions options = QuickRetryOptions();
  options.request_deadline = absl::Seconds(1);
  options.low_speed_bytes = 0;  // only the deadline stops it
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher(options);
  ASSERT_TRUE(proxy_->Delay(4000).ok());
  const absl::Time start = absl::Now();
  absl::Status status = fetcher->GetStreaming(ToEnd(ProxiedUrl()),
                                              [](absl::string_view) { return absl::OkStatus(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_TRUE(IsHostIoError(status));
  EXPECT_THAT(status.message(), HasSubstr("no byte for 1s"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST_F(NginxFetchTest, RewrittenFileIsShardChanged) {
  const std::string path = *dir_ / "changing.tar";
  const std::string url = nginx_->url() + "/changing.tar";
  WriteFile(path, RandomBytes(4096, 2));
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  absl::StatusOr<ObjectHead> head = fetcher->Head(url, std::nullopt);
  ASSERT_TRUE(head.ok()) << head.status();

  // Other bytes, same size; nginx's ETag is mtime-size, so the mtime must move.
  const auto mtime = std::filesystem::last_write_time(path);
  WriteFile(path, RandomBytes(4096, 3));
  std::filesystem::last_write_time(path, mtime + std::chrono::seconds(10));

  RangeRequest pinned = Range(url, 100, 200);
  pinned.etag = head->etag;
  pinned.size = head->size;
  absl::StatusOr<std::string> got = fetcher->Get(pinned);
  EXPECT_TRUE(IsShardChanged(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(url));
  EXPECT_THAT(got.status().message(), HasSubstr(head->etag));

  // Only the size pinned (a server without ETags): a new size is a change too.
  WriteFile(path, RandomBytes(5000, 4));
  RangeRequest sized = Range(url, 100, 200);
  sized.size = head->size;
  got = fetcher->Get(sized);
  EXPECT_TRUE(IsShardChanged(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("4096"));
  EXPECT_THAT(got.status().message(), HasSubstr("5000"));
}

TEST_F(NginxFetchTest, CutBodyResumesFromTheLastByte) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  const int64_t cut_before = *proxy_->Count("cut");
  ASSERT_TRUE(proxy_->CutBody("data.tar", 100000, 2).ok());
  absl::StatusOr<std::string> got = fetcher->Get(Range(ProxiedUrl(), 1000, 900000));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == bytes_->substr(1000, 900000));
  EXPECT_EQ(fetcher->counters().retries.load(), 2);
  EXPECT_EQ(fetcher->counters().requests.load(), 3);
  EXPECT_EQ(*proxy_->Count("cut") - cut_before, 2);

  // Streaming a whole object: never a byte twice.
  ASSERT_TRUE(proxy_->CutBody("data.tar", 300000, 3).ok());
  std::string streamed;
  absl::Status status = fetcher->GetStreaming(ToEnd(ProxiedUrl()), [&](absl::string_view chunk) {
    streamed.append(chunk.data(), chunk.size());
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(streamed == *bytes_);
  EXPECT_EQ(fetcher->counters().retries.load(), 5);
}

TEST_F(NginxFetchTest, RetryAfterIsWaitedFor) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  ASSERT_TRUE(proxy_->FailWith("data.tar", 503, 1, 1).ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got = fetcher->Get(Range(ProxiedUrl(), 10, 1000));
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == bytes_->substr(10, 1000));
  EXPECT_GE(took, absl::Milliseconds(950));  // Retry-After: 1, not the 10 ms backoff
  EXPECT_LT(took, absl::Seconds(5));
  EXPECT_EQ(fetcher->counters().retries.load(), 1);
}

TEST_F(NginxFetchTest, RetryAfterBeyondTheMaximumFailsAtOnce) {
  FetchOptions options = QuickRetryOptions();
  options.max_retry_after = absl::Seconds(5);
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher(options);
  ASSERT_TRUE(proxy_->FailWith("data.tar", 503, 120, 1).ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got = fetcher->Get(Range(ProxiedUrl(), 0, 100));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_TRUE(IsHostIoError(got.status()));
  EXPECT_THAT(got.status().message(), HasSubstr("2m"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST_F(NginxFetchTest, TrickleIsCutAndResumed) {
  FetchOptions options = QuickRetryOptions();
  options.low_speed_bytes = 64 * 1024;
  options.low_speed_time = absl::Seconds(1);
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher(options);
  ASSERT_TRUE(proxy_->Trickle("data.tar", 2000, 1).ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got = fetcher->Get(Range(ProxiedUrl(), 0, kObjectBytes));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == *bytes_);
  EXPECT_GE(fetcher->counters().retries.load(), 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // not 500 s at 2 KB/s
}

TEST_F(NginxFetchTest, StoreFailingUntilTheDeadlineIsUnavailable) {
  FetchOptions options = QuickRetryOptions();
  options.request_deadline = absl::Seconds(2);
  options.first_backoff = absl::Milliseconds(50);
  options.max_backoff = absl::Milliseconds(200);
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher(options);
  ASSERT_TRUE(proxy_->FailWith("", 503, -1, -1).ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got = fetcher->Get(Range(ProxiedUrl(), 0, 100));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_TRUE(IsHostIoError(got.status()));
  EXPECT_THAT(got.status().message(), HasSubstr(ProxiedUrl()));
  EXPECT_THAT(got.status().message(), HasSubstr("attempts"));
  EXPECT_THAT(got.status().message(), HasSubstr("503"));
  EXPECT_GE(took, absl::Milliseconds(1500));
  EXPECT_LT(took, absl::Seconds(4));
  EXPECT_GE(fetcher->counters().retries.load(), 3);
  EXPECT_EQ(fetcher->counters().failures.load(), 1);
}

// The same faults with the backoffs on a fake clock (FetchOptions::clock): the real
// store and proxy answer, but a minute of retries and a Retry-After of 10 s pass in
// the milliseconds the requests take.
TEST_F(NginxFetchTest, StoreFailingForAMinuteOnAFakeClockIsUnavailable) {
  util_testing::FakeClock clock;
  FetchOptions options;  // the defaults: 100 ms doubling to 5 s, a 60 s deadline
  options.clock = &clock;
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher(options);
  ASSERT_TRUE(proxy_->FailWith("", 503, -1, -1).ok());
  const absl::Time start = clock.Now();
  absl::StatusOr<std::string> got = fetcher->Get(Range(ProxiedUrl(), 0, 100));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_TRUE(IsHostIoError(got.status()));
  EXPECT_THAT(got.status().message(), HasSubstr("(deadline 1m)"));
  EXPECT_THAT(got.status().message(), HasSubstr("503"));
  const std::vector<absl::Duration> waits = clock.waits();
  ASSERT_FALSE(waits.empty());
  EXPECT_GE(waits.front(), absl::Milliseconds(100));
  for (absl::Duration wait : waits) EXPECT_LE(wait, absl::Milliseconds(7500));  // 5 s + jitter
  EXPECT_GT(clock.Now() - start, absl::Seconds(50));
  EXPECT_LT(clock.Now() - start, absl::Seconds(60));
  EXPECT_EQ(fetcher->counters().retries.load(), static_cast<int64_t>(waits.size()));
  EXPECT_EQ(fetcher->counters().failures.load(), 1);
}

TEST_F(NginxFetchTest, RetryAfterIsWaitedForOnAFakeClock) {
  util_testing::FakeClock clock;
  FetchOptions options = QuickRetryOptions();
  options.clock = &clock;
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher(options);
  ASSERT_TRUE(proxy_->FailWith("data.tar", 503, 10, 1).ok());
  absl::StatusOr<std::string> got = fetcher->Get(Range(ProxiedUrl(), 10, 1000));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == bytes_->substr(10, 1000));
  EXPECT_THAT(clock.waits(), ::testing::ElementsAre(absl::Seconds(10)));  // not 10 ms
}

TEST_F(NginxFetchTest, ConnectionRefusedIsRetriedUntilTheDeadline) {
  FetchOptions options = QuickRetryOptions();
  options.request_deadline = absl::Seconds(1);
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher(options);
  // A port nobody listens on: bound, never listened to.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  absl::StatusOr<std::string> got =
      fetcher->Get(Range(absl::StrCat("http://127.0.0.1:", ntohs(addr.sin_port), "/x.tar"), 0, 1));
  ::close(fd);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_TRUE(IsHostIoError(got.status()));
  EXPECT_GE(fetcher->counters().retries.load(), 1);
}

TEST_F(NginxFetchTest, PoolBoundsConnectionsInUse) {
  FetchOptions options = QuickRetryOptions();
  options.max_connections = 2;
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher(options);
  ASSERT_TRUE(proxy_->Delay(200).ok());  // so that the requests overlap
  std::atomic<bool> stop{false};
  std::atomic<int64_t> most{0};
  std::thread sampler([&] {
    while (!stop) {
      most = std::max(most.load(), fetcher->counters().connections_in_use.load());
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::vector<std::thread> readers;
  std::atomic<int> ok{0};
  const absl::Time start = absl::Now();
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&, i] {
      absl::StatusOr<std::string> got = fetcher->Get(Range(ProxiedUrl(), i * 1000, 1000));
      if (got.ok() && *got == bytes_->substr(i * 1000, 1000)) ++ok;
    });
  }
  for (std::thread& reader : readers) reader.join();
  const absl::Duration took = absl::Now() - start;
  stop = true;
  sampler.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(most.load(), 2);
  EXPECT_EQ(fetcher->counters().connections_in_use.load(), 0);
  EXPECT_GE(took, absl::Milliseconds(4 * 200 - 50));  // 8 requests, 2 at a time
}

TEST_F(NginxFetchTest, WaitingForAConnectionCountsTowardTheDeadline) {
  FetchOptions options = QuickRetryOptions();
  options.max_connections = 1;
  options.request_deadline = absl::Milliseconds(700);
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher(options);
  ASSERT_TRUE(proxy_->Delay(500).ok());
  std::vector<absl::Status> results(3);
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) {
    readers.emplace_back(
        [&, i] { results[i] = fetcher->Get(Range(ProxiedUrl(), 0, 10)).status(); });
  }
  for (std::thread& reader : readers) reader.join();
  // The first gets the connection; the last cannot have had it within 700 ms.
  const int failed = static_cast<int>(
      std::count_if(results.begin(), results.end(), [](const absl::Status& s) { return !s.ok(); }));
  EXPECT_GE(failed, 1);
  for (const absl::Status& s : results) {
    if (!s.ok()) {
      EXPECT_TRUE(IsHostIoError(s)) << s;
    }
  }
}

TEST(HttpFetcherTest, CreateRejectsBadOptions) {
  FetchOptions options;
  options.max_connections = 0;
  EXPECT_EQ(HttpFetcher::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = FetchOptions();
  options.request_deadline = absl::ZeroDuration();
  EXPECT_EQ(HttpFetcher::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = FetchOptions();
  options.max_backoff = absl::Milliseconds(1);
  EXPECT_EQ(HttpFetcher::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

// One request received by a bare socket (what curl really sends), answered 200 with
// `body` whatever it asked for, as a server that ignores Range does.
class OneShotListener {
 public:
  explicit OneShotListener(std::string body = "ok") : body_(std::move(body)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    ::listen(fd_, 1);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~OneShotListener() {
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  std::string url(const std::string& path) const {
    return absl::StrCat("http://127.0.0.1:", port_, path);
  }
  // What was received; waits for the answer to have been sent.
  const std::string& request() {
    if (thread_.joinable()) thread_.join();
    return request_;
  }

 private:
  void Serve() {
    const int conn = ::accept(fd_, nullptr, nullptr);
    if (conn < 0) return;
    char buffer[4096];
    while (request_.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::read(conn, buffer, sizeof(buffer));
      if (n <= 0) break;
      request_.append(buffer, static_cast<size_t>(n));
    }
    const std::string answer = absl::StrCat("HTTP/1.1 200 OK\r\nContent-Length: ", body_.size(),
                                            "\r\nConnection: close\r\n\r\n", body_);
    (void)!::write(conn, answer.data(), answer.size());
    ::close(conn);
  }

  const std::string body_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::string request_;
};

TEST(HttpFetcherTest, SignedRequestCarriesAndSignsTheAmzHeaders) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  OneShotListener listener;
  RangeRequest request = ToEnd(listener.url("/bucket/key.tar"));
  request.sign = SigV4{"AKIDEXAMPLE", "secret", "the-session-token", "eu-west-3"};
  absl::StatusOr<std::string> got = fetcher->Get(request);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "ok");
  const std::string& sent = listener.request();
  EXPECT_THAT(sent, HasSubstr("x-amz-content-sha256: UNSIGNED-PAYLOAD\r\n"));
  EXPECT_THAT(sent, HasSubstr("x-amz-security-token: the-session-token\r\n"));
  EXPECT_THAT(sent, HasSubstr("Credential=AKIDEXAMPLE/"));
  EXPECT_THAT(sent, HasSubstr("/eu-west-3/s3/aws4_request"));
  EXPECT_THAT(sent,
              HasSubstr("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token"));
}

TEST(HttpFetcherTest, WholeBodyAnswerToARangeIsSkippedToTheRange) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  OneShotListener listener("0123456789");
  RangeRequest request = Range(listener.url("/ten.tar"), 3, 4);
  request.size = 10;
  absl::StatusOr<std::string> got = fetcher->Get(request);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "3456");
  EXPECT_THAT(listener.request(), HasSubstr("Range: bytes=3-6\r\n"));
}

// s3rver with one object, alone and behind a proxy that checks SigV4 signatures.
class S3FetchTest : public ::testing::Test {
 protected:
  static constexpr char kBucket[] = "bucket";
  static constexpr char kKey[] = "d/data.tar";
  // s3rver knows no other key id; the proxy checks the signature made with the secret.
  static constexpr const char* kKeyId = S3rverServer::kAccessKeyId;
  static constexpr const char* kSecret = testing_util::kS3rverTestSecret;

  static void SetUpTestSuite() {
    bytes_ = new std::string(RandomBytes(kObjectBytes, 5));
    absl::StatusOr<std::unique_ptr<S3rverServer>> s3 = S3rverServer::Start();
    ASSERT_TRUE(s3.ok()) << s3.status();
    s3_ = s3->release();
    ASSERT_TRUE(s3_->CreateBucket(kBucket).ok());
    ASSERT_TRUE(s3_->Put(kBucket, kKey, *bytes_).ok());
    absl::StatusOr<std::unique_ptr<FaultProxy>> proxy = FaultProxy::Start(s3_->endpoint());
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = proxy->release();
  }
  static void TearDownTestSuite() {
    delete proxy_;
    delete s3_;
    delete bytes_;
  }
  void SetUp() override {
    ASSERT_NE(proxy_, nullptr);
    ASSERT_TRUE(proxy_->ClearFaults().ok());
  }

  static std::string* bytes_;
  static S3rverServer* s3_;
  static FaultProxy* proxy_;
};
std::string* S3FetchTest::bytes_ = nullptr;
S3rverServer* S3FetchTest::s3_ = nullptr;
FaultProxy* S3FetchTest::proxy_ = nullptr;

TEST_F(S3FetchTest, RangeReadsEqualTheObject) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  const S3Settings settings = S3rverSettings(s3_->endpoint());
  absl::StatusOr<ObjectHead> head =
      fetcher->Head(settings.ObjectUrl(kBucket, kKey), SigV4For(settings));
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->size, kObjectBytes);
  RangeRequest request = Range(settings.ObjectUrl(kBucket, kKey), 4321, 65536);
  request.sign = SigV4For(settings);
  request.etag = head->etag;
  request.size = head->size;
  absl::StatusOr<std::string> got = fetcher->Get(request);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == bytes_->substr(4321, 65536));
  request.offset = 0;
  request.length = 0;
  request.to_end = true;
  got = fetcher->Get(request);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == *bytes_);
}

TEST_F(S3FetchTest, MissingKeyIsNotFoundWithS3sCode) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  const S3Settings settings = S3rverSettings(s3_->endpoint());
  const std::string url = settings.ObjectUrl(kBucket, "d/absent.tar");
  absl::StatusOr<std::string> got = fetcher->Get(Range(url, 0, 10));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(url));
  EXPECT_THAT(got.status().message(), HasSubstr("NoSuchKey"));
}

TEST_F(S3FetchTest, PutOfNewBytesIsShardChanged) {
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  const S3Settings settings = S3rverSettings(s3_->endpoint());
  const std::string key = "d/changing.tar";
  ASSERT_TRUE(s3_->Put(kBucket, key, RandomBytes(8192, 6)).ok());
  const std::string url = settings.ObjectUrl(kBucket, key);
  absl::StatusOr<ObjectHead> head = fetcher->Head(url, SigV4For(settings));
  ASSERT_TRUE(head.ok()) << head.status();
  ASSERT_TRUE(s3_->Put(kBucket, key, RandomBytes(8192, 7)).ok());
  RangeRequest request = Range(url, 0, 100);
  request.sign = SigV4For(settings);
  request.etag = head->etag;
  request.size = head->size;
  absl::StatusOr<std::string> got = fetcher->Get(request);
  EXPECT_TRUE(IsShardChanged(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(url));
  EXPECT_THAT(got.status().message(), HasSubstr(head->etag));
}

TEST_F(S3FetchTest, SigV4WithTheRightKeyPassesTheVerifier) {
  ASSERT_TRUE(proxy_->VerifySigV4(kKeyId, kSecret).ok());
  const int64_t bad_before = *proxy_->Count("bad_signature");
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  S3Settings settings = S3rverSettings(proxy_->url());
  RangeRequest request = Range(settings.ObjectUrl(kBucket, kKey), 100, 1000);
  request.sign = SigV4For(settings);
  absl::StatusOr<std::string> got = fetcher->Get(request);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == bytes_->substr(100, 1000));
  absl::StatusOr<ObjectHead> head = fetcher->Head(request.url, request.sign);
  ASSERT_TRUE(head.ok()) << head.status();

  // A session token is one more signed header.
  settings.session_token = "FwoGZXIvYXdzE+/token=";
  request.sign = SigV4For(settings);
  got = fetcher->Get(request);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*proxy_->Count("bad_signature") - bad_before, 0);
}

TEST_F(S3FetchTest, WrongSecretIsPermissionDeniedWithS3sMessage) {
  ASSERT_TRUE(proxy_->VerifySigV4(kKeyId, kSecret).ok());
  std::unique_ptr<HttpFetcher> fetcher = MakeQuickFetcher();
  const S3Settings settings = S3rverSettings(proxy_->url(), "not-the-secret");
  RangeRequest request = Range(settings.ObjectUrl(kBucket, kKey), 0, 10);
  request.sign = SigV4For(settings);
  absl::StatusOr<std::string> got = fetcher->Get(request);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("SignatureDoesNotMatch"));
  EXPECT_THAT(got.status().message(), HasSubstr(request.url));
  EXPECT_EQ(fetcher->counters().retries.load(), 0);
}

TEST(SigV4ForTest, NoKeyMeansUnsigned) {
  S3Settings settings;
  EXPECT_FALSE(SigV4For(settings).has_value());
  settings.access_key_id = "AKID";
  settings.secret_access_key = "secret";
  settings.session_token = "token";
  settings.region = "ap-south-1";
  const std::optional<SigV4> sign = SigV4For(settings);
  ASSERT_TRUE(sign.has_value());
  EXPECT_EQ(sign->access_key_id, "AKID");
  EXPECT_EQ(sign->secret_access_key, "secret");
  EXPECT_EQ(sign->session_token, "token");
  EXPECT_EQ(sign->region, "ap-south-1");
}

}  // namespace
}  // namespace shardcast::remote

// Stopping the remote reader while its read-ahead waits on a store that does not
// answer: the fetch in flight is cancelled (RangeRequest::cancel), so the reader's
// destructor returns instead of waiting out --remote-timeout. The stores here are
// loopback servers that read each request and then never answer (a hung store), or
// answer 503 (a store that is down: the fetcher backs off); their deadlines and
// backoffs are an hour, so a test that does not cancel hangs (ctest's timeout).
// Nothing is timed: each test waits for the request to reach the store, then stops.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/remote/dataset_url.h"
#include "common/remote/http_fetcher.h"
#include "common/remote/http_store.h"
#include "common/remote/object_store.h"
#include "common/remote/remote_reader.h"
#include "common/shards/dataset_index.h"
#include "common/shards/shard_reader.h"
#include "tests/support/fake_clock.h"
#include "tests/support/object_servers.h"
#include "tests/support/temp_dir.h"

namespace shardcast::remote {
namespace {

// An HTTP server on a loopback port that reads every request's headers and then
// never answers (kHang) or answers 503 without Retry-After, keeping the connection
// (kUnavailable).
class UnhelpfulStore {
 public:
  enum class Mode { kHang, kUnavailable };

  explicit UnhelpfulStore(Mode mode) : mode_(mode) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listener_, 16) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on loopback";
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }

  ~UnhelpfulStore() {
    ::shutdown(listener_, SHUT_RDWR);  // ends the blocking accept
    if (thread_.joinable()) thread_.join();
    ::close(listener_);
    for (int fd : connections_) ::close(fd);
  }

  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }

  // Blocks until `n` requests have arrived whole (their headers read).
  void AwaitRequests(int n) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    const auto arrived = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return requests_ >= n; };
    mu_.Await(absl::Condition(&arrived));
  }
  int requests() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

 private:
  void Serve() {
    while (true) {
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;  // shut down
      connections_.push_back(fd);
      // One request per connection: the client opens a new one after a cancel, and a
      // retry on this one comes only after an hour's backoff.
      std::string head;
      char buffer[4096];
      while (!absl::StrContains(head, "\r\n\r\n")) {
        const ssize_t n = ::read(fd, buffer, sizeof(buffer));
        if (n <= 0) break;
        head.append(buffer, static_cast<size_t>(n));
      }
      if (!absl::StrContains(head, "\r\n\r\n")) continue;
      if (mode_ == Mode::kUnavailable) {
        const std::string answer = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
        (void)!::write(fd, answer.data(), answer.size());
      }
      absl::MutexLock lock(&mu_);
      ++requests_;
    }
  }

  const Mode mode_;
  int listener_ = -1;
  int port_ = 0;
  std::vector<int> connections_;  // the server thread's until it is joined
  std::thread thread_;
  mutable absl::Mutex mu_;
  int requests_ ABSL_GUARDED_BY(mu_) = 0;
};

// A fetcher that would wait an hour for an answer and an hour between attempts.
FetchOptions PatientOptions() {
  FetchOptions options;
  options.request_deadline = absl::Hours(2);
  options.low_speed_time = absl::Hours(1);
  options.first_backoff = absl::Hours(1);
  options.max_backoff = absl::Hours(1);
  return options;
}

TEST(FetcherCancelTest, ACancelEndsATransferThatGetsNoAnswer) {
  UnhelpfulStore store(UnhelpfulStore::Mode::kHang);
  absl::StatusOr<std::unique_ptr<HttpFetcher>> fetcher = HttpFetcher::Create(PatientOptions());
  ASSERT_TRUE(fetcher.ok()) << fetcher.status();
  util::CancelToken cancel;
  RangeRequest request;
  request.url = store.url() + "/s.tar";
  request.length = 100;
  request.cancel = &cancel;
  absl::StatusOr<std::string> got;
  std::thread get([&] { got = (*fetcher)->Get(request); });
  store.AwaitRequests(1);
  cancel.Cancel();
  get.join();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled) << got.status();
  // No fault of the store: neither marked nor counted as one.
  EXPECT_FALSE(IsHostIoError(got.status())) << got.status();
  EXPECT_EQ((*fetcher)->counters().failures.load(), 0);
  EXPECT_EQ(store.requests(), 1);
}

TEST(FetcherCancelTest, ACancelEndsTheBackoffBetweenAttempts) {
  UnhelpfulStore store(UnhelpfulStore::Mode::kUnavailable);
  util_testing::FakeClock clock;
  FetchOptions options = PatientOptions();
  options.clock = &clock;
  absl::StatusOr<std::unique_ptr<HttpFetcher>> fetcher = HttpFetcher::Create(options);
  ASSERT_TRUE(fetcher.ok()) << fetcher.status();
  util::CancelToken cancel;
  clock.set_on_wait([&cancel](absl::Duration) { cancel.Cancel(); });  // a stop mid-wait
  RangeRequest request;
  request.url = store.url() + "/s.tar";
  request.length = 100;
  request.cancel = &cancel;
  absl::StatusOr<std::string> got = (*fetcher)->Get(request);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled) << got.status();
  EXPECT_FALSE(IsHostIoError(got.status())) << got.status();
  ASSERT_EQ(clock.waits().size(), 1u);          // the one backoff, cut short: no second attempt
  EXPECT_GE(clock.waits()[0], absl::Hours(1));  // (and its jitter)
  EXPECT_EQ(store.requests(), 1);
}

TEST(FetcherCancelTest, ACancelEndsTheWaitForAConnection) {
  UnhelpfulStore store(UnhelpfulStore::Mode::kHang);
  FetchOptions options = PatientOptions();
  options.max_connections = 1;
  absl::StatusOr<std::unique_ptr<HttpFetcher>> fetcher = HttpFetcher::Create(options);
  ASSERT_TRUE(fetcher.ok()) << fetcher.status();
  RangeRequest request;
  request.url = store.url() + "/s.tar";
  request.length = 100;
  util::CancelToken first_cancel, second_cancel;
  RangeRequest first = request, second = request;
  first.cancel = &first_cancel;
  second.cancel = &second_cancel;
  absl::StatusOr<std::string> first_got, second_got;
  std::thread holder([&] { first_got = (*fetcher)->Get(first); });
  store.AwaitRequests(1);  // the one connection is taken, and gets no answer
  std::thread waiter([&] { second_got = (*fetcher)->Get(second); });
  second_cancel.Cancel();
  waiter.join();
  EXPECT_EQ(second_got.status().code(), absl::StatusCode::kCancelled) << second_got.status();
  first_cancel.Cancel();
  holder.join();
  EXPECT_EQ(first_got.status().code(), absl::StatusCode::kCancelled) << first_got.status();
  EXPECT_EQ(store.requests(), 1);  // the second never reached the store
}

// A dataset of one shard at `store` (as indexed: the listing is not asked for).
DatasetIndex OneShardAt(const std::string& root, bool compressed) {
  DatasetIndex index;
  index.root = root + "/";
  ShardInfo shard;
  shard.path = compressed ? "s.tar.gz" : "s.tar";
  shard.file_size = 1 << 20;
  shard.compressed = compressed;
  SampleEntry sample;
  sample.key = "a";
  sample.members = {MemberRef{"jpg", 512, 4096}};
  shard.samples = {sample};
  index.shards = {shard};
  index.num_samples = 1;
  index.num_classes = 1;
  return index;
}

struct StopCase {
  const char* name;
  UnhelpfulStore::Mode mode;
  bool compressed;  // a .tar.gz read ahead is the whole object, streamed to disk
};

class RemoteReaderStopTest : public ::testing::TestWithParam<StopCase> {};

TEST_P(RemoteReaderStopTest, StoppingTheReaderCancelsItsReadAhead) {
  const StopCase& c = GetParam();
  UnhelpfulStore store(c.mode);
  absl::StatusOr<DatasetUrl> url =
      ParseDatasetUrl(store.url() + (c.compressed ? "/s.tar.gz" : "/s.tar"));
  ASSERT_TRUE(url.ok()) << url.status();
  absl::StatusOr<std::unique_ptr<HttpFetcher>> fetcher = HttpFetcher::Create(PatientOptions());
  ASSERT_TRUE(fetcher.ok()) << fetcher.status();
  absl::StatusOr<std::unique_ptr<ObjectStore>> objects = OpenHttpStore(*url, fetcher->get());
  ASSERT_TRUE(objects.ok()) << objects.status();
  const DatasetIndex index = OneShardAt(store.url(), c.compressed);
  RemoteReadOptions options;
  options.read_ahead_threads = 2;
  auto reader =
      std::make_unique<RemoteReader>(index, *std::move(objects), /*cache=*/nullptr, options);
  const MemberLocation member{0, index.shards[0].samples[0].members[0]};
  reader->Prefetch({member});
  store.AwaitRequests(1);  // the read-ahead is on the wire (and then, for 503, backs off)

  const absl::Time stop_begun = absl::Now();
  reader.reset();  // returns only once the read-ahead thread has let go
  std::cout << c.name << ": the reader stopped in " << absl::Now() - stop_begun << "\n";
  EXPECT_EQ(store.requests(), 1);  // cancelled, not retried
  EXPECT_EQ((*fetcher)->counters().failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Stores, RemoteReaderStopTest,
    ::testing::Values(StopCase{"HungStore", UnhelpfulStore::Mode::kHang, false},
                      StopCase{"StoreDown", UnhelpfulStore::Mode::kUnavailable, false},
                      StopCase{"HungStoreWholeObject", UnhelpfulStore::Mode::kHang, true}),
    [](const ::testing::TestParamInfo<StopCase>& info) { return std::string(info.param.name); });

// Read-ahead nobody reads gives its memory up after kUnreadReadAheadAge (10 s) on the
// reader's clock: a fake one here, moved past the age instead of waited out.
TEST(RemoteReaderClockTest, UnreadReadAheadIsReleasedByTheInjectedClock) {
  testing_util::TempDir dir;
  const std::string bytes(1 << 20, 'x');
  {
    std::ofstream out(dir.path() + "/s.tar", std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  absl::StatusOr<std::unique_ptr<testing_util::NginxServer>> nginx =
      testing_util::NginxServer::Start(dir.path());
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  absl::StatusOr<DatasetUrl> url = ParseDatasetUrl((*nginx)->url() + "/s.tar");
  ASSERT_TRUE(url.ok()) << url.status();
  absl::StatusOr<std::unique_ptr<HttpFetcher>> fetcher = HttpFetcher::Create(FetchOptions());
  ASSERT_TRUE(fetcher.ok()) << fetcher.status();
  absl::StatusOr<std::unique_ptr<ObjectStore>> objects = OpenHttpStore(*url, fetcher->get());
  ASSERT_TRUE(objects.ok()) << objects.status();
  const DatasetIndex index = OneShardAt((*nginx)->url(), /*compressed=*/false);
  util_testing::FakeClock clock;
  RemoteReadOptions options;
  options.read_ahead_threads = 1;  // fetches in the order queued
  options.clock = &clock;
  RemoteReader reader(index, *std::move(objects), /*cache=*/nullptr, options);
  const MemberRef unread{"jpg", 512, 4096};
  const MemberRef read{"cls", 512 << 10, 100};
  reader.Prefetch({MemberLocation{0, unread}});
  reader.Prefetch({MemberLocation{0, read}});
  ASSERT_TRUE(reader.ReadMember(0, read).ok());  // so `unread` was fetched before it
  EXPECT_EQ(reader.counters().read_ahead_bytes.load(), 4096);

  clock.Advance(absl::Seconds(9));
  reader.Prefetch({});  // each Prefetch first releases what is too old
  EXPECT_EQ(reader.counters().read_ahead_bytes.load(), 4096);
  clock.Advance(absl::Seconds(2));
  reader.Prefetch({});
  EXPECT_EQ(reader.counters().read_ahead_bytes.load(), 0);
  // Read after all: fetched again, not from the released read-ahead.
  absl::StatusOr<std::string> late = reader.ReadMember(0, unread);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(*late, bytes.substr(512, 4096));
  EXPECT_EQ(reader.counters().read_ahead_hits.load(), 1);
  EXPECT_EQ(reader.counters().direct_reads.load(), 1);
}

}  // namespace
}  // namespace shardcast::remote

// Several replicas of the server (issue 26): a rank knows a list of them, starts at the
// one its order puts first, and when that one dies or drains it registers with the
// next and resumes at the first batch it has not received, receiving the same bytes an
// undisturbed run receives. Replicas with other data, or run with other byte-changing
// settings (issue 35), are refused, naming both. Real in-process servers over loopback
// (and real server processes for the settings), on the same shard directory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/reconnect/server_list.h"
#include "client/stream/rank_stream.h"
#include "tests/server/server_test_support.h"
#include "tests/support/free_port.h"

namespace shardcast::server_testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------- the list

TEST(ServerListTest, EntriesAreKeptInOrderWithoutDuplicates) {
  absl::StatusOr<std::vector<std::string>> list =
      client::ExpandServerList(" 10.0.0.1:7000,unix:/run/s.sock ,[fd00::2]:7000,10.0.0.1:7000");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_THAT(*list, ElementsAre("10.0.0.1:7000", "unix:/run/s.sock", "[fd00::2]:7000"));
  EXPECT_EQ(client::ExpandServerList("a:1,,b:2").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client::ExpandServerList("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServerListTest, AddressesThatCannotBeAServerAreRefusedSayingWhatToWrite) {
  for (const char* good : {"h:1", "10.0.0.1:65535", "[::1]:50051", "unix:/run/s.sock",
                           "unix:///run/s.sock", "unix-abstract:name", "dns:///h:7000",
                           "dns://10.0.0.53/h:7000", "dns:h:7000", "ipv4:10.0.0.1:7000"}) {
    EXPECT_TRUE(client::CheckServerTarget(good).ok()) << good;
  }
  struct Bad {
    const char* address;
    const char* says;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"http://127.0.0.1:5055", "no http:// scheme; write HOST:PORT, e.g. '127.0.0.1:5055'"},
           {"grpc://h:1/", "no grpc:// scheme; write HOST:PORT, e.g. 'h:1'"},
           {"localhost", "no port; write HOST:PORT, e.g. 'localhost:50051'"},
           {"h:", "port '' is not a number from 1 to 65535"},
           {"h:0", "port '0' is not a number"},
           {"h:65536", "port '65536' is not a number"},
           {"h:http", "port 'http' is not a number"},
           {"::1:50051", "an IPv6 address needs brackets"},
           {"[::1]", "no port"},
           {":50051", "no host"},
           {"unix:", "no socket path"},
           {"dns:///", "no host"},
           {"a b:1", "a control character or a space"}}) {
    const absl::Status status = client::CheckServerTarget(bad.address);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad.address;
    EXPECT_THAT(status.message(), HasSubstr(bad.says)) << bad.address;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("'", bad.address, "'")));
    // The list refuses what one entry cannot be, before anything connects.
    EXPECT_EQ(client::ExpandServerList(absl::StrCat("h:1,", bad.address)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  // A NUL would cut gRPC's C-string target short; control characters are shown escaped.
  EXPECT_THAT(client::CheckServerTarget("h\n:1").message(),
              HasSubstr("'h\\n:1': a control character"));
  const absl::Status nul = client::CheckServerTarget(std::string("evil\0.example:1", 15));
  EXPECT_EQ(nul.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(nul.message(), HasSubstr("'evil\\x00.example:1': a control character"));
  // A huge one is refused at once too, without resolving anything.
  EXPECT_THAT(client::CheckServerTarget(std::string(1 << 20, 'h')).message(), HasSubstr("no port"));
}

TEST(ServerListTest, LocalReplicasComeFirstAndEachGroupIsSpreadByRank) {
  // 192.0.2.0/24 and 198.51.100.0/24 are documentation networks: never this host's.
  const std::vector<std::string> targets = {"192.0.2.1:1", "127.0.0.1:2", "198.51.100.3:3",
                                            "unix:/run/s.sock"};
  EXPECT_TRUE(client::IsLocalTarget("127.0.0.1:2"));
  EXPECT_TRUE(client::IsLocalTarget("[::1]:2"));
  EXPECT_TRUE(client::IsLocalTarget("localhost:2"));
  EXPECT_TRUE(client::IsLocalTarget("unix:/run/s.sock"));
  EXPECT_FALSE(client::IsLocalTarget("192.0.2.1:1"));
  EXPECT_THAT(client::OrderForRank(targets, 0),
              ElementsAre("127.0.0.1:2", "unix:/run/s.sock", "192.0.2.1:1", "198.51.100.3:3"));
  EXPECT_THAT(client::OrderForRank(targets, 1),
              ElementsAre("unix:/run/s.sock", "127.0.0.1:2", "198.51.100.3:3", "192.0.2.1:1"));
  EXPECT_THAT(client::OrderForRank(targets, 2),
              ElementsAre("127.0.0.1:2", "unix:/run/s.sock", "192.0.2.1:1", "198.51.100.3:3"));
}

// ---------------------------------------------------------------------------- failover

constexpr int kWorld = 2;
constexpr int kBatch = 4;
constexpr int kCrop = 64;
// Batches of 49 KB, 80 per rank, and a stream window of two batches: a replica that
// goes away mid-epoch still owed most of them. (gRPC's own window grows to megabytes
// on loopback and could take the whole epoch before the replica dies: CI saw it.)
constexpr int64_t kSamples = 640;
constexpr size_t kN = kSamples / (kWorld * kBatch);

client::RankStreamOptions Options(const std::string& servers, const std::string& job, int rank) {
  client::RankStreamOptions options;
  options.server = servers;
  options.job = MakeRegister(job, rank, kWorld, kBatch, v1::SPLIT_SAMPLE, kCrop, kCrop);
  options.prefetch = 1;
  options.stream_window_bytes = 2 * kBatch * 3 * kCrop * kCrop;
  options.reconnect_initial_seconds = 0.05;
  options.reconnect_deadline_seconds = 30;
  return options;
}

// What a batch carries, for comparing runs byte for byte (Batch.server_draining aside:
// it says which server sent it, not what).
std::string Content(const client::WireBatch& batch) {
  std::vector<std::string> keys;
  for (const v1::SampleInfo& sample : batch.header().samples()) keys.push_back(sample.key());
  return absl::StrCat(batch.epoch(), "/", batch.index(), " ", absl::StrJoin(keys, ","), " ",
                      absl::StrJoin(batch.header().labels(), ","), " ", batch.ImagesToString());
}

// Batches [from, n) of epoch 0 from `stream`; `after_each(i)` after batch i.
absl::StatusOr<std::vector<std::string>> Read(
    client::RankStream& stream, int64_t count,
    const std::function<void(int64_t)>& after_each = nullptr) {
  std::vector<std::string> contents;
  for (int64_t i = 0; i < count; ++i) {
    absl::StatusOr<std::optional<client::ReceivedBatch>> next = stream.Next();
    if (!next.ok()) return next.status();
    if (!next->has_value()) break;
    contents.push_back(Content(***next));
    if (after_each) after_each(static_cast<int64_t>(contents.size()) - 1);
  }
  return contents;
}

class ReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeDataset(dir_.path(), kSamples, /*per_shard=*/160); }
  // The batches of epoch 0 of `rank`, from one server that nothing disturbs.
  std::vector<std::string> Undisturbed(int rank) {
    InProcessServer alone(dir_.path());
    auto stream = client::RankStream::Connect(Options(alone.target(), "undisturbed", rank));
    EXPECT_TRUE(stream.ok()) << stream.status();
    EXPECT_TRUE((*stream)->StartEpoch(0).ok());
    absl::StatusOr<std::vector<std::string>> all = Read(**stream, 1000);
    EXPECT_TRUE(all.ok()) << all.status();
    EXPECT_EQ(all->size(), kN);
    return *all;
  }
  TempDir dir_;
};

TEST_F(ReplicaTest, AKilledReplicasRanksResumeOnTheOtherWithTheSameBytes) {
  const std::vector<std::string> want[kWorld] = {Undisturbed(0), Undisturbed(1)};
  auto a = std::make_unique<InProcessServer>(dir_.path());
  InProcessServer b(dir_.path());
  // Both replicas are on this host: rank 0 starts at the first, rank 1 at the second.
  const std::string servers = absl::StrCat(a->target(), ",", b.target());
  std::unique_ptr<client::RankStream> ranks[kWorld];
  std::vector<std::string> got[kWorld];
  for (int rank = 0; rank < kWorld; ++rank) {
    auto stream = client::RankStream::Connect(Options(servers, "failover", rank));
    ASSERT_TRUE(stream.ok()) << stream.status();
    ranks[rank] = *std::move(stream);
    ASSERT_TRUE(ranks[rank]->StartEpoch(0).ok());
    absl::StatusOr<std::vector<std::string>> first = Read(*ranks[rank], 2);
    ASSERT_TRUE(first.ok()) << first.status();
    got[rank] = *first;
  }
  EXPECT_EQ(GetStatus(b.stub()).jobs(0).ranks_size(), 1);  // rank 1 only, so far

  a.reset();  // replica A dies in the middle of the epoch
  for (int rank = 0; rank < kWorld; ++rank) {
    absl::StatusOr<std::vector<std::string>> rest = Read(*ranks[rank], 1000);
    ASSERT_TRUE(rest.ok()) << "rank " << rank << ": " << rest.status();
    got[rank].insert(got[rank].end(), rest->begin(), rest->end());
    EXPECT_EQ(got[rank], want[rank]) << "rank " << rank;
  }
  EXPECT_GE(ranks[0]->reconnects(), 1);  // moved to B
  EXPECT_EQ(ranks[1]->reconnects(), 0);  // was on B all along
  const v1::GetStatusResponse on_b = GetStatus(b.stub());
  ASSERT_EQ(on_b.jobs_size(), 1);
  EXPECT_EQ(on_b.jobs(0).ranks_size(), 2);
}

TEST_F(ReplicaTest, ADrainingReplicaSendsItsRanksAwayBeforeTheGracePeriod) {
  const std::vector<std::string> want = Undisturbed(0);
  server::ServerOptions patient;
  patient.grace_period = absl::Seconds(120);  // streams could run to their end on A
  InProcessServer a(dir_.path(), patient);
  InProcessServer b(dir_.path());
  auto stream = client::RankStream::Connect(
      Options(absl::StrCat(a.target(), ",", b.target()), "drain", /*rank=*/0));
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->StartEpoch(0).ok());
  absl::StatusOr<std::vector<std::string>> got = Read(**stream, 3);
  ASSERT_TRUE(got.ok()) << got.status();

  std::thread drain([&] { a.server().Drain(); });
  // A slow consumer: had it stayed on A, A's drain would wait for its whole epoch.
  absl::StatusOr<std::vector<std::string>> rest = Read(
      **stream, 1000, [](int64_t) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
  drain.join();
  ASSERT_TRUE(rest.ok()) << rest.status();
  got->insert(got->end(), rest->begin(), rest->end());
  EXPECT_EQ(*got, want);
  EXPECT_EQ((*stream)->reconnects(), 1);
  // B served the rest of the epoch, from where A's last batch left off: A alone would
  // have served it all, its drain waiting for the stream.
  const v1::GetStatusResponse on_b = GetStatus(b.stub());
  ASSERT_EQ(on_b.jobs_size(), 1);
  EXPECT_GT(on_b.jobs(0).ranks(0).batches_sent(), 0);
}

TEST_F(ReplicaTest, RegistrationSkipsADeadReplica) {
  InProcessServer b(dir_.path());
  const int dead_port = testing_util::FreePort();
  auto stream = client::RankStream::Connect(
      Options(absl::StrCat("127.0.0.1:", dead_port, ",", b.target()), "skip", /*rank=*/0));
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->StartEpoch(0).ok());
  absl::StatusOr<std::vector<std::string>> all = Read(**stream, 1000);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), kN);
}

TEST_F(ReplicaTest, AReplicaWithOtherDataIsRefusedNamingBoth) {
  TempDir other;
  MakeDataset(other.path(), kSamples, /*per_shard=*/160, /*size=*/80);  // other pixels
  auto a = std::make_unique<InProcessServer>(dir_.path());
  InProcessServer b(other.path());
  const std::string a_target = a->target();
  auto stream = client::RankStream::Connect(
      Options(absl::StrCat(a_target, ",", b.target()), "mixed", /*rank=*/0));
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->StartEpoch(0).ok());
  ASSERT_TRUE(Read(**stream, 2).ok());
  a.reset();
  absl::StatusOr<std::vector<std::string>> rest = Read(**stream, 1000);
  ASSERT_FALSE(rest.ok());
  EXPECT_TRUE(client::IsJobChanged(rest.status())) << rest.status();
  EXPECT_THAT(rest.status().message(), HasSubstr(b.target()));
  EXPECT_THAT(rest.status().message(), HasSubstr(a_target));
  EXPECT_THAT(rest.status().message(), HasSubstr("job fingerprint"));
}

// Issue 35: the job fingerprint covers the server settings that change a batch's
// bytes. Two real shardcast-server processes over the same shards, B run with a
// --max-member-bytes below every image member (B substitutes every image): same index,
// other job fingerprints; a rank that moves from A to B is refused, naming both
// replicas and both fingerprints, instead of resuming on B's substitutes.
TEST_F(ReplicaTest, AReplicaWithAnotherMaxMemberBytesIsRefusedNamingBothAndBothFingerprints) {
  TempDir logs_a, logs_b;
  auto a = std::make_unique<testing_util::ServerProcess>(dir_.path(), logs_a.path());
  testing_util::ServerProcess b(dir_.path(), logs_b.path());
  ASSERT_TRUE(a->Start().ok());
  ASSERT_TRUE(b.Start(0, {"--max-member-bytes", "100"}).ok());
  const std::string a_target = a->address();

  // What each replica answers for the same job.
  v1::RegisterResponse on_a, on_b;
  const v1::RegisterRequest probe =
      MakeRegister("probe", 0, kWorld, kBatch, v1::SPLIT_SAMPLE, kCrop, kCrop);
  auto a_stub = v1::Shardcast::NewStub(MakeChannel(a_target));
  auto b_stub = v1::Shardcast::NewStub(MakeChannel(b.address()));
  // A server listens before its index is ready and answers UNAVAILABLE until it is.
  const auto register_once_indexed = [&probe](v1::Shardcast::Stub* stub,
                                              v1::RegisterResponse* response) {
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    grpc::Status status = Register(stub, probe, response);
    while (status.error_code() == grpc::StatusCode::UNAVAILABLE && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(50));
      status = Register(stub, probe, response);
    }
    return status;
  };
  const grpc::Status registered_a = register_once_indexed(a_stub.get(), &on_a);
  ASSERT_TRUE(registered_a.ok()) << registered_a.error_message();
  const grpc::Status registered_b = register_once_indexed(b_stub.get(), &on_b);
  ASSERT_TRUE(registered_b.ok()) << registered_b.error_message();
  EXPECT_EQ(on_a.index_fingerprint(), on_b.index_fingerprint());  // the same shards
  EXPECT_EQ(on_a.batches_per_epoch(), on_b.batches_per_epoch());
  EXPECT_NE(on_a.job_fingerprint(), on_b.job_fingerprint()) << "B serves other bytes";

  auto stream = client::RankStream::Connect(
      Options(absl::StrCat(a_target, ",", b.address()), "settings", /*rank=*/0));
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->StartEpoch(0).ok());
  ASSERT_TRUE(Read(**stream, 2).ok());
  a->Kill(SIGKILL);  // A dies in the middle of the epoch: the rank moves to B
  a.reset();
  absl::StatusOr<std::vector<std::string>> rest = Read(**stream, 1000);
  ASSERT_FALSE(rest.ok()) << "resumed on B's substitutes: " << rest->size() << " batches";
  EXPECT_TRUE(client::IsJobChanged(rest.status())) << rest.status();
  EXPECT_THAT(rest.status().message(), HasSubstr(a_target));
  EXPECT_THAT(rest.status().message(), HasSubstr(b.address()));
  EXPECT_THAT(rest.status().message(), HasSubstr(on_a.job_fingerprint()));
  EXPECT_THAT(rest.status().message(), HasSubstr(on_b.job_fingerprint()));
}

// The settings that substitute nothing in this data do not split replicas: a
// --max-member-bytes above every image member leaves the fingerprint as it is.
TEST_F(ReplicaTest, ALimitNoImageReachesLeavesTheFingerprintAlone) {
  InProcessServer plain(dir_.path());
  server::ServerOptions roomy;
  roomy.max_member_bytes = int64_t{1} << 30;
  InProcessServer big(dir_.path(), roomy);
  server::ServerOptions tight;
  tight.max_member_bytes = 100;
  InProcessServer small(dir_.path(), tight);
  server::ServerOptions bench;
  bench.bench_only_resend_first_batch = true;
  InProcessServer resend(dir_.path(), bench);
  const v1::RegisterRequest probe =
      MakeRegister("probe", 0, kWorld, kBatch, v1::SPLIT_SAMPLE, kCrop, kCrop);
  v1::RegisterResponse r_plain, r_big, r_small, r_resend;
  ASSERT_TRUE(Register(plain.stub(), probe, &r_plain).ok());
  ASSERT_TRUE(Register(big.stub(), probe, &r_big).ok());
  ASSERT_TRUE(Register(small.stub(), probe, &r_small).ok());
  ASSERT_TRUE(Register(resend.stub(), probe, &r_resend).ok());
  EXPECT_EQ(r_plain.job_fingerprint(), r_big.job_fingerprint());
  EXPECT_NE(r_plain.job_fingerprint(), r_small.job_fingerprint());
  EXPECT_NE(r_plain.job_fingerprint(), r_resend.job_fingerprint());
}

}  // namespace
}  // namespace shardcast::server_testing

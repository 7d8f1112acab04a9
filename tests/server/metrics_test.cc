// The operator's view: the Prometheus exposition (text, HTTP endpoint, tokens), and the
// DDP-hang early warning (the rule, and a real stream whose client stops reading while
// its peer goes on).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "proto/status_fields.h"
#include "server/serving/stall_watch.h"
#include "server/status/metrics_http.h"
#include "server/status/metrics_text.h"
#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

using server::DurationHistogram;
using server::MetricsSnapshot;
using server::RankActivity;
using server::StalledRanks;
using ::shardcast::StatusField;
using ::shardcast::StatusFields;

// ------------------------------------------------------------------ the stall rule

TEST(StallRuleTest, OnlyAnIdleRankBehindAPeerIsStalled) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  const absl::Duration warn = absl::Seconds(30);
  // Rank 1 idle for 31 s, 5 batches behind rank 0: stalled. Rank 2 as idle but level
  // with rank 0: rank 0 waits on rank 1 only... and rank 2 too is not ahead of anyone.
  std::vector<RankActivity> ranks = {{105, now - absl::Seconds(31)},
                                     {100, now - absl::Seconds(31)},
                                     {105, now - absl::Seconds(31)}};
  EXPECT_EQ(StalledRanks(ranks, warn, now), (std::vector<bool>{false, true, false}));
  // Behind but it took a batch 29 s ago: not yet.
  ranks[1].last_batch = now - absl::Seconds(29);
  EXPECT_EQ(StalledRanks(ranks, warn, now), (std::vector<bool>{false, false, false}));
  // Exactly at the threshold: stalled.
  ranks[1].last_batch = now - warn;
  EXPECT_EQ(StalledRanks(ranks, warn, now), (std::vector<bool>{false, true, false}));
}

TEST(StallRuleTest, AWholeJobPausedAtOnePositionIsNoStall) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  std::vector<RankActivity> ranks = {{7, now - absl::Hours(1)}, {7, now - absl::Hours(1)}};
  EXPECT_EQ(StalledRanks(ranks, absl::Seconds(1), now), (std::vector<bool>{false, false}));
  // One rank alone waits on nobody; a zero --stall-warn is off.
  EXPECT_EQ(StalledRanks({{0, now - absl::Hours(1)}}, absl::Seconds(1), now),
            (std::vector<bool>{false}));
  ranks[0].position = 9;
  EXPECT_EQ(StalledRanks(ranks, absl::ZeroDuration(), now), (std::vector<bool>{false, false}));
}

// ------------------------------------------------------------------ exposition text

// Sample lines of `text` by their name and labels ("name{labels}" -> value), checking
// the format on the way: every family has one HELP and one TYPE, before its samples,
// and a family's samples are not split by another family's.
std::map<std::string, std::string> ParseExposition(const std::string& text) {
  std::map<std::string, std::string> samples;
  std::set<std::string> families;
  std::string current;
  EXPECT_TRUE(absl::EndsWith(text, "\n"));
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "# HELP ")) continue;
    if (absl::StartsWith(line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      EXPECT_EQ(parts.size(), 4u) << line;
      current = parts[2];
      EXPECT_TRUE(families.insert(current).second) << "family twice: " << current;
      EXPECT_TRUE(absl::StartsWith(current, "shardcast_")) << current;
      continue;
    }
    const size_t space = line.rfind(' ');
    const std::string key(line.substr(0, space));
    const std::string name = key.substr(0, key.find('{'));
    EXPECT_TRUE(name == current || name == current + "_bucket" || name == current + "_sum" ||
                name == current + "_count")
        << "sample " << name << " outside its family " << current;
    EXPECT_TRUE(samples.emplace(key, std::string(line.substr(space + 1))).second)
        << "duplicate series " << key;
  }
  return samples;
}

MetricsSnapshot ExampleSnapshot() {
  MetricsSnapshot snapshot;
  v1::GetStatusResponse& s = snapshot.status;
  s.set_version("1.2.3");
  s.set_serving(true);
  s.set_images_served(1200);
  s.set_bytes_served(int64_t{5} << 40);  // above 2^32: still an exact integer
  s.set_stream_wait_for_batch_seconds(1.5);
  s.set_stalled_ranks(1);
  v1::JobStatus* job = s.add_jobs();
  job->set_job_id("a\"b\\c\nd");
  job->set_world_size(2);
  job->set_batches_per_epoch(10);
  job->set_total_ranks(2);
  job->set_image(true);
  v1::ReasonCount* left_out = job->add_left_out();
  left_out->set_reason("missing required field 'txt'");
  left_out->set_count(7);
  v1::RankStatus* r0 = job->add_ranks();
  r0->set_rank(0);
  r0->set_epoch(1);
  r0->set_next_batch(4);
  v1::RankStatus* r1 = job->add_ranks();
  r1->set_rank(1);
  r1->set_epoch(1);
  r1->set_next_batch(1);
  r1->set_lag_batches(3);
  r1->set_stalled(true);
  r1->set_seconds_since_last_batch(42.25);
  DurationHistogram histogram;
  histogram.Observe(absl::Microseconds(50));
  histogram.Observe(absl::Microseconds(50));
  histogram.Observe(absl::Milliseconds(3));
  histogram.Observe(absl::Seconds(10));
  snapshot.decode_time = histogram.Read();
  v1::DatasetStatus* dataset = s.add_datasets();
  dataset->set_name("default");
  dataset->set_state(v1::DatasetStatus::SERVING);
  dataset->set_num_shards(5);
  dataset->set_num_samples(240);
  dataset->set_skipped_samples(2);
  dataset->set_total_changed_shards(1);
  return snapshot;
}

TEST(MetricsTextTest, NamesUnitsLabelsAndValues) {
  const std::map<std::string, std::string> m =
      ParseExposition(server::RenderPrometheusText(ExampleSnapshot()));
  EXPECT_EQ(m.at("shardcast_images_served_total"), "1200");
  EXPECT_EQ(m.at("shardcast_bytes_served_total"), "5497558138880");
  EXPECT_EQ(m.at("shardcast_stream_wait_for_batch_seconds_total"), "1.5");
  EXPECT_EQ(m.at("shardcast_build_info{version=\"1.2.3\"}"), "1");
  // The id as log lines show it (C escapes: \" \\ \n), then the format's escaping.
  const std::string job = R"(job="a\\\"b\\\\c\\nd")";
  EXPECT_EQ(m.at(absl::StrCat("shardcast_rank_lag_batches{", job, ",rank=\"1\"}")), "3");
  EXPECT_EQ(m.at(absl::StrCat("shardcast_rank_position_batches{", job, ",rank=\"0\"}")), "14");
  EXPECT_EQ(m.at(absl::StrCat("shardcast_rank_stalled{", job, ",rank=\"1\"}")), "1");
  EXPECT_EQ(m.at(absl::StrCat("shardcast_rank_stalled{", job, ",rank=\"0\"}")), "0");
  EXPECT_EQ(m.at(absl::StrCat("shardcast_rank_seconds_since_last_batch{", job, ",rank=\"1\"}")),
            "42.25");
  EXPECT_EQ(m.at(absl::StrCat("shardcast_job_registered_ranks{", job, "}")), "2");
  EXPECT_EQ(m.at(absl::StrCat("shardcast_job_image{", job, "}")), "1");
  // The reason as log lines show it too (C escapes: \'), then the format's escaping.
  EXPECT_EQ(m.at(absl::StrCat("shardcast_job_left_out_samples{", job,
                              R"(,reason="missing required field \\'txt\\'"})")),
            "7");
  EXPECT_EQ(m.at("shardcast_stalled_ranks"), "1");
  EXPECT_EQ(m.at("shardcast_index_state{dataset=\"default\",state=\"serving\"}"), "1");
  EXPECT_EQ(m.at("shardcast_index_state{dataset=\"default\",state=\"indexing\"}"), "0");
  EXPECT_EQ(m.at("shardcast_index_samples{dataset=\"default\"}"), "240");
  EXPECT_EQ(m.at("shardcast_index_skipped_samples{dataset=\"default\"}"), "2");
  // Cumulative buckets: 2 at 100us, 3 from 5ms on, the 10 s one only in +Inf.
  EXPECT_EQ(m.at("shardcast_decode_duration_seconds_bucket{le=\"0.0001\"}"), "2");
  EXPECT_EQ(m.at("shardcast_decode_duration_seconds_bucket{le=\"0.0025\"}"), "2");
  EXPECT_EQ(m.at("shardcast_decode_duration_seconds_bucket{le=\"0.005\"}"), "3");
  EXPECT_EQ(m.at("shardcast_decode_duration_seconds_bucket{le=\"2.5\"}"), "3");
  EXPECT_EQ(m.at("shardcast_decode_duration_seconds_bucket{le=\"+Inf\"}"), "4");
  EXPECT_EQ(m.at("shardcast_decode_duration_seconds_count"), "4");
  EXPECT_EQ(std::stod(m.at("shardcast_decode_duration_seconds_sum")), 10.0031);
}

// Dashboards and alerts use these names: every family stays, with its type, whether its
// figure comes from the table of the reply's figures (proto/status_fields.cc) or is
// written in metrics_text.cc. None is renamed; a new one comes from a new row of the
// table (status_fields_test checks its name) or is added to this list.
TEST(MetricsTextTest, EveryFamilyKeepsItsNameAndType) {
  const std::map<std::string, std::string> expected = {
      {"shardcast_build_info", "gauge"},
      {"shardcast_uptime_seconds", "gauge"},
      {"shardcast_serving", "gauge"},
      {"shardcast_index_state", "gauge"},
      {"shardcast_index_shards", "gauge"},
      {"shardcast_index_samples", "gauge"},
      {"shardcast_index_skipped_samples", "gauge"},
      {"shardcast_shard_problems", "gauge"},
      {"shardcast_images_served_total", "counter"},
      {"shardcast_bytes_served_total", "counter"},
      {"shardcast_decode_errors_total", "counter"},
      {"shardcast_shard_read_retries_total", "counter"},
      {"shardcast_substitutions_total", "counter"},
      {"shardcast_decode_duration_seconds", "histogram"},
      {"shardcast_stream_wait_for_batch_seconds_total", "counter"},
      {"shardcast_stream_wait_for_client_seconds_total", "counter"},
      {"shardcast_open_streams", "gauge"},
      {"shardcast_decode_queue_depth", "gauge"},
      {"shardcast_decode_tasks_running", "gauge"},
      {"shardcast_decode_threads", "gauge"},
      {"shardcast_batch_memory_in_use_bytes", "gauge"},
      {"shardcast_batch_memory_reserved_bytes", "gauge"},
      {"shardcast_batch_memory_limit_bytes", "gauge"},
      {"shardcast_batch_memory_peak_reserved_bytes", "gauge"},
      {"shardcast_decode_memory_in_use_bytes", "gauge"},
      {"shardcast_decode_memory_peak_bytes", "gauge"},
      {"shardcast_decode_memory_limit_bytes", "gauge"},
      {"shardcast_decode_memory_waits_total", "counter"},
      {"shardcast_images_over_decode_memory_total", "counter"},
      {"shardcast_max_member_bytes", "gauge"},
      {"shardcast_images_over_member_limit_total", "counter"},
      {"shardcast_decode_task_exceptions_total", "counter"},
      {"shardcast_resident_memory_bytes", "gauge"},
      {"shardcast_streams_refused_memory_total", "counter"},
      {"shardcast_streams_replaced_total", "counter"},
      {"shardcast_streams_reclaimed_idle_total", "counter"},
      {"shardcast_stream_idle_timeout_seconds", "gauge"},
      {"shardcast_batches_given_back_total", "counter"},
      {"shardcast_descriptor_limit", "gauge"},
      {"shardcast_open_descriptors", "gauge"},
      {"shardcast_max_connections", "gauge"},
      {"shardcast_max_connections_per_peer", "gauge"},
      {"shardcast_connections_open", "gauge"},
      {"shardcast_connections_refused_total", "counter"},
      {"shardcast_listener_accepting", "gauge"},
      {"shardcast_jobs", "gauge"},
      {"shardcast_max_jobs", "gauge"},
      {"shardcast_jobs_truncated", "gauge"},
      {"shardcast_stall_warn_seconds", "gauge"},
      {"shardcast_stalled_ranks", "gauge"},
      {"shardcast_job_registered_ranks", "gauge"},
      {"shardcast_job_world_size", "gauge"},
      {"shardcast_job_batch_size", "gauge"},
      {"shardcast_job_batches_per_epoch", "gauge"},
      {"shardcast_job_stalled_ranks", "gauge"},
      {"shardcast_job_image", "gauge"},
      {"shardcast_job_left_out_samples", "gauge"},
      {"shardcast_job_samples_per_epoch", "gauge"},
      {"shardcast_job_mix_weight", "gauge"},
      {"shardcast_job_mix_samples_drawn", "gauge"},
      {"shardcast_job_mix_pass", "gauge"},
      {"shardcast_job_mix_dataset_samples", "gauge"},
      {"shardcast_job_mix_pass_position", "gauge"},
      {"shardcast_rank_position_batches", "gauge"},
      {"shardcast_rank_epoch", "gauge"},
      {"shardcast_rank_lag_batches", "gauge"},
      {"shardcast_rank_seconds_since_last_batch", "gauge"},
      {"shardcast_rank_stalled", "gauge"},
      {"shardcast_rank_streaming", "gauge"},
      {"shardcast_rank_window_batches", "gauge"},
      {"shardcast_rank_batches_sent_total", "counter"},
  };
  std::map<std::string, std::string> families;
  const std::string text = server::RenderPrometheusText(ExampleSnapshot());
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "# TYPE ")) continue;
    std::vector<std::string> parts = absl::StrSplit(line, ' ');
    ASSERT_EQ(parts.size(), 4u) << line;
    families[parts[2]] = parts[3];
  }
  for (const auto& [name, type] : expected) {
    EXPECT_EQ(families.count(name) > 0 ? families.at(name) : "(missing)", type) << name;
  }
  std::set<std::string> from_table;
  for (const StatusField& row : StatusFields()) from_table.insert(row.metric);
  for (const auto& [name, type] : families) {
    EXPECT_TRUE(expected.count(name) > 0 || from_table.count(name) > 0)
        << "a family neither listed here nor from the table: " << name;
  }
}

// The index state per dataset: the reply's DatasetStatus.State, or "draining" for every
// dataset while the server drains (which the reply's state has no value for).
TEST(MetricsTextTest, IndexStatePerDatasetAndDraining) {
  MetricsSnapshot snapshot = ExampleSnapshot();
  v1::DatasetStatus* val = snapshot.status.add_datasets();
  val->set_name("val");
  val->set_state(v1::DatasetStatus::FAILED);
  v1::DatasetStatus* train = snapshot.status.add_datasets();
  train->set_name("train");
  train->set_state(v1::DatasetStatus::INDEXING);
  const auto state = [](const std::map<std::string, std::string>& m, const std::string& dataset,
                        const std::string& name) {
    return m.at(
        absl::StrCat("shardcast_index_state{dataset=\"", dataset, "\",state=\"", name, "\"}"));
  };
  std::map<std::string, std::string> m = ParseExposition(server::RenderPrometheusText(snapshot));
  for (const auto& [dataset, current] : std::map<std::string, std::string>{
           {"default", "serving"}, {"val", "failed"}, {"train", "indexing"}}) {
    for (const char* name : server::kIndexStates) {
      EXPECT_EQ(state(m, dataset, name), current == name ? "1" : "0") << dataset << " " << name;
    }
  }
  EXPECT_EQ(m.at("shardcast_index_shards{dataset=\"default\"}"), "5");
  EXPECT_EQ(m.at("shardcast_index_shards{dataset=\"val\"}"), "0");
  EXPECT_EQ(m.at("shardcast_shard_problems{dataset=\"default\",problem=\"changed\"}"), "1");

  snapshot.draining = true;
  m = ParseExposition(server::RenderPrometheusText(snapshot));
  for (const char* dataset : {"default", "val", "train"}) {
    for (const char* name : server::kIndexStates) {
      EXPECT_EQ(state(m, dataset, name), std::string(name) == "draining" ? "1" : "0")
          << dataset << " " << name;
    }
  }
}

TEST(MetricsTextTest, LabelValuesOfAnyBytesStayValidText) {
  EXPECT_EQ(server::PrometheusLabelValue("plain-job_1"), "plain-job_1");
  // LogSafe's C escapes first (so the label reads as the log line does), then the
  // format's own: what a parser returns is the logged form, `q\"b\\` and `\xff\x01`.
  EXPECT_EQ(server::PrometheusLabelValue("q\"b\\"), R"(q\\\"b\\\\)");
  EXPECT_EQ(server::PrometheusLabelValue(std::string("\xff\x01", 2)), R"(\\xff\\x01)");
}

// ------------------------------------------------------------------ HTTP

TEST(MetricsHttpTest, AnswersOnlyGetMetricsAndChecksTokens) {
  TempDir dir;
  const std::string tokens_path = dir.path() + "/tokens";
  std::ofstream(tokens_path) << "# scrape token\nsecret-token\n";
  server::TokenAuthenticator tokens(tokens_path);
  ASSERT_TRUE(tokens.Reload().ok());
  const auto render = [] { return std::string("shardcast_up 1\n"); };
  const auto respond = [&](const std::string& method, const std::string& path,
                           const std::string& auth, const server::TokenAuthenticator* t) {
    return server::RespondToMetricsRequest({method, path, auth}, t, render);
  };
  server::HttpAnswer ok = respond("GET", "/metrics", "", nullptr);
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(ok.body, "shardcast_up 1\n");
  EXPECT_FALSE(ok.head_only);
  server::HttpAnswer head = respond("HEAD", "/metrics", "", nullptr);
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.head_only);
  EXPECT_EQ(respond("GET", "/", "", nullptr).status, 404);
  server::HttpAnswer post = respond("POST", "/metrics", "", nullptr);
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.headers["Allow"], "GET, HEAD");
  server::HttpAnswer none = respond("GET", "/metrics", "", &tokens);
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.headers["WWW-Authenticate"], "Bearer");
  const server::HttpAnswer wrong = respond("GET", "/metrics", "Bearer guess", &tokens);
  EXPECT_EQ(wrong.status, 401);
  EXPECT_FALSE(absl::StrContains(wrong.body, "shardcast_up")) << wrong.body;
  EXPECT_EQ(respond("GET", "/metrics", "Bearer secret-token", &tokens).status, 200);
}

// Sends `request` to 127.0.0.1:`port` and returns everything the server answers.
std::string HttpExchange(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
  ::close(fd);
  return response;
}

// ------------------------------------------------------------------ the real server

class MetricsServerTest : public ::testing::Test {
 protected:
  void Start() {
    MakeDataset(dir_.path(), /*samples=*/240, /*per_shard=*/60);
    server::ServerOptions options;
    options.metrics_listen_address = "127.0.0.1:0";
    options.stall_warn = absl::Milliseconds(300);
    server_ = std::make_unique<InProcessServer>(dir_.path(), options);
  }
  TempDir dir_;
  std::unique_ptr<InProcessServer> server_;
};

TEST_F(MetricsServerTest, ServesTheExpositionAndSurvivesBadRequests) {
  Start();
  const int port = server_->server().metrics_port();
  ASSERT_GT(port, 0);
  // Malformed heads get a 4xx or 5xx from libmicrohttpd (or a close), never a crash
  // or a hang, and the endpoint serves on.
  for (const std::string& bad :
       {std::string("BREW /pot HTCPCP/1.0\r\n\r\n"), std::string("GET\r\n\r\n"),
        std::string("GET /metrics SPDY/3\r\n\r\n"),
        std::string("GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n"),
        std::string("\0\0\0\r\n\r\n", 7)}) {
    const std::string answer = HttpExchange(port, bad);
    EXPECT_TRUE(answer.empty() || absl::StartsWith(answer, "HTTP/1.1 4") ||
                absl::StartsWith(answer, "HTTP/1.1 5"))
        << answer;
  }
  EXPECT_TRUE(absl::StartsWith(
      HttpExchange(port, absl::StrCat("GET /metrics HTTP/1.1\r\nX: ", std::string(20000, 'x'))),
      "HTTP/1.1 431"));
  const std::string head = HttpExchange(port, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(head, "HTTP/1.1 200 OK\r\n")) << head;
  EXPECT_TRUE(absl::EndsWith(head, "\r\n\r\n")) << head;
  EXPECT_FALSE(absl::StrContains(head, "shardcast_")) << head;
  EXPECT_TRUE(absl::StartsWith(HttpExchange(port, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"),
                               "HTTP/1.1 404"));
  EXPECT_TRUE(absl::StartsWith(HttpExchange(port, "PUT /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
                               "HTTP/1.1 405"));
  const std::string response = HttpExchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(absl::StartsWith(response, "HTTP/1.1 200 OK\r\n")) << response;
  const std::map<std::string, std::string> m =
      ParseExposition(response.substr(response.find("\r\n\r\n") + 4));
  EXPECT_EQ(m.at("shardcast_index_state{dataset=\"default\",state=\"serving\"}"), "1");
  EXPECT_EQ(m.at("shardcast_index_samples{dataset=\"default\"}"), "240");
  EXPECT_EQ(m.at("shardcast_stall_warn_seconds"), "0.3");
}

// The server's own snapshot: the dataset's series from the reply, and "draining" once the
// server drains (SIGTERM), which only Metrics() adds to the reply.
TEST_F(MetricsServerTest, TheIndexStateSaysDrainingOnceTheServerDrains) {
  Start();
  const std::string key = "shardcast_index_state{dataset=\"default\",state=\"";
  std::map<std::string, std::string> m =
      ParseExposition(server::RenderPrometheusText(server_->server().impl().Metrics()));
  EXPECT_EQ(m.at(key + "serving\"}"), "1");
  EXPECT_EQ(m.at(key + "draining\"}"), "0");
  EXPECT_EQ(m.at("shardcast_index_shards{dataset=\"default\"}"), "4");
  EXPECT_EQ(m.at("shardcast_serving"), "1");
  server_->server().impl().BeginDrain();
  m = ParseExposition(server::RenderPrometheusText(server_->server().impl().Metrics()));
  EXPECT_EQ(m.at(key + "serving\"}"), "0");
  EXPECT_EQ(m.at(key + "draining\"}"), "1");
  EXPECT_EQ(m.at("shardcast_serving"), "0");
}

// Rank 0 reads its epoch while rank 1 stops reading (a stuck trainer, as far as the server
// can see): after --stall-warn rank 1 is flagged in GetStatus and /metrics, once; it is
// cleared as soon as rank 1 takes a batch again.
TEST_F(MetricsServerTest, AStoppedRankBehindItsPeerIsFlaggedOnceAndClearedWhenItMoves) {
  Start();
  const std::string job = "stall";
  std::shared_ptr<grpc::Channel> slow = MakeChannel(server_->target(), 64 * 1024);
  auto stub = v1::Shardcast::NewStub(slow);
  for (int rank = 0; rank < 2; ++rank) {
    v1::RegisterResponse response;
    ASSERT_TRUE(Register(stub.get(), MakeRegister(job, rank, 2, 4), &response).ok());
    ASSERT_EQ(response.batches_per_epoch(), 30);
  }
  grpc::ClientContext contexts[2];
  std::unique_ptr<grpc::ClientReader<v1::Batch>> readers[2];
  for (int rank = 0; rank < 2; ++rank) {
    v1::StreamBatchesRequest request;
    request.set_job_id(job);
    request.set_rank(rank);
    readers[rank] = stub->StreamBatches(&contexts[rank], request);
  }
  v1::Batch batch;
  ASSERT_TRUE(readers[1]->Read(&batch));  // rank 1 takes one batch, then stops
  while (readers[0]->Read(&batch)) {      // rank 0 takes its whole epoch
  }
  ASSERT_TRUE(readers[0]->Finish().ok());

  auto rank1 = [](const v1::GetStatusResponse& s) -> const v1::RankStatus* {
    if (s.jobs_size() != 1 || s.jobs(0).ranks_size() != 2) return nullptr;
    return &s.jobs(0).ranks(1);
  };
  v1::GetStatusResponse status = WaitForStatus(
      server_->stub(),
      [&](const v1::GetStatusResponse& s) { return rank1(s) != nullptr && rank1(s)->stalled(); },
      30);
  ASSERT_NE(rank1(status), nullptr);
  EXPECT_TRUE(rank1(status)->stalled()) << status.DebugString();
  EXPECT_FALSE(status.jobs(0).ranks(0).stalled());
  EXPECT_EQ(status.jobs(0).stalled_ranks(), 1);
  EXPECT_EQ(status.stalled_ranks(), 1);
  EXPECT_GT(rank1(status)->lag_batches(), 0);
  EXPECT_GE(rank1(status)->seconds_since_last_batch(), 0.3);
  // Flagged once: the next check finds nothing new.
  EXPECT_EQ(server_->server().impl().streams().CheckStalls(), 0);
  const std::string flagged = server::RenderPrometheusText(server_->server().impl().Metrics());
  EXPECT_TRUE(absl::StrContains(flagged, "shardcast_rank_stalled{job=\"stall\",rank=\"1\"} 1\n"))
      << flagged;
  EXPECT_TRUE(absl::StrContains(flagged, "shardcast_stalled_ranks 1\n")) << flagged;

  // Rank 1 reads again, to the end of the epoch: every write of its stream has
  // completed (and cleared the flag) before its stream ends.
  int64_t read = 1;
  while (readers[1]->Read(&batch)) ++read;
  EXPECT_EQ(read, 30);
  EXPECT_TRUE(readers[1]->Finish().ok());
  status = GetStatus(server_->stub());
  ASSERT_NE(rank1(status), nullptr);
  EXPECT_FALSE(rank1(status)->stalled()) << status.DebugString();
  EXPECT_EQ(status.stalled_ranks(), 0);
}

// ------------------------------------------------------- many connections at once

// A connected TCP socket to 127.0.0.1:`port`, or -1. Non-blocking connect, then up to
// `wait` for it to complete: a listener whose backlog is full leaves it pending.
// `from`: the local address (127.0.0.2 is another peer than 127.0.0.1 on Linux).
int Connect(int port, absl::Duration wait = absl::Seconds(5), const char* from = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (from != nullptr) {
    sockaddr_in local{};
    local.sin_family = AF_INET;
    ::inet_pton(AF_INET, from, &local.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
      ::close(fd);
      return -1;
    }
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    pollfd p{fd, POLLOUT, 0};
    int error = 0;
    socklen_t length = sizeof(error);
    if (errno != EINPROGRESS || ::poll(&p, 1, absl::ToInt64Milliseconds(wait)) != 1 ||
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
      ::close(fd);
      return -1;
    }
  }
  return fd;
}

// Sends `request` on a fresh connection and reads the answer to EOF, waiting at most
// `wait` for any one step; what arrived by then.
std::string Scrape(int port, const std::string& request, absl::Duration wait,
                   const char* from = nullptr) {
  const int fd = Connect(port, wait, from);
  if (fd < 0) return "(no connection)";
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  const timeval timeout = absl::ToTimeval(wait);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char buffer[65536];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
  ::close(fd);
  return response;
}

// The server has not closed `fd`: nothing to read yet (EAGAIN), neither EOF nor reset.
bool StillOpen(int fd) {
  char byte;
  return ::recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK) < 0 && errno == EAGAIN;
}

// Waits up to `wait` for the server to close `fd` (EOF or reset).
bool ClosedByServer(int fd, absl::Duration wait) {
  const absl::Time deadline = absl::Now() + wait;
  char buffer[1024];
  while (absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 50);
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
  }
  return false;
}

constexpr char kScrape[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";

// A peer that sends a request head one byte every 100 ms and never finishes it.
class Trickler {
 public:
  explicit Trickler(int fd) : fd_(fd), thread_([this] { Run(); }) {}
  ~Trickler() {
    stop_ = true;
    thread_.join();
  }
  int fd() const { return fd_; }

 private:
  void Run() {
    const std::string head =
        absl::StrCat("GET /metrics HTTP/1.1\r\nX-Slow: ", std::string(200, 'x'));
    for (size_t i = 0; i < head.size() && !stop_; ++i) {
      if (::send(fd_, &head[i], 1, MSG_NOSIGNAL) != 1) return;  // closed by the server
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  const int fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string Exposition() { return "shardcast_up 1\n"; }

// 40 peers that connect and send nothing, and one that trickles its head, must not delay
// a scrape: it is answered while every one of them is still open (none has reached its
// deadline), and each of them is closed once its own deadline has passed.
TEST(MetricsHttpServerTest, IdleAndTricklingPeersDoNotDelayAScrapeAndAreClosedAtTheirDeadline) {
  server::MetricsHttpServer::Limits limits;
  limits.max_connections_per_peer = limits.max_connections;  // all from 127.0.0.1 here
  server::MetricsHttpServer server("127.0.0.1:0", Exposition, nullptr, limits);
  ASSERT_TRUE(server.Start().ok());
  const absl::Time opened = absl::Now();
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) {
    const int fd = Connect(server.port(), absl::Seconds(2));
    EXPECT_GE(fd, 0) << "idle connection " << i << " not established";
    if (fd >= 0) idle.push_back(fd);
  }
  const int trickling_fd = Connect(server.port(), absl::Seconds(2));
  ASSERT_GE(trickling_fd, 0);
  auto trickler = std::make_unique<Trickler>(trickling_fd);

  const std::string response = Scrape(server.port(), kScrape, absl::Seconds(10));
  EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 200 OK\r\n")) << response;
  EXPECT_TRUE(absl::EndsWith(response, "\r\n\r\nshardcast_up 1\n")) << response;
  // The scrape did not wait for any idle peer's deadline: none has been closed yet.
  for (size_t i = 0; i < idle.size(); ++i) {
    EXPECT_TRUE(StillOpen(idle[i])) << "idle connection " << i << " was closed before the scrape";
  }
  EXPECT_TRUE(StillOpen(trickling_fd));

  // Every idle peer is closed after its deadline (not before), and so is the trickling
  // one, though it kept sending: the deadline is for the whole head.
  for (size_t i = 0; i < idle.size(); ++i) {
    EXPECT_TRUE(ClosedByServer(idle[i], absl::Seconds(10))) << "idle connection " << i;
  }
  // Not before the deadline, give or take libmicrohttpd's own clock: it times the
  // connection from its accept (monotonic, milliseconds) and closed one 1 ms short of
  // 2 s by absl::Now() in a sanitizer run. A deadline cut short is far more than that.
  EXPECT_GE(absl::Now() - opened,
            server::MetricsHttpServer::Limits().read_timeout - absl::Milliseconds(100));
  EXPECT_TRUE(ClosedByServer(trickling_fd, absl::Seconds(10)));
  trickler.reset();
  for (int fd : idle) ::close(fd);
  ::close(trickling_fd);
  EXPECT_EQ(server.refused_connections(), 0);
}

// A client that does not read its (large) answer holds only its own connection: another
// scrape is answered meanwhile, and the first still gets the whole answer afterwards.
TEST(MetricsHttpServerTest, ALargeAnswerIsWrittenAsTheClientTakesIt) {
  const std::string big(8 << 20, 'x');
  server::MetricsHttpServer server(
      "127.0.0.1:0", [&big] { return big; }, nullptr);
  ASSERT_TRUE(server.Start().ok());
  const int slow = Connect(server.port());
  ASSERT_GE(slow, 0);
  ASSERT_EQ(::send(slow, kScrape, sizeof(kScrape) - 1, MSG_NOSIGNAL),
            static_cast<ssize_t>(sizeof(kScrape) - 1));
  const std::string other = Scrape(server.port(), kScrape, absl::Seconds(10));
  EXPECT_TRUE(absl::StartsWith(other, "HTTP/1.1 200 OK\r\n")) << other.substr(0, 200);
  EXPECT_TRUE(absl::EndsWith(other, big));
  std::string response;
  char buffer[65536];
  while (true) {
    pollfd p{slow, POLLIN, 0};
    if (::poll(&p, 1, 10000) != 1) break;
    const ssize_t n = ::recv(slow, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    response.append(buffer, n);
  }
  ::close(slow);
  EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 200 OK\r\n")) << response.substr(0, 200);
  EXPECT_EQ(response.size() - response.find("\r\n\r\n") - 4, big.size());
}

// Past its share a peer's next connection is closed at once, unanswered, and counted;
// another peer is served meanwhile. Past the listener's limit new connections wait in
// the kernel's queue until a place frees (the idle ones close at their read deadline),
// then are served. Stop closes what is open and is idempotent.
TEST(MetricsHttpServerTest, APeerBeyondItsShareIsClosedAndCountedAndTheFullListenerQueues) {
  server::MetricsHttpServer::Limits limits;
  limits.max_connections = 8;
  limits.max_connections_per_peer = 4;
  server::MetricsHttpServer server("127.0.0.1:0", Exposition, nullptr, limits);
  ASSERT_TRUE(server.Start().ok());
  std::vector<int> idle;
  for (int i = 0; i < limits.max_connections_per_peer; ++i) {
    idle.push_back(Connect(server.port(), absl::Seconds(5), "127.0.0.2"));
    ASSERT_GE(idle.back(), 0);
  }
  // The fifth from the same peer: closed without an answer.
  EXPECT_EQ(Scrape(server.port(), kScrape, absl::Seconds(10), "127.0.0.2"), "");
  EXPECT_EQ(server.refused_connections(), 1);
  const std::string other = Scrape(server.port(), kScrape, absl::Seconds(10));
  EXPECT_TRUE(absl::StartsWith(other, "HTTP/1.1 200 OK\r\n")) << other;
  for (int fd : idle) EXPECT_TRUE(StillOpen(fd));

  // Four more from a third peer fill the listener: a scrape waits for a place.
  for (int i = 0; i < 4; ++i) {
    idle.push_back(Connect(server.port(), absl::Seconds(5), "127.0.0.3"));
    ASSERT_GE(idle.back(), 0);
  }
  const absl::Time asked = absl::Now();
  const std::string queued = Scrape(server.port(), kScrape, absl::Seconds(10));
  EXPECT_TRUE(absl::StartsWith(queued, "HTTP/1.1 200 OK\r\n")) << queued;
  EXPECT_LT(absl::Now() - asked, limits.read_timeout + absl::Seconds(3));
  for (int fd : idle) EXPECT_TRUE(ClosedByServer(fd, absl::Seconds(10)));
  EXPECT_EQ(server.refused_connections(), 1);
  for (int fd : idle) ::close(fd);

  const int open = Connect(server.port());
  ASSERT_GE(open, 0);
  server.Stop();
  EXPECT_TRUE(ClosedByServer(open, absl::Seconds(5)));
  ::close(open);
  server.Stop();
}

// One peer (127.0.0.2) that holds as many connections as it can, slowly: up to `target`
// at once, half of them silent, half trickling a request line that never ends (a byte
// every 100 ms), each reopened as soon as the server closes it.
class SlowPeer {
 public:
  SlowPeer(int port, int target) : port_(port), target_(target), thread_([this] { Run(); }) {}
  ~SlowPeer() {
    stop_ = true;
    thread_.join();
  }
  // Connections opened, and the most that were open (connected, not closed) at once.
  int64_t opened() const { return opened_.load(); }
  int64_t most_open() const { return most_open_.load(); }

 private:
  void Run() {
    std::vector<int> fds;
    while (!stop_) {
      size_t kept = 0;
      for (size_t i = 0; i < fds.size(); ++i) {
        char byte;
        const ssize_t n = ::recv(fds[i], &byte, 1, MSG_DONTWAIT);
        const bool closed = n == 0 || (n < 0 && errno != EAGAIN);
        // Every other one trickles a request line; a send to a closed socket fails.
        if (closed || (i % 2 == 1 && ::send(fds[i], "G", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
                       errno != EAGAIN)) {
          ::close(fds[i]);
          continue;
        }
        fds[kept++] = fds[i];
      }
      fds.resize(kept);
      // Reconnect what was closed (at most 32 a turn, so the peer is slow, not a storm).
      for (int i = 0; i < 32 && static_cast<int>(fds.size()) < target_ && !stop_; ++i) {
        const int fd = Connect(port_, absl::Milliseconds(200), "127.0.0.2");
        if (fd < 0) break;
        fds.push_back(fd);
        opened_.fetch_add(1);
      }
      most_open_.store(std::max<int64_t>(most_open_.load(), static_cast<int64_t>(fds.size())));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (int fd : fds) ::close(fd);
  }
  const int port_;
  const int target_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> opened_{0};
  std::atomic<int64_t> most_open_{0};
  std::thread thread_;
};

// Issue 44: 70 idle connections from one address, reopened as the server closed them,
// got 31 of 32 scrapes from another client answered 503 (the hand-written listener had
// a cap of 64 and no per-peer limit). With libmicrohttpd and the per-peer share, a peer
// that holds all it can, slowly, leaves every scrape of /metrics and / from another
// address (every 250 ms for 10 s) answered 200 within 1 s, and the gRPC port serves.
TEST_F(MetricsServerTest, OnePeerHoldingAllItCanSlowlyDelaysNoScrapeOfAnother) {
  Start();
  const int port = server_->server().metrics_port();
  ASSERT_GT(port, 0);
  SlowPeer flood(port, /*target=*/200);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the flood holds its share
  int scrapes = 0;
  absl::Duration slowest;
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (absl::Now() < end) {
    for (const char* path : {"/metrics", "/"}) {
      const absl::Time asked = absl::Now();
      const std::string answer =
          Scrape(port, absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\n\r\n"), absl::Seconds(5),
                 "127.0.0.1");
      const absl::Duration took = absl::Now() - asked;
      slowest = std::max(slowest, took);
      ++scrapes;
      EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200 OK\r\n"))
          << path << ": " << answer.substr(0, 200);
      EXPECT_LT(took, absl::Seconds(1)) << path;
    }
    // gRPC is another listener, untouched by the flood: a status call succeeds.
    EXPECT_GT(GetStatus(server_->stub()).uptime_seconds(), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_GE(scrapes, 20);
  // The flood did hold connections and was refused beyond its share.
  EXPECT_GE(flood.most_open(), 8);
  EXPECT_GT(flood.opened(), flood.most_open());
  std::cerr << scrapes << " scrapes, slowest " << absl::FormatDuration(slowest)
            << "; the peer opened " << flood.opened() << " connections, at most "
            << flood.most_open() << " at once\n";
}

}  // namespace
}  // namespace shardcast::server_testing

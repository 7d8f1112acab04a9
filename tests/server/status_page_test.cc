// The status page rendered from made-up replies: what comes from clients and files is
// escaped, every rank has its bar, stalls and shard problems are highlighted, and the
// metrics listener serves it at / under the same token rule as /metrics.
#include "server/status/status_page.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/net/token_authenticator.h"
#include "server/status/metrics_http.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

namespace shardcast {
namespace {

using server::ChartPoint;
using server::HtmlEscape;
using server::IsInvisibleFormatCharacter;
using server::RenderStatusPage;
using testing::HasSubstr;
using testing::Not;
using testing_util::TempDir;

constexpr double kSpan = 600;

v1::GetStatusResponse TwoRanksOneStalled() {
  v1::GetStatusResponse status;
  status.set_version("1.2.3");
  status.set_images_per_second(123.4);
  status.set_stalled_ranks(1);
  status.set_total_jobs(1);
  v1::DatasetStatus* dataset = status.add_datasets();
  dataset->set_name("default");
  dataset->set_state(v1::DatasetStatus::SERVING);
  dataset->set_num_shards(5);
  v1::JobStatus* job = status.add_jobs();
  job->set_job_id("train-a");
  job->set_dataset("default");
  job->set_world_size(2);
  job->set_batches_per_epoch(40);
  job->set_stalled_ranks(1);
  v1::RankStatus* ahead = job->add_ranks();
  ahead->set_rank(0);
  ahead->set_epoch(2);
  ahead->set_next_batch(30);
  ahead->set_streaming(true);
  v1::RankStatus* behind = job->add_ranks();
  behind->set_rank(1);
  behind->set_epoch(2);
  behind->set_next_batch(10);
  behind->set_streaming(true);
  behind->set_stalled(true);
  behind->set_seconds_since_last_batch(75);
  return status;
}

TEST(HtmlEscapeTest, EscapesMarkupQuotesControlsAndBadBytes) {
  EXPECT_EQ(HtmlEscape("plain-job_1"), "plain-job_1");
  EXPECT_EQ(HtmlEscape("<script>alert('x')</script>"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;");
  EXPECT_EQ(HtmlEscape("a\"b&c"), "a&quot;b&amp;c");
  EXPECT_EQ(HtmlEscape(std::string("\x1b[31m\0", 6)), "&#xFFFD;[31m&#xFFFD;");
  EXPECT_EQ(HtmlEscape("caf\xe9"), "caf\\xe9");         // not UTF-8: as EscapeToUtf8 writes it
  EXPECT_EQ(HtmlEscape("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 stays
}

// A right-to-left override in a job id would reverse how the rest of its row reads
// (display spoofing); it and the other invisible characters are shown as code points.
TEST(HtmlEscapeTest, ShowsBidiAndInvisibleFormatCharactersAsCodePoints) {
  EXPECT_EQ(HtmlEscape("job\xe2\x80\xae"
                       "cba"),
            "job\\u202ecba");  // U+202E RLO
  EXPECT_EQ(HtmlEscape("\xe2\x80\xaa\xe2\x80\xab\xe2\x80\xac\xe2\x80\xad"),
            "\\u202a\\u202b\\u202c\\u202d");  // LRE RLE PDF LRO
  EXPECT_EQ(HtmlEscape("\xe2\x81\xa6\xe2\x81\xa7\xe2\x81\xa8\xe2\x81\xa9"),
            "\\u2066\\u2067\\u2068\\u2069");  // the isolates
  EXPECT_EQ(HtmlEscape("a\xe2\x80\x8b"
                       "b\xe2\x80\x8c\xe2\x80\x8d\xe2\x80\x8e\xe2\x80\x8f"),
            "a\\u200bb\\u200c\\u200d\\u200e\\u200f");    // zero width, LRM, RLM
  EXPECT_EQ(HtmlEscape("\xef\xbb\xbfid"), "\\ufeffid");  // byte order mark
  EXPECT_EQ(HtmlEscape("a\xe2\x80\xa8"
                       "b\xe2\x80\xa9"),
            "a\\u2028b\\u2029");                                // Zl, Zp
  EXPECT_EQ(HtmlEscape("\xc2\x85\xc2\xad"), "\\u0085\\u00ad");  // a C1 control, soft hyphen
  EXPECT_EQ(HtmlEscape("\xf3\xa0\x80\x81"), "\\U000e0001");     // a language tag
  // Visible text around them, and next to them in the code chart, stays as it is.
  EXPECT_EQ(HtmlEscape("\xe2\x80\x90\xe2\x80\xaf\xc2\xa0\xd7\x90"),
            "\xe2\x80\x90\xe2\x80\xaf\xc2\xa0\xd7\x90");  // U+2010, U+202F, U+00A0, Hebrew
  EXPECT_EQ(HtmlEscape("caf\xc3\xa9 \xe6\x97\xa5\xf0\x9f\x99\x82"),
            "caf\xc3\xa9 \xe6\x97\xa5\xf0\x9f\x99\x82");
}

// Every code point Python's unicodedata (Debian 12's Unicode database) puts in category
// Cf, Zl or Zp is escaped: the table in status_page.cc against an independent one.
TEST(HtmlEscapeTest, EveryFormatCharacterOfTheUnicodeDatabaseIsEscaped) {
  const std::string command =
      absl::StrCat(REFERENCE_PYTHON,
                   " -c \"import unicodedata; print(' '.join(str(c) for c in range(0x110000) "
                   "if unicodedata.category(chr(c)) in ('Cf', 'Zl', 'Zp', 'Cc') and c >= 0x80))\"");
  const testing_util::CommandOutput listed = testing_util::RunShellCapture(command);
  ASSERT_EQ(listed.exit_code, 0) << command;
  std::istringstream numbers(listed.out);
  std::vector<char32_t> reference;
  for (uint32_t c = 0; numbers >> c;) reference.push_back(c);
  ASSERT_GT(reference.size(), 150u) << listed.out;
  for (const char32_t c : reference) {
    EXPECT_TRUE(IsInvisibleFormatCharacter(c)) << "U+" << std::hex << static_cast<uint32_t>(c);
  }
  // And nothing printable: letters, digits, spaces and symbols of every script pass.
  for (const char32_t c : {0x41, 0xa0, 0xe9, 0x5d0, 0x627, 0x2010, 0x202f, 0x3042, 0x1f642}) {
    EXPECT_FALSE(IsInvisibleFormatCharacter(c)) << "U+" << std::hex << static_cast<uint32_t>(c);
  }
}

TEST(StatusPageTest, ShowsEveryRanksPositionAsABarAndHighlightsTheStall) {
  const std::string page = RenderStatusPage(TwoRanksOneStalled(), {}, kSpan);
  EXPECT_TRUE(absl::StartsWith(page, "<!DOCTYPE html>"));
  EXPECT_THAT(page, HasSubstr("<meta http-equiv=\"refresh\" content=\"5\">"));
  EXPECT_THAT(page, HasSubstr("shardcast-server 1.2.3"));
  EXPECT_THAT(page, HasSubstr("123.4 images/s"));
  EXPECT_THAT(page, HasSubstr("<section class=\"job\" data-job-id=\"train-a\""));
  EXPECT_THAT(page, HasSubstr("40 batches per epoch"));
  // Bars of 240 px: 30 of 40 batches and 10 of 40.
  EXPECT_THAT(page, HasSubstr("<rect width=\"180.0\""));
  EXPECT_THAT(page, HasSubstr("<rect width=\"60.0\""));
  EXPECT_THAT(page, HasSubstr("<tr class=\"rank\" data-rank=\"0\" data-epoch=\"2\" "
                              "data-next-batch=\"30\">"));
  EXPECT_THAT(page, HasSubstr("<tr class=\"rank stalled\" data-rank=\"1\" data-epoch=\"2\" "
                              "data-next-batch=\"10\">"));
  EXPECT_THAT(page, HasSubstr("STALLED: no batch for 1 min 15 s"));
  EXPECT_THAT(page, HasSubstr("<span id=\"stalled\" class=\"stalled\">1 stalled rank<"));
  // Nothing is fetched from elsewhere and nothing runs.
  EXPECT_THAT(page, Not(HasSubstr("<script")));
  EXPECT_THAT(page, Not(HasSubstr("src=")));
  EXPECT_THAT(page, Not(HasSubstr("href=")));
}

TEST(StatusPageTest, EscapesJobIdsDatasetNamesAndShardPaths) {
  v1::GetStatusResponse status = TwoRanksOneStalled();
  status.mutable_jobs(0)->set_job_id("<img src=x onerror=alert(1)>");
  status.mutable_jobs(0)->set_dataset("d\"><b>");
  status.mutable_datasets(0)->set_dir("/data/<i>");
  v1::ShardProblem* skipped = status.add_skipped_shards();
  skipped->set_dataset("default");
  skipped->set_path("/data/<bad>.tar");
  skipped->set_reason("not a tar & empty");
  v1::JobStatus* spoof = status.add_jobs();
  spoof->set_job_id(
      "evil\xe2\x80\xae"
      "nur-niart");  // reads "train-run" right to left
  spoof->set_dataset("default");
  const std::string page = RenderStatusPage(status, {}, kSpan);
  EXPECT_THAT(page, Not(HasSubstr("\xe2\x80\xae")));
  EXPECT_THAT(page, HasSubstr("data-job-id=\"evil\\u202enur-niart\""));
  EXPECT_THAT(page, Not(HasSubstr("<img")));
  EXPECT_THAT(page, Not(HasSubstr("<b>")));
  EXPECT_THAT(page, Not(HasSubstr("<i>")));
  EXPECT_THAT(page, Not(HasSubstr("<bad>")));
  EXPECT_THAT(page, HasSubstr("data-job-id=\"&lt;img src=x onerror=alert(1)&gt;\""));
  EXPECT_THAT(page, HasSubstr("/data/&lt;bad&gt;.tar"));
  EXPECT_THAT(page, HasSubstr("not a tar &amp; empty"));
}

TEST(StatusPageTest, HighlightsShardProblemsAndFailedDatasets) {
  v1::GetStatusResponse status = TwoRanksOneStalled();
  status.mutable_datasets(0)->set_total_changed_shards(1);
  v1::ShardProblem* changed = status.add_changed_shards();
  changed->set_dataset("default");
  changed->set_path("/data/s-0003.tar");
  changed->set_reason("size changed");
  v1::DatasetStatus* failed = status.add_datasets();
  failed->set_name("broken");
  failed->set_state(v1::DatasetStatus::FAILED);
  failed->set_error("no shards");
  const std::string page = RenderStatusPage(status, {}, kSpan);
  EXPECT_THAT(page, HasSubstr("<tr class=\"dataset problem\" data-dataset=\"default\">"));
  EXPECT_THAT(page, HasSubstr("<tr class=\"dataset problem\" data-dataset=\"broken\">"));
  EXPECT_THAT(page, HasSubstr("failed: no shards"));
  EXPECT_THAT(page, HasSubstr("<tr class=\"problem\"><td>default</td><td>/data/s-0003.tar</td>"
                              "<td>changed since indexing: size changed</td></tr>"));
}

TEST(StatusPageTest, DrawsTheChartsFromTheHistory) {
  const std::string empty = RenderStatusPage(TwoRanksOneStalled(), {}, kSpan);
  EXPECT_THAT(empty, HasSubstr("Collecting samples"));
  EXPECT_THAT(empty, Not(HasSubstr("chart-rate")));
  std::vector<ChartPoint> history;
  history.push_back({600, 50, 0.25});  // the left edge
  history.push_back({300, 100, -1});   // nothing waited: a gap in the share's line
  history.push_back({0, 100, 0.5});    // the right edge
  const std::string page = RenderStatusPage(TwoRanksOneStalled(), history, kSpan);
  EXPECT_THAT(page, HasSubstr("<svg id=\"chart-rate\""));
  EXPECT_THAT(page, HasSubstr("<svg id=\"chart-wait\""));
  // images/s: top 100 at y = 2, 50 at the middle; x from 0 to 360.
  EXPECT_THAT(page, HasSubstr("points=\"0.0,45.0 180.0,2.0 360.0,2.0 \""));
  // The share: two lines around the gap.
  EXPECT_THAT(page, HasSubstr("points=\"0.0,66.5 \""));
  EXPECT_THAT(page, HasSubstr("points=\"360.0,45.0 \""));
  EXPECT_THAT(page, HasSubstr("now 50%"));
  EXPECT_THAT(page, HasSubstr("The last 10 min"));
}

TEST(StatusPageTest, AYoungHistoryFillsTheCharts) {
  std::vector<ChartPoint> history;
  history.push_back({90, 10, -1});
  history.push_back({0, 10, -1});
  const std::string page = RenderStatusPage(TwoRanksOneStalled(), history, kSpan);
  EXPECT_THAT(page, HasSubstr("The last 1 min 30 s"));
  EXPECT_THAT(page, HasSubstr("points=\"0.0,2.0 360.0,2.0 \""));
}

TEST(StatusPageTest, TheListenerServesItAtRootUnderTheTokenRule) {
  TempDir dir;
  const std::string tokens_path = dir.path() + "/tokens";
  std::ofstream(tokens_path) << "secret-token\n";
  server::TokenAuthenticator tokens(tokens_path);
  ASSERT_TRUE(tokens.Reload().ok());
  const auto metrics = [] { return std::string("shardcast_up 1\n"); };
  const auto page = [] { return std::string("<!DOCTYPE html><p>page</p>"); };
  const auto respond = [&](const std::string& path, const std::string& auth,
                           const server::TokenAuthenticator* t) {
    return server::RespondToMetricsRequest({"GET", path, auth}, t, metrics, page);
  };
  const server::HttpAnswer ok = respond("/", "", nullptr);
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.content_type, "text/html; charset=utf-8");
  EXPECT_EQ(ok.body, "<!DOCTYPE html><p>page</p>");
  EXPECT_THAT(respond("/metrics", "", nullptr).body, HasSubstr("shardcast_up 1"));
  EXPECT_EQ(respond("/index.html", "", nullptr).status, 404);
  const server::HttpAnswer refused = respond("/", "Bearer guess", &tokens);
  EXPECT_EQ(refused.status, 401);
  EXPECT_THAT(refused.body, Not(HasSubstr("page")));
  EXPECT_EQ(respond("/", "Bearer secret-token", &tokens).status, 200);

  // The same over the wire, through libmicrohttpd.
  server::MetricsHttpServer listener("127.0.0.1:0", metrics, &tokens);
  listener.ServeStatusPage(page);
  ASSERT_TRUE(listener.Start().ok());
  const auto get = [&](const std::string& auth) {
    return testing_util::RunShellCapture(
               absl::StrCat(
                   "/usr/bin/python3 -c \"import socket; s = "
                   "socket.create_connection(('127.0.0.1', ",
                   listener.port(), ")); s.sendall(b'GET / HTTP/1.1\\r\\nHost: x\\r\\n", auth,
                   "\\r\\n'); print(b''.join(iter(lambda: s.recv(65536), b'')).decode())\""))
        .out;
  };
  const std::string served = get("Authorization: Bearer secret-token\\r\\n");
  EXPECT_TRUE(absl::StartsWith(served, "HTTP/1.1 200 OK\r\n")) << served;
  EXPECT_THAT(served, HasSubstr("Content-Type: text/html; charset=utf-8\r\n"));
  EXPECT_THAT(served, HasSubstr("<p>page</p>"));
  const std::string unauthorized = get("");
  EXPECT_TRUE(absl::StartsWith(unauthorized, "HTTP/1.1 401")) << unauthorized;
  EXPECT_THAT(unauthorized, HasSubstr("WWW-Authenticate: Bearer"));
  EXPECT_THAT(unauthorized, Not(HasSubstr("page")));
}

}  // namespace
}  // namespace shardcast

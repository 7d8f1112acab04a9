// Tests of shardcast-ctl's human number formatting and status rendering, on
// GetStatus replies built field by field.
#include "client/ctl/status_report.h"

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "proto/status_fields.h"

namespace shardcast::ctl {
namespace {

TEST(FormatCountTest, SmallIntegersPrintExactly) {
  EXPECT_EQ(FormatCount(0), "0");
  EXPECT_EQ(FormatCount(7), "7");
  EXPECT_EQ(FormatCount(999), "999");
  EXPECT_EQ(FormatCount(-12), "-12");
}

TEST(FormatCountTest, ThreeSignificantDigitsWithPrefix) {
  EXPECT_EQ(FormatCount(1200), "1.2k");
  EXPECT_EQ(FormatCount(1234), "1.23k");
  EXPECT_EQ(FormatCount(12345), "12.3k");
  EXPECT_EQ(FormatCount(123456), "123k");
  EXPECT_EQ(FormatCount(1e6), "1M");
  EXPECT_EQ(FormatCount(2.5e9), "2.5G");
  EXPECT_EQ(FormatCount(12.5), "12.5");
  EXPECT_EQ(FormatCount(0.25), "0.25");
}

TEST(FormatCountTest, RoundingCarriesIntoTheNextPrefix) {
  // 999.7 would round to "1000" without a prefix; 999999 to "1000k".
  EXPECT_EQ(FormatCount(999.7), "1k");
  EXPECT_EQ(FormatCount(999999), "1M");
  EXPECT_EQ(FormatCount(9.996e3), "10k");
  EXPECT_EQ(FormatCount(99.96e3), "100k");
}

TEST(FormatCountTest, NonFiniteIsQuestionMark) {
  EXPECT_EQ(FormatCount(std::numeric_limits<double>::quiet_NaN()), "?");
  EXPECT_EQ(FormatCount(std::numeric_limits<double>::infinity()), "?");
}

TEST(FormatBytesTest, DecimalUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1500), "1.5 kB");
  EXPECT_EQ(FormatBytes(1.5e6), "1.5 MB");
  EXPECT_EQ(FormatBytes(45.61e6), "45.6 MB");
  EXPECT_EQ(FormatBytes(3 * 224 * 224 * 256), "38.5 MB");
  EXPECT_EQ(FormatBytes(1.234e12), "1.23 TB");
}

TEST(FormatDurationTest, PicksUnitsByMagnitude) {
  EXPECT_EQ(FormatDuration(0), "0.0s");
  EXPECT_EQ(FormatDuration(5.24), "5.2s");
  EXPECT_EQ(FormatDuration(303), "5m03s");
  EXPECT_EQ(FormatDuration(2 * 3600 + 5 * 60 + 3), "2h05m03s");
  EXPECT_EQ(FormatDuration(3 * 86400 + 4 * 3600 + 5 * 60 + 59), "3d04h05m");
  EXPECT_EQ(FormatDuration(-1), "?");
}

TEST(TextTableTest, PadsColumnsAndAlignsNumbersRight) {
  TextTable table({"NAME", "N"}, {false, true});
  table.AddRow({"a", "1234"});
  table.AddRow({"longer-name", "5"});
  EXPECT_EQ(table.Render("  "),
            "  NAME            N\n"
            "  a            1234\n"
            "  longer-name     5\n");
}

TEST(TextTableTest, NoTrailingSpacesAfterLeftAlignedLastColumn) {
  TextTable table({"A", "LAST"}, {true, false});
  table.AddRow({"1", "x"});
  EXPECT_EQ(table.Render(""), "A  LAST\n1  x\n");
}

shardcast::v1::GetStatusResponse SampleStatus() {
  shardcast::v1::GetStatusResponse st;
  st.set_version("0.1.0");
  st.set_uptime_seconds(3723);
  st.set_serving(true);
  st.set_shards_dir("/srv/shards");
  st.set_num_shards(4);
  st.set_num_samples(64);
  st.set_index_fingerprint("idx-fp-1234");
  st.set_open_streams(2);
  st.set_images_served(12345);
  st.set_bytes_served(1850000000);
  st.set_images_per_second(1234.5);
  st.set_bytes_per_second(45.6e6);
  st.set_decode_errors(3);
  st.set_substitutions(2);
  st.set_queue_depth(17);
  st.set_decode_tasks_running(2);
  st.set_memory_in_use_bytes(25000000);
  st.set_rss_bytes(123400000);
  st.set_decode_threads(8);
  st.set_skipped_samples(1);
  auto* job = st.add_jobs();
  job->set_job_id("train");
  job->set_world_size(2);
  job->set_batch_size(16);
  job->set_batches_per_epoch(2);
  job->set_job_fingerprint("plan-fp-abcd");
  job->set_split(shardcast::v1::SPLIT_SAMPLE);
  job->set_dataset("default");
  // Out of order on purpose: the report lists ranks by rank.
  auto* r1 = job->add_ranks();
  r1->set_rank(1);
  r1->set_epoch(3);
  r1->set_next_batch(1);
  r1->set_lag_batches(1);
  r1->set_streaming(false);
  r1->set_batches_sent(7);
  auto* r0 = job->add_ranks();
  r0->set_rank(0);
  r0->set_epoch(3);
  r0->set_next_batch(2);
  r0->set_streaming(true);
  r0->set_batches_sent(8);
  r0->set_window_depth(4);
  return st;
}

TEST(RenderStatusReportTest, HeaderBlockShowsEveryServerFigure) {
  const std::string out = RenderStatusReport(SampleStatus(), "127.0.0.1:7000");
  for (const char* line : {
           "server           127.0.0.1:7000  (shardcast-server 0.1.0)\n",
           "uptime           1h02m03s\n",
           "serving          yes\n",
           "shards dir       /srv/shards\n",
           "shards/samples   4 / 64\n",
           "index            idx-fp-1234\n",
           "skipped samples  1\n",
           "throughput       1.23k images/s, 45.6 MB/s\n",
           "served           12345 images, 1.85 GB\n",
           "streams          2 open, 0 refused (memory), 0 waiting for memory, 0 replaced, 0 "
           "reclaimed idle, 0 prefetched batches given back, --stream-idle-timeout off, "
           "--admission-wait off\n",
           "decode           8 threads, 17 tasks waiting, 2 running, 3 errors, 2 substitutions, 0 "
           "unsupported formats, 0 task exceptions\n",
           // A server from before the batch memory budget: the buffers only.
           "batch memory     25 MB in buffers\n",
           "RSS              123 MB\n",
           "jobs             0 registered, --max-jobs off\n",
           "connections      0 open, 0 refused, --max-connections off, "
           "--max-connections-per-peer off, LISTENER ACCEPTING: NO (restart the server)\n",
           "descriptors      0 open, 0 soft limit (RLIMIT_NOFILE)\n",
       }) {
    EXPECT_NE(out.find(line), std::string::npos) << "missing: " << line << "in:\n" << out;
  }
  EXPECT_NE(out.find("server           127.0.0.1:7000  (shardcast-server 0.1.0)\n"
                     "uptime           1h02m03s\n"
                     "serving          yes\n"
                     "shards dir       /srv/shards\n"),
            std::string::npos)
      << out;
}

TEST(RenderStatusReportTest, DecodeMemoryAndRefusedImages) {
  shardcast::v1::GetStatusResponse st = SampleStatus();
  st.set_num_classes(1000);
  st.set_decode_memory_limit_bytes(2000000000);
  st.set_decode_memory_in_use_bytes(500000000);
  st.set_decode_memory_peak_bytes(1500000000);
  st.set_decode_memory_waits(12);
  st.set_images_over_decode_memory(2);
  st.set_images_over_member_limit(3);
  st.set_max_member_bytes(64 << 20);
  st.set_decode_task_exceptions(1);
  const std::string out = RenderStatusReport(st, "h:1");
  for (const char* line : {
           "classes          1000\n",
           "decode memory    --max-decode-memory 2 GB, 500 MB in use, 1.5 GB peak, 12 decodes "
           "waited, 2 images over it (substituted)\n",
           "member limit     --max-member-bytes 67.1 MB, 3 images over it (substituted unread)\n",
           "decode           8 threads, 17 tasks waiting, 2 running, 3 errors, 2 substitutions, 0 "
           "unsupported formats, 1 TASK EXCEPTIONS (see the server log)\n",
       }) {
    EXPECT_NE(out.find(line), std::string::npos) << "missing: " << line << "in:\n" << out;
  }
  // A server older than the decode budget: no such lines.
  const std::string old = RenderStatusReport(SampleStatus(), "h:1");
  EXPECT_EQ(old.find("decode memory"), std::string::npos) << old;
  EXPECT_EQ(old.find("member limit"), std::string::npos) << old;
}

TEST(RenderStatusReportTest, JobsAndRanksTables) {
  const std::string out = RenderStatusReport(SampleStatus(), "h:1");
  EXPECT_NE(out.find("jobs (1):\n"
                     "  JOB    DATASET  WORLD  BATCH  N  SPLIT   FINGERPRINT\n"
                     "  train  default      2     16  2  sample  plan-fp-abcd\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("job train: 2 of 2 ranks registered\n"
                     "  RANK  EPOCH  NEXT / N  LAG  STREAMING  SENT  WINDOW  LAST BATCH  STALLED\n"
                     "     0      3     2 / 2    0  yes           8       4    0.0s ago  -\n"
                     "     1      3     1 / 2    1  no            7       0    0.0s ago  -\n"),
            std::string::npos)
      << out;
}

TEST(RenderStatusReportTest, StalledRanksStandOut) {
  shardcast::v1::GetStatusResponse st = SampleStatus();
  st.set_stall_warn_seconds(30);
  EXPECT_NE(
      RenderStatusReport(st, "h:1").find("stall warning    0 stalled ranks, --stall-warn 30.0s\n"),
      std::string::npos);
  st.set_stalled_ranks(1);
  st.set_index_state("serving");
  st.set_stream_wait_for_batch_seconds(3.5);
  st.set_stream_wait_for_client_seconds(125);
  shardcast::v1::JobStatus* job = st.mutable_jobs(0);
  job->set_stalled_ranks(1);
  for (auto& rank : *job->mutable_ranks()) {
    if (rank.rank() != 1) continue;
    rank.set_stalled(true);
    rank.set_seconds_since_last_batch(42);
  }
  const std::string out = RenderStatusReport(st, "h:1");
  for (const char* line : {
           "serving          yes (index serving)\n",
           "streams waited   3.5s for batches (clients on the server), 2m05s for clients (the "
           "server on them)\n",
           "stall warning    1 STALLED RANKS (no batch for --stall-warn while a peer is ahead: a "
           "DDP hang in the making), --stall-warn 30.0s\n",
           "job train: 2 of 2 ranks registered; 1 STALLED (no batch for --stall-warn while peers "
           "are ahead: a DDP hang in the making)\n",
           "     1      3     1 / 2    1  no            7       0   42.0s ago  STALLED\n",
       }) {
    EXPECT_NE(out.find(line), std::string::npos) << "missing: " << line << "in:\n" << out;
  }
  // Off: said so.
  st.set_stall_warn_seconds(0);
  st.set_stalled_ranks(0);
  EXPECT_NE(
      RenderStatusReport(st, "h:1").find("stall warning    0 stalled ranks, --stall-warn off\n"),
      std::string::npos);
}

TEST(RenderStatusReportTest, AJobWithFieldsSaysWhatItLeftOut) {
  shardcast::v1::GetStatusResponse st = SampleStatus();
  EXPECT_EQ(RenderStatusReport(st, "h:1").find("fields:"), std::string::npos);
  shardcast::v1::JobStatus* job = st.mutable_jobs(0);
  job->add_fields("txt");
  job->add_fields("json?");
  job->set_image(false);
  std::string out = RenderStatusReport(st, "h:1");
  EXPECT_NE(out.find("job train: 2 of 2 ranks registered\n  fields: txt,json? (no image); every "
                     "sample served\n"),
            std::string::npos)
      << out;
  job->set_image(true);
  auto* missing = job->add_left_out();
  missing->set_reason("missing required field 'txt'");
  missing->set_count(12);
  auto* large = job->add_left_out();
  large->set_reason("member 'txt' over --max-member-bytes (1048576 bytes)");
  large->set_count(1);
  out = RenderStatusReport(st, "h:1");
  EXPECT_NE(out.find("  fields: txt,json? (and the image); left out: 12 missing required field "
                     "'txt', 1 member 'txt' over --max-member-bytes (1048576 bytes)\n"),
            std::string::npos)
      << out;
}

TEST(RenderStatusReportTest, AJobWithEncodedDeliverySaysTheTrainerDecodes) {
  shardcast::v1::GetStatusResponse st = SampleStatus();
  EXPECT_EQ(RenderStatusReport(st, "h:1").find("delivery:"), std::string::npos);
  st.mutable_jobs(0)->set_delivery(shardcast::v1::IMAGE_DELIVERY_ENCODED);
  const std::string out = RenderStatusReport(st, "h:1");
  EXPECT_NE(out.find("job train: 2 of 2 ranks registered\n  delivery: encoded (images sent as "
                     "stored with their crops; the trainer decodes)\n"),
            std::string::npos)
      << out;
}

TEST(RenderStatusReportTest, DatasetsTableWithStateAndError) {
  shardcast::v1::GetStatusResponse st = SampleStatus();
  auto* train = st.add_datasets();
  train->set_name("default");
  train->set_dir("/srv/shards");
  train->set_state(shardcast::v1::DatasetStatus::SERVING);
  train->set_num_shards(4);
  train->set_num_samples(64);
  train->set_num_classes(5);
  train->set_skipped_samples(1);
  auto* val = st.add_datasets();
  val->set_name("val");
  val->set_dir("/srv/val");
  val->set_state(shardcast::v1::DatasetStatus::FAILED);
  val->set_error("no shards in /srv/val");
  const std::string out = RenderStatusReport(st, "h:1");
  EXPECT_NE(out.find("datasets (2):\n"
                     "  DATASET  STATE    SHARDS  SAMPLES  CLASSES  SKIPPED  DIR\n"
                     "  default  serving       4       64        5        1  /srv/shards\n"
                     "  val      FAILED        -        -        -        -  /srv/val\n"
                     "  val: no shards in /srv/val\n"),
            std::string::npos)
      << out;
  // A server from before named datasets sends none: no table.
  EXPECT_EQ(RenderStatusReport(SampleStatus(), "h:1").find("datasets ("), std::string::npos);
}

TEST(RenderStatusReportTest, BatchMemoryBudgetAndTruncatedLists) {
  shardcast::v1::GetStatusResponse st = SampleStatus();
  st.set_batch_memory_limit_bytes(128000000);
  st.set_batch_memory_reserved_bytes(30000000);
  st.set_batch_memory_peak_reserved_bytes(64000000);
  st.set_streams_refused_memory(3);
  st.set_streams_replaced(1);
  st.set_streams_reclaimed_idle(2);
  st.set_batches_given_back(5);
  st.set_total_jobs(105);
  st.set_jobs_truncated(true);
  st.set_max_listed_jobs(100);
  st.mutable_jobs(0)->set_total_ranks(300);
  st.mutable_jobs(0)->set_world_size(300);
  st.mutable_jobs(0)->set_ranks_truncated(true);
  const std::string out = RenderStatusReport(st, "h:1");
  for (const char* line : {
           "batch memory     25 MB in buffers, --max-batch-memory 128 MB, 30 MB reserved, 64 MB "
           "peak reserved\n",
           "streams          2 open, 3 refused (memory), 0 waiting for memory, 1 replaced, 2 "
           "reclaimed idle, 5 prefetched batches given back, --stream-idle-timeout off, "
           "--admission-wait off\n",
           "jobs             105 registered, --max-jobs off, list truncated: yes\n",
           "jobs (1 of 105 listed; the server lists at most 100):\n",
           "job train: 300 of 300 ranks registered, 2 listed\n",
       }) {
    EXPECT_NE(out.find(line), std::string::npos) << "missing: " << line << "in:\n" << out;
  }
  // Under a budget, nothing reserved is a figure too (only a server without one, above,
  // leaves the budget's figures out).
  st.set_batch_memory_reserved_bytes(0);
  const std::string idle = RenderStatusReport(st, "h:1");
  EXPECT_NE(idle.find("batch memory     25 MB in buffers, --max-batch-memory 128 MB, 0 B reserved, "
                      "64 MB peak reserved\n"),
            std::string::npos)
      << idle;
}

TEST(RenderStatusReportTest, SkippedAndChangedShardsAreListed) {
  shardcast::v1::GetStatusResponse st = SampleStatus();
  st.set_max_listed_shard_problems(100);
  st.set_total_skipped_shards(1);
  auto* skipped = st.add_skipped_shards();
  skipped->set_path("zzz.tar");
  skipped->set_reason("empty file (0 bytes)");
  st.set_total_changed_shards(102);
  for (int i = 0; i < 100; ++i) {
    auto* changed = st.add_changed_shards();
    changed->set_path(absl::StrCat("shard-", i, ".tar"));
    changed->set_reason("size 10 -> 20 bytes");
  }
  const std::string out = RenderStatusReport(st, "h:1");
  for (const char* line : {
           "shard problems   1 skipped, 102 CHANGED (streams reading them fail; restart to "
           "re-index), 0 unreadable (errors of the host), 0 reads retried\n",
           "\nskipped shards (1):\n  zzz.tar: empty file (0 bytes)\n",
           "\nchanged since indexing (102), 100 listed; the server lists at most 100:\n"
           "  shard-0.tar: size 10 -> 20 bytes\n",
       }) {
    EXPECT_NE(out.find(line), std::string::npos) << "missing: " << line << "in:\n" << out;
  }
  // None: a zero, and no list.
  const std::string clean = RenderStatusReport(SampleStatus(), "h:1");
  EXPECT_NE(clean.find("shard problems   0 skipped, 0 changed, 0 unreadable (errors of the host), "
                       "0 reads retried\n"),
            std::string::npos)
      << clean;
  EXPECT_EQ(clean.find("changed since indexing"), std::string::npos) << clean;
}

TEST(RenderStatusReportTest, ShardProblemsNameTheirDatasetWhenTheServerHasSeveral) {
  shardcast::v1::GetStatusResponse st = SampleStatus();
  st.add_datasets()->set_name("default");
  st.add_datasets()->set_name("val");
  st.set_max_listed_shard_problems(100);
  st.set_total_changed_shards(1);
  auto* changed = st.add_changed_shards();
  changed->set_path("shard-0.tar");
  changed->set_reason("size 10 -> 11 bytes");
  changed->set_dataset("val");
  const std::string out = RenderStatusReport(st, "h:1");
  EXPECT_NE(out.find("\nchanged since indexing (1):\n  val: shard-0.tar: size 10 -> 11 bytes\n"),
            std::string::npos)
      << out;
}

TEST(RenderStatusReportTest, NoJobsAndEmptyReply) {
  shardcast::v1::GetStatusResponse st;
  const std::string out = RenderStatusReport(st, "h:1");
  EXPECT_NE(out.find("serving          no\n"), std::string::npos) << out;
  EXPECT_NE(out.find("index            -\n"), std::string::npos) << out;
  EXPECT_NE(out.find("jobs: none registered\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("RANK"), std::string::npos) << out;
}

// Every figure of the table of the reply's figures (proto/status_fields.h) shows in the
// report: with all of them set, changing any one changes the text.
TEST(RenderStatusReportTest, EveryFigureOfTheTableShows) {
  using google::protobuf::FieldDescriptor;
  const auto set = [](shardcast::v1::GetStatusResponse* st, const StatusField& row, bool high) {
    const FieldDescriptor* field = StatusFieldDescriptor(row);
    const google::protobuf::Reflection* reflection = st->GetReflection();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        reflection->SetInt32(st, field, high ? 9 : 7);
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        reflection->SetInt64(st, field, high ? 9 : 7);
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        reflection->SetDouble(st, field, high ? 9 : 7);
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        reflection->SetBool(st, field, high);
        break;
      default:
        ADD_FAILURE() << row.field << ": a type this test does not set";
    }
  };
  shardcast::v1::GetStatusResponse base = SampleStatus();
  for (const StatusField& row : StatusFields()) {
    ASSERT_NE(StatusFieldDescriptor(row), nullptr) << row.field;
    set(&base, row, true);
  }
  std::vector<std::string> unseen;
  for (const StatusField& row : StatusFields()) {
    shardcast::v1::GetStatusResponse other = base;
    set(&other, row, false);
    const std::string high = RenderStatusReport(base, "h:1");
    if (high == RenderStatusReport(other, "h:1")) unseen.push_back(row.field);
    EXPECT_NE(high.find(absl::StrCat("\n", row.section)), std::string::npos) << row.field;
  }
  EXPECT_TRUE(unseen.empty()) << "figures the report does not show: "
                              << absl::StrJoin(unseen, ", ");
}

TEST(StatusToJsonTest, IncludesDefaultFieldsAndRoundTrips) {
  shardcast::v1::GetStatusResponse st = SampleStatus();
  st.set_decode_errors(0);  // a zero must still be printed
  absl::StatusOr<std::string> json = StatusToJson(st);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_NE(json->find("\"decodeErrors\": \"0\""), std::string::npos) << *json;
  EXPECT_NE(json->find("\"serving\": true"), std::string::npos) << *json;
  EXPECT_NE(json->find("\"split\": \"SPLIT_SAMPLE\""), std::string::npos) << *json;

  shardcast::v1::GetStatusResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*json, &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), st.SerializeAsString());
}

}  // namespace
}  // namespace shardcast::ctl

// Every figure of the status reply reaches /metrics: the test walks each numeric and
// boolean field of GetStatusResponse (and of the jobs, ranks and datasets it lists) by
// protobuf reflection, gives it a value no other field has, renders the exposition and
// looks for that value. A server-level field added to the reply without a row in the
// table of its figures (proto/status_fields.cc, which /metrics renders), or a field of a
// listed message forgotten in metrics_text.cc, fails here, named. Fields left out on
// purpose are listed with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"
#include "proto/status_fields.h"
#include "server/status/metrics_text.h"

namespace shardcast::server {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Not in /metrics, on purpose: full field name -> why.
const std::map<std::string, std::string>& Exempt() {
  static const auto* exempt = new std::map<std::string, std::string>{
      // The bounds of the reply's own lists: they shape the reply, they measure nothing.
      {"shardcast.v1.GetStatusResponse.max_listed_jobs", "bounds the reply"},
      {"shardcast.v1.GetStatusResponse.max_listed_ranks", "bounds the reply"},
      {"shardcast.v1.GetStatusResponse.max_listed_shard_problems", "bounds the reply"},
      // The primary dataset's copies of a dataset's figures, which /metrics has per
      // dataset (shardcast_index_*{dataset=...}).
      {"shardcast.v1.GetStatusResponse.num_shards", "per dataset"},
      {"shardcast.v1.GetStatusResponse.num_samples", "per dataset"},
      {"shardcast.v1.GetStatusResponse.num_classes", "per dataset"},
      {"shardcast.v1.GetStatusResponse.skipped_samples", "per dataset"},
      {"shardcast.v1.DatasetStatus.num_classes", "a property of the data, in status"},
      // Per-dataset totals whose sum /metrics gives per dataset and problem.
      {"shardcast.v1.GetStatusResponse.total_skipped_shards", "per dataset"},
      {"shardcast.v1.GetStatusResponse.total_changed_shards", "per dataset"},
      {"shardcast.v1.GetStatusResponse.total_unreadable_shards", "per dataset"},
      {"shardcast.v1.JobStatus.ranks_truncated", "bounds the reply"},
      // Recent rates: Prometheus derives them from the _total counters (rate()).
      {"shardcast.v1.GetStatusResponse.images_per_second", "rate() of images_served_total"},
      {"shardcast.v1.GetStatusResponse.bytes_per_second", "rate() of bytes_served_total"},
      // Rank identity and position, rendered other than as a value of their own.
      {"shardcast.v1.RankStatus.rank", "the rank=\"N\" label"},
      {"shardcast.v1.RankStatus.next_batch",
       "in shardcast_rank_position_batches (epoch * n + next_batch)"},
  };
  return *exempt;
}

// Fills every numeric/bool field of `message` (recursing into one element of each
// repeated or singular message field) with values no other field has; records
// name -> the text that value renders as.
void Fill(Message* message, double* next, std::map<std::string, std::vector<std::string>>* wanted) {
  const google::protobuf::Reflection* reflection = message->GetReflection();
  const google::protobuf::Descriptor* descriptor = message->GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      Message* child = field->is_repeated() ? reflection->AddMessage(message, field)
                                            : reflection->MutableMessage(message, field);
      Fill(child, next, wanted);
      continue;
    }
    if (field->is_repeated()) continue;  // shape lists (Batch has them; status does not)
    const double value = (*next += 1);
    std::vector<std::string> renderings = {absl::StrCat(static_cast<int64_t>(value))};
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        reflection->SetInt32(message, field, static_cast<int32_t>(value));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        reflection->SetInt64(message, field, static_cast<int64_t>(value));
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        reflection->SetUInt32(message, field, static_cast<uint32_t>(value));
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        reflection->SetUInt64(message, field, static_cast<uint64_t>(value));
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT: {
        // A fraction, so that it cannot be mistaken for another field's integer.
        const double fractional = value + 0.5;
        if (field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
          reflection->SetDouble(message, field, fractional);
        } else {
          reflection->SetFloat(message, field, static_cast<float>(fractional));
        }
        renderings = {absl::StrFormat("%.15g", fractional)};
        break;
      }
      case FieldDescriptor::CPPTYPE_BOOL:
      case FieldDescriptor::CPPTYPE_ENUM:
      case FieldDescriptor::CPPTYPE_STRING:
      case FieldDescriptor::CPPTYPE_MESSAGE:
        continue;  // bools and enums: below; strings are labels, not figures
    }
    (*wanted)[field->full_name()] = renderings;
  }
}

// The sample values of an exposition text.
std::multiset<std::string> SampleValues(const std::string& text) {
  std::multiset<std::string> values;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    values.insert(std::string(line.substr(space + 1)));
  }
  return values;
}

TEST(StatusMetricsDriftTest, EveryNumericStatusFieldIsInTheMetrics) {
  MetricsSnapshot snapshot;
  double next = 1000000;
  std::map<std::string, std::vector<std::string>> wanted;
  Fill(&snapshot.status, &next, &wanted);
  const std::multiset<std::string> values = SampleValues(RenderPrometheusText(snapshot));

  std::vector<std::string> missing;
  for (const auto& [name, renderings] : wanted) {
    if (Exempt().count(name) > 0) continue;
    bool found = false;
    for (const std::string& rendering : renderings) found |= values.count(rendering) > 0;
    if (!found) missing.push_back(name);
  }
  EXPECT_TRUE(missing.empty()) << "status fields not in /metrics (a server-level figure: "
                                  "a row with a family in proto/status_fields.cc; of a job, "
                                  "rank or dataset: a series in server/status/metrics_text.cc; or "
                                  "an exemption here with the reason):\n  "
                               << absl::StrJoin(missing, "\n  ");
}

// The server-level figures the table of the reply's figures leaves out of /metrics
// (proto/status_fields.cc: no family, or rendered elsewhere) are exactly the ones
// exempted here: the two lists give the same reasons, neither drifts from the other.
TEST(StatusMetricsDriftTest, TheTableLeavesOutExactlyTheExemptServerFields) {
  const std::string prefix = "shardcast.v1.GetStatusResponse.";
  std::set<std::string> left_out;
  for (const StatusField& row : StatusFields()) {
    if (row.type == MetricType::kNone) left_out.insert(prefix + row.field);
  }
  for (const StatusFieldElsewhere& other : StatusFieldsRenderedElsewhere()) {
    const google::protobuf::FieldDescriptor* field =
        v1::GetStatusResponse::descriptor()->FindFieldByName(other.field);
    ASSERT_NE(field, nullptr) << other.field;
    // Text fields are labels, not values: the numeric check never looks for them.
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_STRING) left_out.insert(prefix + other.field);
  }
  std::set<std::string> exempt;
  for (const auto& [name, why] : Exempt()) {
    if (absl::StartsWith(name, prefix)) exempt.insert(name);
  }
  EXPECT_EQ(left_out, exempt);
}

// The boolean figures, one at a time: each must change the exposition.
TEST(StatusMetricsDriftTest, EveryBooleanStatusFieldChangesTheMetrics) {
  MetricsSnapshot base;
  double next = 1000000;
  std::map<std::string, std::vector<std::string>> unused;
  Fill(&base.status, &next, &unused);
  std::vector<std::string> missing;
  std::vector<std::pair<Message*, const FieldDescriptor*>> fields;
  std::function<void(Message*)> collect = [&](Message* message) {
    const google::protobuf::Descriptor* descriptor = message->GetDescriptor();
    for (int i = 0; i < descriptor->field_count(); ++i) {
      const FieldDescriptor* field = descriptor->field(i);
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_BOOL && !field->is_repeated()) {
        fields.emplace_back(message, field);
      } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        const google::protobuf::Reflection* reflection = message->GetReflection();
        if (field->is_repeated()) {
          for (int k = 0; k < reflection->FieldSize(*message, field); ++k) {
            collect(reflection->MutableRepeatedMessage(message, field, k));
          }
        } else {
          collect(reflection->MutableMessage(message, field));
        }
      }
    }
  };
  collect(&base.status);
  for (const auto& [message, field] : fields) {
    if (Exempt().count(field->full_name()) > 0) continue;
    const google::protobuf::Reflection* reflection = message->GetReflection();
    reflection->SetBool(message, field, false);
    const std::string off = RenderPrometheusText(base);
    reflection->SetBool(message, field, true);
    const std::string on = RenderPrometheusText(base);
    if (off == on) missing.push_back(field->full_name());
  }
  EXPECT_TRUE(missing.empty()) << "boolean status fields that /metrics does not show:\n  "
                               << absl::StrJoin(missing, "\n  ");
}

}  // namespace
}  // namespace shardcast::server

// The table of the status reply's server-level figures (proto/status_fields.h) against
// the proto: every row names a scalar field of GetStatusResponse, every scalar field
// has a row or is rendered elsewhere on purpose, and the metric names keep the
// Prometheus conventions. A field added to GetStatusResponse without a row fails here,
// named.
#include "proto/status_fields.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace shardcast {
namespace {

namespace v1 = ::shardcast::v1;
using google::protobuf::FieldDescriptor;

bool IsNumericOrBool(const FieldDescriptor* field) {
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_BOOL:
      return true;
    default:
      return false;
  }
}

TEST(StatusFieldsTest, EveryRowNamesAScalarFieldOfGetStatusResponse) {
  std::set<std::string> seen;
  for (const StatusField& row : StatusFields()) {
    SCOPED_TRACE(row.field);
    EXPECT_TRUE(seen.insert(row.field).second) << "two rows for " << row.field;
    const FieldDescriptor* field = StatusFieldDescriptor(row);
    ASSERT_NE(field, nullptr) << "GetStatusResponse has no field " << row.field;
    EXPECT_FALSE(field->is_repeated());
    EXPECT_TRUE(IsNumericOrBool(field)) << field->type_name();
    // yes/no exactly for bools; durations and rates are doubles.
    EXPECT_EQ(row.unit == StatusUnit::kYesNo, field->cpp_type() == FieldDescriptor::CPPTYPE_BOOL);
    if (row.unit == StatusUnit::kSeconds || row.unit == StatusUnit::kRate ||
        row.unit == StatusUnit::kByteRate) {
      EXPECT_EQ(field->cpp_type(), FieldDescriptor::CPPTYPE_DOUBLE);
    }
  }
}

TEST(StatusFieldsTest, EveryScalarFieldHasARowOrIsRenderedElsewhere) {
  std::map<std::string, int> listed;
  for (const StatusField& row : StatusFields()) ++listed[row.field];
  for (const StatusFieldElsewhere& other : StatusFieldsRenderedElsewhere()) {
    EXPECT_NE(v1::GetStatusResponse::descriptor()->FindFieldByName(other.field), nullptr)
        << "rendered elsewhere, but GetStatusResponse has no field " << other.field;
    EXPECT_FALSE(std::string(other.where).empty()) << other.field;
    ++listed[other.field];
  }
  std::vector<std::string> missing;
  const google::protobuf::Descriptor* descriptor = v1::GetStatusResponse::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (field->is_repeated() || field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) continue;
    const int n = listed[field->name()];
    if (n == 0) missing.push_back(field->name());
    EXPECT_LE(n, 1) << field->name() << " is both a row and rendered elsewhere";
  }
  EXPECT_TRUE(missing.empty())
      << "scalar fields of GetStatusResponse without a row in proto/status_fields.cc (add one: "
         "/metrics and shardcast-ctl status then show it):\n  "
      << absl::StrJoin(missing, "\n  ");
}

bool IsMetricName(const std::string& name) {
  if (name.empty() || absl::ascii_isdigit(name[0])) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != ':') return false;
  }
  return true;
}

TEST(StatusFieldsTest, MetricsKeepThePrometheusConventions) {
  std::set<std::string> names;
  for (const StatusField& row : StatusFields()) {
    const std::string metric = row.metric;
    SCOPED_TRACE(row.field);
    EXPECT_FALSE(std::string(row.help).empty()) << "HELP text, or why it is not in /metrics";
    if (row.type == MetricType::kNone) {
      EXPECT_TRUE(metric.empty()) << metric;
      continue;
    }
    EXPECT_TRUE(IsMetricName(metric)) << metric;
    EXPECT_TRUE(absl::StartsWith(metric, "shardcast_")) << metric;
    EXPECT_TRUE(names.insert(metric).second) << "two rows for " << metric;
    EXPECT_EQ(absl::EndsWith(metric, "_total"), row.type == MetricType::kCounter) << metric;
    // Base units, named.
    if (row.unit == StatusUnit::kBytes) {
      EXPECT_TRUE(absl::StrContains(metric, "_bytes")) << metric;
    }
    if (row.unit == StatusUnit::kSeconds) {
      EXPECT_TRUE(absl::StrContains(metric, "_seconds")) << metric;
    }
  }
}

TEST(StatusFieldsTest, CtlLinesAreWhole) {
  std::set<std::string> done;
  std::string current;
  for (const StatusField& row : StatusFields()) {
    SCOPED_TRACE(row.field);
    const std::string section = row.section;
    ASSERT_FALSE(section.empty());
    // ctl pads titles to 16 columns; the rows of a line are consecutive.
    EXPECT_LE(section.size(), 16u) << section;
    if (section != current) {
      EXPECT_TRUE(done.insert(section).second)
          << "the rows of `" << section << "` are not consecutive";
      current = section;
    }
    const std::string label = row.label;
    const size_t at = label.find("{}");
    if (at != std::string::npos) {
      EXPECT_EQ(label.find("{}", at + 1), std::string::npos) << label;
    }
    if (row.alarm != nullptr) {
      EXPECT_FALSE(std::string(row.alarm).empty());
    }
  }
}

// Each row's value read back as set, whatever the field's type.
TEST(StatusFieldsTest, ReadsEveryFigureByReflection) {
  v1::GetStatusResponse status;
  const google::protobuf::Reflection* reflection = status.GetReflection();
  std::map<std::string, double> set;
  int64_t next = 3;
  for (const StatusField& row : StatusFields()) {
    const FieldDescriptor* field = StatusFieldDescriptor(row);
    ASSERT_NE(field, nullptr) << row.field;
    ++next;
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        reflection->SetInt32(&status, field, static_cast<int32_t>(next));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        reflection->SetInt64(&status, field, next << 33);  // beyond 32 bits
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        reflection->SetDouble(&status, field, next + 0.25);
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        reflection->SetBool(&status, field, true);
        break;
      default:
        FAIL() << row.field << ": a type this test does not set";
    }
  }
  for (const StatusField& row : StatusFields()) {
    SCOPED_TRACE(row.field);
    const FieldDescriptor* field = StatusFieldDescriptor(row);
    const StatusFieldValue value = ReadStatusField(status, row);
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        ASSERT_TRUE(value.integer.has_value());
        EXPECT_EQ(*value.integer, reflection->GetInt32(status, field));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        ASSERT_TRUE(value.integer.has_value());
        EXPECT_EQ(*value.integer, reflection->GetInt64(status, field));
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        EXPECT_FALSE(value.integer.has_value());
        EXPECT_EQ(value.number, reflection->GetDouble(status, field));
        continue;
      case FieldDescriptor::CPPTYPE_BOOL:
        EXPECT_EQ(value.integer, 1);
        break;
      default:
        break;
    }
    EXPECT_EQ(value.number, static_cast<double>(*value.integer));
  }
  // A row naming no field reads as NaN, not as some other field.
  StatusField bogus;
  bogus.field = "no_such_field";
  EXPECT_TRUE(std::isnan(ReadStatusField(status, bogus).number));
  EXPECT_FALSE(ReadStatusField(status, bogus).integer.has_value());
}

}  // namespace
}  // namespace shardcast

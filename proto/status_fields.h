// The server-level figures of the GetStatus reply, described once.
//
// Every scalar (numeric or bool) field of shardcast.v1.GetStatusResponse has one row
// here: its Prometheus family (server/status/metrics_text.cc renders those /metrics families
// from this table) and how `shardcast-ctl status` prints it (client/ctl/status_report.cc
// renders its header block from this table). Both read the value by protobuf
// reflection, by field name. A new server-level figure is therefore: the proto field,
// the code that counts it and fills it into the reply, and one row in status_fields.cc;
// tests/proto/status_fields_test.cc fails while the proto has a scalar field that is
// neither a row nor in StatusFieldsRenderedElsewhere().
//
// Repeated messages (jobs, ranks, datasets, shard problems) carry labels and stay
// hand-written in both renderers.
#ifndef SHARDCAST_PROTO_STATUS_FIELDS_H_
#define SHARDCAST_PROTO_STATUS_FIELDS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "shardcast/v1/shardcast.pb.h"

namespace google::protobuf {
class FieldDescriptor;
}  // namespace google::protobuf

namespace shardcast {

// The Prometheus type of a figure's family; kNone: not in /metrics (see `help`).
enum class MetricType { kNone, kCounter, kGauge };

// How shardcast-ctl prints a value: kCount an exact integer ("12345"), kBytes decimal
// SI ("1.85 GB"), kSeconds a duration ("2m05s"), kRate a count per second with SI
// prefix ("1.23k"), kByteRate bytes per second ("45.6 MB/s"), kYesNo "yes"/"no".
enum class StatusUnit { kCount, kBytes, kSeconds, kRate, kByteRate, kYesNo };

struct StatusField {
  // The GetStatusResponse field (its proto name).
  const char* field = "";

  // /metrics: the family's name (shardcast_ prefix, base units: _bytes, _seconds;
  // counters end in _total), its type and its HELP text. Without a family (type kNone,
  // metric ""), `help` says why the figure is not in /metrics.
  const char* metric = "";
  MetricType type = MetricType::kNone;
  const char* help = "";

  // shardcast-ctl status: the header line the figure is printed on (its title; the
  // rows of one section are consecutive, the lines come in the order of the table),
  // and the words around the value: "{}" marks where the value goes ("--max-jobs {}"),
  // else they follow it ("open" -> "2 open"; "" -> the value alone).
  const char* section = "";
  const char* label = "";
  StatusUnit unit = StatusUnit::kCount;
  // What ctl prints when the value is 0 (kYesNo: no) instead of the value and label:
  // nullptr prints the value as any other, "" leaves the figure out of its line.
  const char* if_zero = nullptr;
  // When the value is not 0 (kYesNo: when it is no), ctl prints the figure upper-case
  // and this note after it in parentheses: it wants the operator's attention.
  const char* alarm = nullptr;
  // When this figure is 0, ctl leaves it and the rest of its line out (the figures
  // before it stay; a line left without figures is not printed): a server from before
  // the feature sends 0 for all of them.
  bool gates_rest = false;

  // Builders, for a readable table (status_fields.cc).
  constexpr StatusField Ctl(const char* section_title, const char* words,
                            StatusUnit value_unit) const {
    StatusField f = *this;
    f.section = section_title;
    f.label = words;
    f.unit = value_unit;
    return f;
  }
  constexpr StatusField IfZero(const char* text) const {
    StatusField f = *this;
    f.if_zero = text;
    return f;
  }
  constexpr StatusField Alarm(const char* note) const {
    StatusField f = *this;
    f.alarm = note;
    return f;
  }
  constexpr StatusField GatesRest() const {
    StatusField f = *this;
    f.gates_rest = true;
    return f;
  }
};

// The table, in the order ctl prints its lines (and /metrics its families).
const std::vector<StatusField>& StatusFields();

// Scalar fields of GetStatusResponse that are not in the table, each with where it is
// rendered instead (strings are labels or text, the single-dataset fields have
// per-dataset figures, the bounds of the reply's lists are printed with the lists).
struct StatusFieldElsewhere {
  const char* field;
  const char* where;
};
const std::vector<StatusFieldElsewhere>& StatusFieldsRenderedElsewhere();

// The descriptor of `row.field` in GetStatusResponse; nullptr if it has none (the
// unit test makes sure every row has one).
const google::protobuf::FieldDescriptor* StatusFieldDescriptor(const StatusField& row);

// A figure's value: `number` for every type (bools 0 or 1; NaN when the row names no
// scalar field), and the integer exactly for integer and bool fields.
struct StatusFieldValue {
  double number = 0;
  std::optional<int64_t> integer;
};
StatusFieldValue ReadStatusField(const shardcast::v1::GetStatusResponse& status,
                                 const StatusField& row);

// A dataset's state as every renderer names it: "indexing", "serving", "failed", or
// "unknown" for a value this build does not know (a newer server's).
const char* DatasetStateName(shardcast::v1::DatasetStatus::State state);

}  // namespace shardcast

#endif  // SHARDCAST_PROTO_STATUS_FIELDS_H_

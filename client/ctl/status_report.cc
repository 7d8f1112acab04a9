// Text and JSON renderings of shardcast-server's GetStatus reply.
#include "client/ctl/status_report.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "proto/status_fields.h"

namespace shardcast::ctl {
namespace {

// `value` with an SI prefix from "", k, M, G, T, P, E and 3 significant digits.
// Returns the number and writes the prefix to *prefix.
std::string ScaleSi(double value, std::string* prefix) {
  static const char* const kPrefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  constexpr int kNumPrefixes = sizeof(kPrefixes) / sizeof(kPrefixes[0]);
  const bool negative = value < 0;
  double v = std::fabs(value);
  int p = 0;
  // 999.5 would print as "1000": switch to the next prefix before rounding does.
  while (v >= 999.5 && p + 1 < kNumPrefixes) {
    v /= 1000;
    ++p;
  }
  *prefix = kPrefixes[p];
  std::string digits;
  if (p == 0 && v == std::floor(v)) {
    digits = absl::StrFormat("%.0f", v);
  } else {
    const int decimals = v < 9.995 ? 2 : v < 99.95 ? 1 : 0;
    digits = absl::StrFormat("%.*f", decimals, v);
    if (absl::StrContains(digits, '.')) {
      while (digits.back() == '0') digits.pop_back();
      if (digits.back() == '.') digits.pop_back();
    }
  }
  return negative ? absl::StrCat("-", digits) : digits;
}

std::string YesNo(bool b) { return b ? "yes" : "no"; }

// "SPLIT_SAMPLE" -> "sample"; a value this build does not know prints as its number.
std::string SplitName(shardcast::v1::Split split) {
  std::string name = shardcast::v1::Split_Name(split);
  if (name.empty()) return absl::StrCat(static_cast<int>(split));
  absl::string_view short_name = name;
  absl::ConsumePrefix(&short_name, "SPLIT_");
  return absl::AsciiStrToLower(short_name);
}

}  // namespace

std::string FormatCount(double value) {
  if (!std::isfinite(value)) return "?";
  std::string prefix;
  std::string digits = ScaleSi(value, &prefix);
  return digits + prefix;
}

std::string FormatBytes(double bytes) {
  if (!std::isfinite(bytes)) return "?";
  std::string prefix;
  std::string digits = ScaleSi(bytes, &prefix);
  return absl::StrCat(digits, " ", prefix, "B");
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds < 60) return absl::StrFormat("%.1fs", seconds);
  const int64_t s = static_cast<int64_t>(seconds);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm%02ds", s / 3600, s / 60 % 60, s % 60);
  return absl::StrFormat("%dd%02dh%02dm", s / 86400, s / 3600 % 24, s / 60 % 60);
}

TextTable::TextTable(std::vector<std::string> headers, std::vector<bool> right_aligned)
    : headers_(std::move(headers)), right_aligned_(std::move(right_aligned)) {
  right_aligned_.resize(headers_.size(), false);
}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string TextTable::Render(const std::string& indent) const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto append_line = [&](const std::vector<std::string>& cells) {
    std::string line = indent;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) line += "  ";
      const std::string pad(width[c] - cells[c].size(), ' ');
      line += right_aligned_[c] ? pad + cells[c] : cells[c] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  append_line(headers_);
  for (const auto& row : rows_) append_line(row);
  return out;
}

namespace {

// "skipped shards (2):" and one indented "path: reason" line per listed shard, as
// "dataset: path: reason" when the server has several datasets (the lists hold every
// dataset's shards).
void AppendShardProblems(
    absl::string_view title,
    const google::protobuf::RepeatedPtrField<shardcast::v1::ShardProblem>& list, int32_t total,
    int32_t max_listed, bool name_datasets, std::string* out) {
  if (list.empty()) return;
  absl::StrAppend(
      out, "\n", title, " (", total, ")",
      total > list.size()
          ? absl::StrCat(", ", list.size(), " listed; the server lists at most ", max_listed)
          : "",
      ":\n");
  for (const auto& shard : list) {
    const std::string dataset =
        name_datasets && !shard.dataset().empty() ? absl::StrCat(shard.dataset(), ": ") : "";
    absl::StrAppend(out, "  ", dataset, shard.path(), ": ", shard.reason(), "\n");
  }
}

// One figure as ctl prints it, without its label.
std::string FormatFigure(StatusUnit unit, const StatusFieldValue& value) {
  switch (unit) {
    case StatusUnit::kCount:
      return value.integer.has_value() ? absl::StrCat(*value.integer) : FormatCount(value.number);
    case StatusUnit::kBytes:
      return FormatBytes(value.number);
    case StatusUnit::kSeconds:
      return FormatDuration(value.number);
    case StatusUnit::kRate:
      return FormatCount(value.number);
    case StatusUnit::kByteRate:
      return absl::StrCat(FormatBytes(value.number), "/s");
    case StatusUnit::kYesNo:
      return YesNo(value.number != 0);
  }
  return "?";
}

// The figure with its label: "2 open", "--max-jobs 5", "LISTENER ACCEPTING: NO (restart
// the server)"; nullopt when the row leaves a zero out.
std::optional<std::string> FigureText(const StatusField& row, const StatusFieldValue& value) {
  const bool zero = value.number == 0;
  const bool alarmed = row.alarm != nullptr && (row.unit == StatusUnit::kYesNo ? zero : !zero);
  if (zero && !alarmed && row.if_zero != nullptr) {
    if (*row.if_zero == '\0') return std::nullopt;
    return std::string(row.if_zero);
  }
  const std::string number = FormatFigure(row.unit, value);
  const absl::string_view label = row.label;
  std::string text;
  if (absl::StrContains(label, "{}")) {
    text = absl::StrReplaceAll(label, {{"{}", number}});
  } else {
    text = label.empty() ? number : absl::StrCat(number, " ", label);
  }
  if (!alarmed) return text;
  return absl::StrCat(absl::AsciiStrToUpper(text), " (", row.alarm, ")");
}

// The table's lines, in its order: the figures of a section joined by ", ", then the
// section's note if any. A gating figure that is 0 ends its line there; a line with no
// figure to print is left out. `insert` runs after the section `insert_after` (at the
// end without it).
template <typename Field, typename Insert>
void AppendFigures(const shardcast::v1::GetStatusResponse& st,
                   const std::map<std::string, std::string>& notes, const Field& field,
                   absl::string_view insert_after, const Insert& insert) {
  const std::vector<StatusField>& rows = StatusFields();
  bool inserted = false;
  const auto insert_once = [&] {
    if (!inserted) insert();
    inserted = true;
  };
  for (size_t begin = 0; begin < rows.size();) {
    const std::string section = rows[begin].section;
    size_t end = begin;
    std::vector<std::string> texts;
    bool gated = false;
    for (; end < rows.size() && rows[end].section == section; ++end) {
      const StatusFieldValue value = ReadStatusField(st, rows[end]);
      gated |= rows[end].gates_rest && value.number == 0;
      if (gated) continue;
      if (std::optional<std::string> text = FigureText(rows[end], value)) {
        texts.push_back(*std::move(text));
      }
    }
    begin = end;
    if (!texts.empty()) {
      std::string line = absl::StrJoin(texts, ", ");
      if (auto note = notes.find(section); note != notes.end()) {
        absl::StrAppend(&line, " ", note->second);
      }
      field(section, line);
    }
    if (section == insert_after) insert_once();
  }
  insert_once();
}

// The shared name, with a failed dataset in capitals: it is what the reader must see.
std::string CtlDatasetStateName(shardcast::v1::DatasetStatus::State state) {
  return state == shardcast::v1::DatasetStatus::FAILED ? "FAILED" : DatasetStateName(state);
}

// The datasets table (servers before named datasets send none: nothing is added).
void AppendDatasets(const shardcast::v1::GetStatusResponse& st, std::string* out) {
  if (st.datasets().empty()) return;
  absl::StrAppend(out, "\ndatasets (", st.datasets_size(), "):\n");
  TextTable table({"DATASET", "STATE", "SHARDS", "SAMPLES", "CLASSES", "SKIPPED", "DIR"},
                  {false, false, true, true, true, true, false});
  for (const auto& d : st.datasets()) {
    const bool indexed = d.state() == shardcast::v1::DatasetStatus::SERVING;
    auto number = [indexed](int64_t v) { return indexed ? absl::StrCat(v) : std::string("-"); };
    table.AddRow({d.name(), CtlDatasetStateName(d.state()), number(d.num_shards()),
                  number(d.num_samples()), number(d.num_classes()), number(d.skipped_samples()),
                  d.dir()});
  }
  *out += table.Render("  ");
  for (const auto& d : st.datasets()) {
    if (!d.error().empty()) absl::StrAppend(out, "  ", d.name(), ": ", d.error(), "\n");
  }
}

// "  fields: txt,json? (and the image); left out: 3 missing required field 'txt'"
std::string JobFieldsLine(const shardcast::v1::JobStatus& job) {
  std::string line = absl::StrCat("  fields: ", absl::StrJoin(job.fields(), ","),
                                  job.image() ? " (and the image)" : " (no image)");
  if (job.left_out().empty()) return absl::StrCat(line, "; every sample served\n");
  absl::StrAppend(&line, "; left out:");
  for (const auto& reason : job.left_out()) {
    absl::StrAppend(&line, &reason == &job.left_out(0) ? " " : ", ", reason.count(), " ",
                    reason.reason());
  }
  return absl::StrCat(line, "\n");
}

}  // namespace

std::string RenderStatusReport(const shardcast::v1::GetStatusResponse& st,
                               const std::string& server) {
  std::string out;
  auto field = [&out](absl::string_view name, absl::string_view value) {
    absl::StrAppendFormat(&out, "%-16s %s\n", name, value);
  };
  field("server", absl::StrCat(server, "  (shardcast-server ",
                               st.version().empty() ? "?" : st.version(), ")"));
  // The reply's single-dataset fields (the dataset "default", or the first one), after
  // the `serving` line.
  const auto dataset_lines = [&] {
    field("shards dir", st.shards_dir());
    field("shards/samples", absl::StrCat(st.num_shards(), " / ", st.num_samples()));
    if (st.num_classes() > 0) field("classes", absl::StrCat(st.num_classes()));
    field("index", st.index_fingerprint().empty() ? "-" : st.index_fingerprint());
    field("skipped samples", absl::StrCat(st.skipped_samples()));
  };
  // Every server-level figure, a line per section of the table (proto/status_fields.h);
  // the text fields of the reply go with the line they explain.
  std::map<std::string, std::string> notes;
  if (!st.index_state().empty()) notes["serving"] = absl::StrCat("(index ", st.index_state(), ")");
  AppendFigures(st, notes, field, "serving", dataset_lines);
  const bool name_datasets = st.datasets_size() > 1;
  AppendShardProblems("skipped shards", st.skipped_shards(), st.total_skipped_shards(),
                      st.max_listed_shard_problems(), name_datasets, &out);
  AppendShardProblems("changed since indexing", st.changed_shards(), st.total_changed_shards(),
                      st.max_listed_shard_problems(), name_datasets, &out);
  AppendShardProblems("unreadable now (the host failed their last read)", st.unreadable_shards(),
                      st.total_unreadable_shards(), st.max_listed_shard_problems(), name_datasets,
                      &out);
  AppendDatasets(st, &out);

  out += "\n";
  if (st.jobs().empty()) {
    out += "jobs: none registered\n";
    return out;
  }
  if (st.jobs_truncated()) {
    absl::StrAppend(&out, "jobs (", st.jobs_size(), " of ", st.total_jobs(),
                    " listed; the server lists at most ", st.max_listed_jobs(), "):\n");
  } else {
    absl::StrAppend(&out, "jobs (", st.jobs_size(), "):\n");
  }
  TextTable jobs({"JOB", "DATASET", "WORLD", "BATCH", "N", "SPLIT", "FINGERPRINT"},
                 {false, false, true, true, true, false, false});
  for (const auto& job : st.jobs()) {
    std::string dataset = job.dataset().empty() ? "-" : job.dataset();
    if (job.mix_size() > 0) {
      dataset = "mix:";
      for (int d = 0; d < job.mix_size(); ++d) {
        absl::StrAppend(&dataset, d > 0 ? "," : "", job.mix(d).name());
      }
    }
    jobs.AddRow({job.job_id(), dataset, absl::StrCat(job.world_size()),
                 absl::StrCat(job.batch_size()), absl::StrCat(job.batches_per_epoch()),
                 SplitName(job.split()), job.job_fingerprint()});
  }
  out += jobs.Render("  ");

  for (const auto& job : st.jobs()) {
    absl::StrAppend(
        &out, "\njob ", job.job_id(), ": ", std::max(job.ranks_size(), job.total_ranks()), " of ",
        job.world_size(), " ranks registered",
        job.ranks_truncated() ? absl::StrCat(", ", job.ranks_size(), " listed") : "",
        job.stalled_ranks() > 0
            ? absl::StrCat("; ", job.stalled_ranks(),
                           " STALLED (no batch for --stall-warn while peers are ahead: a DDP hang "
                           "in the making)")
            : "",
        "\n");
    if (job.delivery() == shardcast::v1::IMAGE_DELIVERY_ENCODED) {
      out += "  delivery: encoded (images sent as stored with their crops; the trainer decodes)\n";
    }
    if (!job.fields().empty()) out += JobFieldsLine(job);
    if (job.mix_size() > 0) {
      absl::StrAppend(&out, "  mixture of ", job.mix_size(), " datasets, ", job.samples_per_epoch(),
                      " samples per epoch:\n");
      TextTable mix({"DATASET", "WEIGHT", "DRAWN", "PASS", "IN PASS"},
                    {false, true, true, true, true});
      for (const auto& d : job.mix()) {
        mix.AddRow({d.name(), absl::StrFormat("%.4f", d.weight()), absl::StrCat(d.samples_drawn()),
                    absl::StrCat(d.pass()),
                    absl::StrCat(d.pass_position(), " / ", d.num_samples())});
      }
      out += mix.Render("    ");
    }
    if (job.ranks().empty()) continue;
    std::vector<const shardcast::v1::RankStatus*> ranks;
    for (const auto& r : job.ranks()) ranks.push_back(&r);
    std::sort(ranks.begin(), ranks.end(),
              [](const auto* a, const auto* b) { return a->rank() < b->rank(); });
    TextTable table({"RANK", "EPOCH", "NEXT / N", "LAG", "STREAMING", "SENT", "WINDOW",
                     "LAST BATCH", "STALLED"},
                    {true, true, true, true, false, true, true, true, false});
    for (const auto* r : ranks) {
      table.AddRow({absl::StrCat(r->rank()), absl::StrCat(r->epoch()),
                    absl::StrCat(r->next_batch(), " / ", job.batches_per_epoch()),
                    absl::StrCat(r->lag_batches()), YesNo(r->streaming()),
                    absl::StrCat(r->batches_sent()), absl::StrCat(r->window_depth()),
                    absl::StrCat(FormatDuration(r->seconds_since_last_batch()), " ago"),
                    r->stalled() ? "STALLED" : "-"});
    }
    out += table.Render("  ");
  }
  return out;
}

absl::StatusOr<std::string> StatusToJson(const shardcast::v1::GetStatusResponse& status) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  std::string json;
  auto result = google::protobuf::util::MessageToJsonString(status, &json, options);
  if (!result.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot render the status reply as JSON: ", result.ToString()));
  }
  return json;
}

}  // namespace shardcast::ctl

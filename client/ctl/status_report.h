// Renders a shardcast-server GetStatus reply for people (aligned tables, human
// units) or for programs (proto3 JSON), as printed by `shardcast-ctl status`.
#ifndef SHARDCAST_CLIENT_CTL_STATUS_REPORT_H_
#define SHARDCAST_CLIENT_CTL_STATUS_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::ctl {

// Human numbers: decimal SI prefixes and 3 significant digits, trailing zeros
// dropped. FormatCount(1234) == "1.23k", FormatCount(42) == "42",
// FormatBytes(1.5e6) == "1.5 MB", FormatBytes(512) == "512 B".
// Negative values keep their sign; NaN and infinities print as "?".
std::string FormatCount(double value);
std::string FormatBytes(double bytes);
// "5.2s", "5m03s", "2h05m03s", "3d04h05m"; negative or non-finite: "?".
std::string FormatDuration(double seconds);

// A plain-text table: columns padded to their widest cell, two spaces apart.
class TextTable {
 public:
  // `right_aligned[i]` right-aligns column i (numbers); missing entries mean left.
  TextTable(std::vector<std::string> headers, std::vector<bool> right_aligned);
  // REQUIRES: cells.size() == number of headers.
  void AddRow(std::vector<std::string> cells);
  // Each line starts with `indent` and has no trailing spaces.
  std::string Render(const std::string& indent) const;

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_aligned_;
  std::vector<std::vector<std::string>> rows_;
};

// The readable report: a header block of server-wide figures, the jobs table,
// then one ranks table per job (ranks in rank order). `server` is the address
// that was queried, shown in the first line. The header's figures are printed from
// the table of the reply's figures (proto/status_fields.h), a line per section.
std::string RenderStatusReport(const shardcast::v1::GetStatusResponse& status,
                               const std::string& server);

// The reply as indented proto3 JSON, fields with default values included so a
// script sees every field (64-bit integers are JSON strings, per proto3).
absl::StatusOr<std::string> StatusToJson(const shardcast::v1::GetStatusResponse& status);

}  // namespace shardcast::ctl

#endif  // SHARDCAST_CLIENT_CTL_STATUS_REPORT_H_

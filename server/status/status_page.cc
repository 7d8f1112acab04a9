// The status page (see status_page.h).
#include "server/status/status_page.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/utf8.h"
#include "proto/status_fields.h"

namespace shardcast::server {

namespace v1 = shardcast::v1;

namespace {

// The page's look, inline: the page must fetch nothing from elsewhere.
constexpr absl::string_view kStyle = R"(
body { font-family: sans-serif; margin: 1em 2em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.2em; }
table { border-collapse: collapse; margin: .3em 0; }
td, th { padding: 2px 8px; text-align: left; border-bottom: 1px solid #ddd; white-space: nowrap; }
.figures span { margin-right: 1.5em; }
.charts { display: flex; gap: 2em; flex-wrap: wrap; }
.chart p { margin: 0; font-size: .9em; }
.stalled, .problem { background: #fde2e1; color: #a40000; font-weight: bold; }
.note { color: #666; font-size: .9em; }
)";

constexpr int kChartWidth = 360;
constexpr int kChartHeight = 90;
constexpr int kBarWidth = 240;
constexpr int kBarHeight = 14;

// "1 stalled rank", "2 stalled ranks".
std::string Count(int64_t n, absl::string_view noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

// "3 min 20 s", "1 h 5 min": the uptime and stall lengths a reader takes in at a glance.
std::string ShortDuration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::max(seconds, 0.0));
  if (s < 60) return absl::StrCat(s, " s");
  if (s < 3600)
    return absl::StrCat(s / 60, " min", s % 60 > 0 ? absl::StrCat(" ", s % 60, " s") : "");
  return absl::StrCat(s / 3600, " h ", (s % 3600) / 60, " min");
}

void AppendHeader(const v1::GetStatusResponse& status, std::string* page) {
  absl::StrAppend(page, "<h1>shardcast-server ", HtmlEscape(status.version()), "</h1>\n",
                  "<p class=\"figures\"><span>up ", ShortDuration(status.uptime_seconds()),
                  "</span><span>", Count(status.open_streams(), "open stream"),
                  "</span><span id=\"rate\">", absl::StrFormat("%.1f", status.images_per_second()),
                  " images/s</span><span>", Count(status.total_jobs(), "job"), "</span>");
  absl::StrAppend(page, "<span id=\"stalled\"",
                  status.stalled_ranks() > 0 ? " class=\"stalled\"" : "", ">",
                  Count(status.stalled_ranks(), "stalled rank"), "</span></p>\n");
}

// One line chart: `values` (x = seconds ago, y in [0, y_max]; a negative y is a gap).
std::string Chart(const std::vector<std::pair<double, double>>& values, double y_max,
                  double span_seconds, absl::string_view css_id) {
  std::string svg = absl::StrFormat(
      "<svg id=\"%s\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "xmlns=\"http://www.w3.org/2000/svg\"><rect width=\"%d\" height=\"%d\" fill=\"#f6f6f6\" "
      "stroke=\"#ccc\"/>",
      css_id, kChartWidth, kChartHeight, kChartWidth, kChartHeight, kChartWidth, kChartHeight);
  std::string line;
  auto flush = [&] {
    if (!line.empty()) {
      absl::StrAppend(&svg,
                      "<polyline fill=\"none\" stroke=\"#1f5fbf\" stroke-width=\"2\" points=\"",
                      line, "\"/>");
    }
    line.clear();
  };
  for (const auto& [seconds_ago, y] : values) {
    if (y < 0 || seconds_ago > span_seconds) {
      flush();
      continue;
    }
    const double px = kChartWidth * (1.0 - seconds_ago / span_seconds);
    const double py = kChartHeight - 2 - (kChartHeight - 4) * std::min(y / y_max, 1.0);
    absl::StrAppend(&line, absl::StrFormat("%.1f,%.1f ", px, py));
  }
  flush();
  absl::StrAppend(&svg, "</svg>");
  return svg;
}

// How far back the charts reach: the history's age (at least a minute), up to its span,
// so that a server up for two minutes fills the charts instead of their right fifth.
double ShownSpan(const std::vector<ChartPoint>& history, double span_seconds) {
  double oldest = 0;
  for (const ChartPoint& point : history) oldest = std::max(oldest, point.seconds_ago);
  return std::min(span_seconds, std::max(60.0, std::ceil(oldest / 10) * 10));
}

void AppendCharts(const std::vector<ChartPoint>& history, double max_span_seconds,
                  std::string* page) {
  const double span_seconds = ShownSpan(history, max_span_seconds);
  absl::StrAppend(page, "<h2>The last ", ShortDuration(span_seconds), "</h2>\n");
  if (history.empty()) {
    absl::StrAppend(page,
                    "<p class=\"note\">Collecting samples: the charts fill in as the server "
                    "runs (one sample every few seconds).</p>\n");
    return;
  }
  std::vector<std::pair<double, double>> rates;
  std::vector<std::pair<double, double>> shares;
  double max_rate = 1;
  double last_share = -1;
  for (const ChartPoint& point : history) {
    rates.emplace_back(point.seconds_ago, point.images_per_second);
    shares.emplace_back(point.seconds_ago, point.server_wait_share);
    max_rate = std::max(max_rate, point.images_per_second);
    if (point.server_wait_share >= 0) last_share = point.server_wait_share;
  }
  absl::StrAppend(page, "<div class=\"charts\"><div class=\"chart\"><p>images/s (top: ",
                  absl::StrFormat("%.0f", max_rate), ")</p>",
                  Chart(rates, max_rate, span_seconds, "chart-rate"), "</div>\n");
  absl::StrAppend(
      page, "<div class=\"chart\"><p>share of waiting that was for the server (top: 100%)",
      last_share >= 0 ? absl::StrFormat(": now %.0f%%", 100 * last_share) : "", "</p>",
      Chart(shares, 1.0, span_seconds, "chart-wait"),
      "<p class=\"note\">high: trainers wait for batches (input-bound); low: the server waits "
      "for the trainers</p></div></div>\n");
}

void AppendDatasets(const v1::GetStatusResponse& status, std::string* page) {
  absl::StrAppend(
      page,
      "<h2>Datasets</h2>\n<table id=\"datasets\"><tr><th>name</th><th>state</th>"
      "<th>shards</th><th>samples</th><th>shard problems</th><th>directory</th></tr>\n");
  for (const v1::DatasetStatus& dataset : status.datasets()) {
    const int problems = dataset.total_skipped_shards() + dataset.total_changed_shards() +
                         dataset.total_unreadable_shards();
    const bool highlighted = problems > 0 || dataset.state() == v1::DatasetStatus::FAILED;
    absl::StrAppend(page, "<tr class=\"dataset", highlighted ? " problem" : "",
                    "\" data-dataset=\"", HtmlEscape(dataset.name()), "\"><td>",
                    HtmlEscape(dataset.name()), "</td><td>", DatasetStateName(dataset.state()),
                    dataset.error().empty() ? "" : ": ", HtmlEscape(dataset.error()), "</td><td>",
                    dataset.num_shards(), "</td><td>", dataset.num_samples(), "</td><td>");
    absl::StrAppend(page, dataset.total_skipped_shards(), " skipped, ",
                    dataset.total_changed_shards(), " changed, ", dataset.total_unreadable_shards(),
                    " unreadable</td><td>", HtmlEscape(dataset.dir()), "</td></tr>\n");
  }
  absl::StrAppend(page, "</table>\n");
}

void AppendShardProblems(const v1::GetStatusResponse& status, std::string* page) {
  if (status.skipped_shards().empty() && status.changed_shards().empty()) return;
  absl::StrAppend(page,
                  "<h2>Shard problems</h2>\n<table id=\"shard-problems\"><tr><th>dataset</th>"
                  "<th>shard</th><th>problem</th></tr>\n");
  auto rows = [&](const auto& problems, absl::string_view kind) {
    for (const v1::ShardProblem& problem : problems) {
      absl::StrAppend(page, "<tr class=\"problem\"><td>", HtmlEscape(problem.dataset()),
                      "</td><td>", HtmlEscape(problem.path()), "</td><td>", kind, ": ",
                      HtmlEscape(problem.reason()), "</td></tr>\n");
    }
  };
  rows(status.skipped_shards(), "left out of the index");
  rows(status.changed_shards(), "changed since indexing");
  absl::StrAppend(page, "</table>\n");
}

// A rank's place in its epoch: the share of the epoch's batches before its next one.
std::string PositionBar(const v1::RankStatus& rank, int64_t batches_per_epoch) {
  const double done =
      batches_per_epoch > 0
          ? std::clamp(static_cast<double>(rank.next_batch()) / batches_per_epoch, 0.0, 1.0)
          : 0.0;
  return absl::StrFormat(
      "<svg class=\"bar\" width=\"%d\" height=\"%d\" xmlns=\"http://www.w3.org/2000/svg\">"
      "<rect width=\"%d\" height=\"%d\" fill=\"#e4e4e4\"/>"
      "<rect width=\"%.1f\" height=\"%d\" fill=\"%s\"/></svg>",
      kBarWidth, kBarHeight, kBarWidth, kBarHeight, kBarWidth * done, kBarHeight,
      rank.stalled() ? "#c00000" : "#2e8b57");
}

void AppendRank(const v1::RankStatus& rank, int64_t batches_per_epoch, std::string* page) {
  absl::StrAppend(page, "<tr class=\"rank", rank.stalled() ? " stalled" : "", "\" data-rank=\"",
                  rank.rank(), "\" data-epoch=\"", rank.epoch(), "\" data-next-batch=\"",
                  rank.next_batch(), "\"><td>", rank.rank(), "</td><td>", rank.epoch(), "</td><td>",
                  PositionBar(rank, batches_per_epoch), "</td><td>batch ", rank.next_batch(),
                  " of ", batches_per_epoch, "</td><td>");
  if (rank.stalled()) {
    absl::StrAppend(page, "STALLED: no batch for ", ShortDuration(rank.seconds_since_last_batch()));
  } else {
    absl::StrAppend(page, rank.streaming() ? "streaming" : "not streaming");
  }
  absl::StrAppend(page, "</td><td>", rank.batches_sent(), "</td><td>", rank.window_depth(),
                  "</td><td>", rank.lag_batches(), "</td></tr>\n");
}

void AppendJob(const v1::JobStatus& job, std::string* page) {
  absl::StrAppend(page, "<section class=\"job\" data-job-id=\"", HtmlEscape(job.job_id()),
                  "\" data-batches-per-epoch=\"", job.batches_per_epoch(), "\"><h2>job ",
                  HtmlEscape(job.job_id()), "</h2>\n<p>",
                  job.mix_size() > 0 ? absl::StrCat("a mixture of ", job.mix_size(), " datasets, ",
                                                    job.samples_per_epoch(), " samples per epoch")
                                     : absl::StrCat("dataset ", HtmlEscape(job.dataset())),
                  ", ", Count(job.world_size(), "rank"), " of batch ", job.batch_size(), ", ",
                  job.batches_per_epoch(), " batches per epoch");
  if (job.stalled_ranks() > 0) {
    absl::StrAppend(page, ", <span class=\"stalled\">", Count(job.stalled_ranks(), "stalled rank"),
                    "</span>");
  }
  if (job.mix_size() > 0) {
    absl::StrAppend(page,
                    "</p>\n<table class=\"mix\"><tr><th>dataset</th><th>weight now</th>"
                    "<th>samples drawn</th><th>pass</th><th>position in the pass</th></tr>\n");
    for (const v1::MixDatasetStatus& d : job.mix()) {
      absl::StrAppend(page, "<tr><td>", HtmlEscape(d.name()), "</td><td>",
                      absl::StrFormat("%.4f", d.weight()), "</td><td>", d.samples_drawn(),
                      "</td><td>", d.pass(), "</td><td>", d.pass_position(), " / ", d.num_samples(),
                      "</td></tr>\n");
    }
    absl::StrAppend(page, "</table>\n<p>");
  }
  absl::StrAppend(page,
                  "</p>\n<table><tr><th>rank</th><th>epoch</th><th>position in the epoch</th>"
                  "<th></th><th>state</th><th>sent</th><th>ready</th><th>lag</th></tr>\n");
  for (const v1::RankStatus& rank : job.ranks()) AppendRank(rank, job.batches_per_epoch(), page);
  absl::StrAppend(page, "</table>\n");
  if (job.ranks_truncated()) {
    absl::StrAppend(page, "<p class=\"note\">", job.ranks_size(), " of ", job.total_ranks(),
                    " ranks listed</p>\n");
  }
  absl::StrAppend(page, "</section>\n");
}

}  // namespace

bool IsInvisibleFormatCharacter(char32_t c) {
  // Unicode 15's general category Cf (format), the C1 controls (Cc) and the line and
  // paragraph separators (Zl, Zp): none draws a glyph of its own, and the bidi ones
  // (U+202A-202E, U+2066-2069, U+200E/F, U+061C) reorder the text around them, so a job
  // id could make another job's row read as something else (CVE-2021-42574's trick).
  struct Range {
    char32_t first, last;
  };
  static constexpr Range kRanges[] = {
      {0x80, 0x9f},       {0xad, 0xad},       {0x600, 0x605},     {0x61c, 0x61c},
      {0x6dd, 0x6dd},     {0x70f, 0x70f},     {0x890, 0x891},     {0x8e2, 0x8e2},
      {0x180e, 0x180e},   {0x200b, 0x200f},   {0x2028, 0x202e},   {0x2060, 0x2064},
      {0x2066, 0x206f},   {0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0x110bd, 0x110bd},
      {0x110cd, 0x110cd}, {0x13430, 0x1343f}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a},
      {0xe0001, 0xe0001}, {0xe0020, 0xe007f},
  };
  for (const Range& range : kRanges) {
    if (c >= range.first && c <= range.last) return true;
  }
  return false;
}

std::string HtmlEscape(absl::string_view text) {
  const std::string utf8 = IsValidUtf8(text) ? std::string(text) : EscapeToUtf8(text);
  std::string out;
  out.reserve(utf8.size());
  for (size_t i = 0; i < utf8.size();) {
    const char c = utf8[i];
    if (static_cast<unsigned char>(c) >= 0x80) {
      // Valid UTF-8 by now: one whole character, shown as its code point when it is
      // invisible (so the reader sees that it is there), else as it is.
      const auto [code_point, length] = DecodeUtf8At(utf8, i);
      if (IsInvisibleFormatCharacter(code_point)) {
        out += code_point <= 0xffff ? absl::StrFormat("\\u%04x", static_cast<uint32_t>(code_point))
                                    : absl::StrFormat("\\U%08x", static_cast<uint32_t>(code_point));
      } else {
        out.append(utf8, i, length);
      }
      i += length;
      continue;
    }
    ++i;
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        // Control characters (a NUL, an escape sequence) have no business on the page.
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          out += "&#xFFFD;";
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string RenderStatusPage(const v1::GetStatusResponse& status,
                             const std::vector<ChartPoint>& history, double span_seconds) {
  std::string page = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta http-equiv=\"refresh\" content=\"",
      kStatusPageRefreshSeconds, "\"><title>shardcast-server status</title><style>", kStyle,
      "</style></head>\n<body>\n");
  AppendHeader(status, &page);
  AppendCharts(history, span_seconds, &page);
  AppendDatasets(status, &page);
  AppendShardProblems(status, &page);
  absl::StrAppend(&page, "<h2>Jobs</h2>\n");
  if (status.jobs().empty()) absl::StrAppend(&page, "<p class=\"note\">No job registered.</p>\n");
  for (const v1::JobStatus& job : status.jobs()) AppendJob(job, &page);
  if (status.jobs_truncated()) {
    absl::StrAppend(&page, "<p class=\"note\">", status.jobs_size(), " of ", status.total_jobs(),
                    " jobs listed</p>\n");
  }
  absl::StrAppend(&page, "<p class=\"note\">Reloads every ", kStatusPageRefreshSeconds,
                  " s. The same figures: GetStatus, shardcast-ctl status, /metrics.</p>\n",
                  "</body></html>\n");
  return page;
}

}  // namespace shardcast::server

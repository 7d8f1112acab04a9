// The status page (GET / on the metrics listener): one HTML page with SVG drawn here,
// no script and nothing fetched from elsewhere, that reloads itself every few seconds.
// It shows per dataset and job every rank's position in the epoch as a bar, the
// server's images/s and the share of waiting that was for the server (is training
// input-bound?) over the last minutes as small charts, and highlights stalled ranks
// and shard problems. A pure function of a GetStatus reply and the history's points:
// no clock, no I/O. Every string from a client (job ids) or a file (dataset names,
// directories, shard paths, errors) is HTML-escaped.
#ifndef SHARDCAST_SERVER_STATUS_STATUS_PAGE_H_
#define SHARDCAST_SERVER_STATUS_STATUS_PAGE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/status/status_history.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::server {

// The page reloads itself this often (<meta http-equiv="refresh">).
inline constexpr int kStatusPageRefreshSeconds = 5;

// `history`: the charts' points, oldest first (StatusHistory::Points); `span_seconds`:
// how far back the charts reach at most (they show the history's age, at least 1 min).
std::string RenderStatusPage(const shardcast::v1::GetStatusResponse& status,
                             const std::vector<ChartPoint>& history, double span_seconds);

// `text` safe inside HTML text and quoted attribute values: & < > " ' as entities,
// bytes that are not UTF-8 as EscapeToUtf8 writes them (\xNN), ASCII control characters
// as U+FFFD, and invisible characters (IsInvisibleFormatCharacter) as their code point,
// "\u202e" (above U+FFFF "\U000e0001").
std::string HtmlEscape(absl::string_view text);

// True for the characters that draw nothing yet change how text around them reads:
// Unicode's format characters (Cf: bidi overrides and isolates, zero-width spaces and
// joiners, the byte order mark, tags), the C1 controls and U+2028/U+2029.
bool IsInvisibleFormatCharacter(char32_t c);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_STATUS_STATUS_PAGE_H_

// One-line-per-event stderr logger (see log.h).
#include "server/base/log.h"

#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/util/url_redaction.h"

namespace shardcast::server {
namespace {
std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};

char LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kInfo:
      return 'I';
    case LogLevel::kWarning:
      return 'W';
    case LogLevel::kError:
      return 'E';
  }
  return '?';
}
}  // namespace

std::string LogSafe(absl::string_view untrusted, size_t max_bytes) {
  if (untrusted.size() <= max_bytes) return absl::CHexEscape(untrusted);
  return absl::StrCat(absl::CHexEscape(untrusted.substr(0, max_bytes)), "...(", untrusted.size(),
                      " bytes)");
}

void SetMinLogLevel(LogLevel level) { min_level.store(static_cast<int>(level)); }

void Log(LogLevel level, absl::string_view component, absl::string_view message) {
  if (static_cast<int>(level) < min_level.load(std::memory_order_relaxed)) return;
  // Messages quote URLs made far below (a fetcher's error): their secrets go here, once
  // for every line. The timestamp is real time (a test's fake clock must not date logs).
  std::string line = absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " ",
      std::string(1, LevelLetter(level)), " ", component, ": ", RedactUrlsIn(message), "\n");
  // One write per line: stderr is unbuffered and shared by every thread.
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace shardcast::server

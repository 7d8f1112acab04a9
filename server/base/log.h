// A tiny event logger for the daemon: one line per event on stderr,
// "2026-12-02T13:00:00.123Z I server: message" (level I/W/E, UTC timestamp).
#ifndef SHARDCAST_SERVER_BASE_LOG_H_
#define SHARDCAST_SERVER_BASE_LOG_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace shardcast::server {

enum class LogLevel { kInfo, kWarning, kError };

// Writes one whole line with a single write(2), so lines from concurrent threads
// never interleave. Thread-safe.
void Log(LogLevel level, absl::string_view component, absl::string_view message);

inline void LogInfo(absl::string_view component, absl::string_view message) {
  Log(LogLevel::kInfo, component, message);
}
inline void LogWarning(absl::string_view component, absl::string_view message) {
  Log(LogLevel::kWarning, component, message);
}
inline void LogError(absl::string_view component, absl::string_view message) {
  Log(LogLevel::kError, component, message);
}

// A client-supplied or data-supplied string (job id, sample key, request field) made
// safe for a log line or a status message: bytes other than printable ASCII are
// C-hex-escaped ("\n", "\x1b", "\xc3"), so a value can neither forge a log line nor
// hide in one, and anything past `max_bytes` bytes of input is cut, with its size said:
// "aaaa...(300 bytes)". Quote it in the message ('%s') as before.
inline constexpr size_t kLogSafeMaxBytes = 64;
std::string LogSafe(absl::string_view untrusted, size_t max_bytes = kLogSafeMaxBytes);

// Drops lines below `level` (benchmarks silence per-stream INFO lines).
void SetMinLogLevel(LogLevel level);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_BASE_LOG_H_

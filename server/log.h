// A tiny event logger for the daemon: one line per event on stderr,
// "2026-12-02T13:00:00.123Z I server: message" (level I/W/E, UTC timestamp).
#ifndef SHARDCAST_SERVER_LOG_H_
#define SHARDCAST_SERVER_LOG_H_

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

// Drops lines below `level` (benchmarks silence per-stream INFO lines).
void SetMinLogLevel(LogLevel level);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_LOG_H_

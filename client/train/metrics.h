// JSON-lines metrics, one file per rank: what each step and epoch did, for people,
// plots and tests (which read the sample keys and per-rank batch counts from it).
#ifndef SHARDCAST_CLIENT_TRAIN_METRICS_H_
#define SHARDCAST_CLIENT_TRAIN_METRICS_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shardcast::train {

// Builds one JSON object, fields in insertion order.
class JsonLine {
 public:
  JsonLine& Add(const std::string& key, int64_t value);
  JsonLine& Add(const std::string& key, int value) { return Add(key, static_cast<int64_t>(value)); }
  JsonLine& Add(const std::string& key, double value);             // non-finite -> null
  JsonLine& AddTime(const std::string& key, double unix_seconds);  // millisecond resolution
  JsonLine& Add(const std::string& key, bool value);
  JsonLine& Add(const std::string& key, const std::string& value);
  JsonLine& Add(const std::string& key, const char* value) { return Add(key, std::string(value)); }
  JsonLine& Add(const std::string& key, const std::vector<int64_t>& values);
  JsonLine& Add(const std::string& key, const std::vector<std::string>& values);
  std::string str() const { return body_ + "}"; }

 private:
  void Key(const std::string& key);
  std::string body_ = "{";
};

class MetricsWriter {
 public:
  // "{rank}" in `pattern` is replaced by the rank; otherwise ".rank<R>" is appended.
  static std::string PathForRank(const std::string& pattern, int rank);
  // Truncates, or appends when `append` (a resumed run continues the same file).
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> Open(const std::string& pattern, int rank,
                                                             bool append);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // One line, flushed at once: a killed rank leaves every line it wrote.
  void Write(const JsonLine& line);
  const std::string& path() const { return path_; }

 private:
  MetricsWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
};

}  // namespace shardcast::train

#endif  // SHARDCAST_CLIENT_TRAIN_METRICS_H_

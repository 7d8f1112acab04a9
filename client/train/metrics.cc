// JSON-lines metrics writer.
#include "client/train/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/util/json_fields.h"

namespace shardcast::train {

void JsonLine::Key(const std::string& key) {
  if (body_.size() > 1) body_ += ",";
  body_ += JsonQuote(key) + ":";
}

JsonLine& JsonLine::Add(const std::string& key, int64_t value) {
  Key(key);
  absl::StrAppend(&body_, value);
  return *this;
}

JsonLine& JsonLine::Add(const std::string& key, double value) {
  Key(key);
  if (std::isfinite(value)) {
    absl::StrAppend(&body_, absl::StrFormat("%.9g", value));
  } else {
    body_ += "null";
  }
  return *this;
}

JsonLine& JsonLine::AddTime(const std::string& key, double unix_seconds) {
  Key(key);
  absl::StrAppend(&body_, absl::StrFormat("%.3f", unix_seconds));
  return *this;
}

JsonLine& JsonLine::Add(const std::string& key, bool value) {
  Key(key);
  body_ += value ? "true" : "false";
  return *this;
}

JsonLine& JsonLine::Add(const std::string& key, const std::string& value) {
  Key(key);
  body_ += JsonQuote(value);
  return *this;
}

JsonLine& JsonLine::Add(const std::string& key, const std::vector<int64_t>& values) {
  Key(key);
  body_ += "[";
  for (size_t i = 0; i < values.size(); ++i) absl::StrAppend(&body_, i ? "," : "", values[i]);
  body_ += "]";
  return *this;
}

JsonLine& JsonLine::Add(const std::string& key, const std::vector<std::string>& values) {
  Key(key);
  body_ += "[";
  for (size_t i = 0; i < values.size(); ++i) body_ += (i ? "," : "") + JsonQuote(values[i]);
  body_ += "]";
  return *this;
}

std::string MetricsWriter::PathForRank(const std::string& pattern, int rank) {
  if (pattern.find("{rank}") != std::string::npos) {
    return absl::StrReplaceAll(pattern, {{"{rank}", absl::StrCat(rank)}});
  }
  return absl::StrCat(pattern, ".rank", rank);
}

absl::StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(const std::string& pattern,
                                                                   int rank, bool append) {
  std::string path = PathForRank(pattern, rank);
  std::FILE* file = std::fopen(path.c_str(), append ? "a" : "w");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics: cannot open ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<MetricsWriter>(new MetricsWriter(std::move(path), file));
}

MetricsWriter::~MetricsWriter() { std::fclose(file_); }

void MetricsWriter::Write(const JsonLine& line) {
  const std::string text = line.str() + "\n";
  std::fwrite(text.data(), 1, text.size(), file_);
  std::fflush(file_);
}

}  // namespace shardcast::train

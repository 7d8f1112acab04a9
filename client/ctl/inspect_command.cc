// `shardcast-ctl inspect DIR`: the dataset index as the server sees it (shards, totals,
// classes, skipped samples and why, warnings, fingerprint), as a table or as JSON.
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/ctl/command_registry.h"
#include "client/ctl/scratch_index_cache.h"
#include "client/ctl/status_report.h"
#include "common/flags/flags.h"
#include "common/flags/job_flags.h"
#include "common/plan/field_spec.h"
#include "common/plan/job_samples.h"
#include "common/shards/dataset_index.h"
#include "common/util/json_fields.h"

namespace shardcast::ctl {
namespace {

constexpr char kUsage[] =
    "usage: shardcast-ctl inspect DIR [--json] [--samples] [--label-field F] [--cache-dir D]\n"
    "         [--threads N] [--fields LIST] [--no-image] [--max-member-bytes SIZE]\n"
    "\n"
    "Indexes the shards directly in DIR (*.tar, *.tar.gz, *.tgz) as shardcast-server does and\n"
    "prints shards with sample counts, totals, whether samples have labels and images, the\n"
    "member extensions and how many samples hold each, classes, skipped shards and samples\n"
    "and why, warnings and the index fingerprint. A shard that cannot be read (0 bytes, "
    "unreadable,\n"
    "not a tar or gzip tar) is listed as skipped; the server serves the others. --samples adds one "
    "line per sample (shard, index in shard, key,\n"
    "label, extensions). --json prints the same as one JSON object. --cache-dir reuses (or\n"
    "writes) the server's index cache; it must not be inside DIR. --fields (and --no-image)\n"
    "selects the samples as the server does for a job asking for those fields: how many it\n"
    "serves and how many it leaves out for which reason (a required field missing, a member\n"
    "over --max-member-bytes), or why the server would refuse the job.\n";

struct InspectFlags {
  std::string dir;
  bool json = false;
  bool samples = false;
  bool help = false;
  std::string help_text;
  IndexOptions options;
  // A job to select samples for (--fields, --no-image); unset: none.
  std::optional<JobConfig> job;
  int64_t max_member_bytes = int64_t{64} << 20;  // the server's default
};

absl::StatusOr<InspectFlags> ParseFlags(const std::vector<std::string>& args) {
  InspectFlags flags;
  std::vector<std::string> positional;
  FlagSet parser("shardcast-ctl inspect");
  parser.Bool({{"--json"}, "", "print one JSON object"}, &flags.json);
  parser.Bool({{"--samples"}, "", "add one entry per sample"}, &flags.samples);
  parser.String({{"--label-field"}, "F", "field of a sample's .json holding its label"},
                &flags.options.label_field);
  parser.Int({{"--max-classes"},
              "N",
              "labels must be in [0, N), as the server's --max-classes; others are skipped"},
             &flags.options.max_classes, 1);
  parser.String({{"--cache-dir"}, "D", "the server's index cache directory (not inside DIR)"},
                &flags.options.cache_dir, /*allow_empty=*/true);
  parser.Int({{"--threads"}, "N", "scanner threads; 0 = one per shard, up to the cores"},
             &flags.options.threads, 0);
  JobOverrides job_flags;
  AddFieldFlags(&parser, JobConfig(), &job_flags);
  parser.Size({{"--max-member-bytes"}, "SIZE", "as the server's flag, for --fields"},
              &flags.max_member_bytes);
  parser.AcceptPositional(&positional);
  if (absl::Status s = parser.Parse(args); !s.ok()) return s;
  flags.help = parser.help_requested();
  if (flags.help) {
    flags.help_text = parser.Help();
    return flags;
  }
  if (positional.size() != 1) {
    return absl::InvalidArgumentError(
        positional.empty() ? "missing DIR (the shard directory)"
                           : absl::StrCat("expected one DIR, got ", positional.size(),
                                          " arguments: ", absl::StrJoin(positional, " ")));
  }
  flags.dir = positional[0];
  absl::StatusOr<std::optional<JobConfig>> job = FieldJobFromFlags(job_flags);
  if (!job.ok()) return job.status();
  flags.job = *std::move(job);
  return flags;
}

// Samples per label, for the class table: read a shard at a time (from the index cache
// when the samples are on disk); none read without classes.
absl::StatusOr<std::map<int64_t, int64_t>> LabelCounts(const DatasetIndex& index) {
  std::map<int64_t, int64_t> counts;
  if (index.num_classes == 0) return counts;
  for (uint32_t shard = 0; shard < index.shards.size(); ++shard) {
    absl::Status read =
        ForEachSample(index, shard, [&](uint32_t, const SampleEntry& e) { ++counts[e.label]; });
    if (!read.ok()) return read;
  }
  return counts;
}

std::string ClassName(const DatasetIndex& index, int64_t label) {
  return label >= 0 && static_cast<size_t>(label) < index.class_names.size()
             ? index.class_names[static_cast<size_t>(label)]
             : std::string();
}

std::string LabelsLine(const DatasetIndex& index) {
  return index.has_labels ? absl::StrCat("yes (", index.num_classes, " classes)")
                          : "none (served with label -1)";
}

std::string ImagesLine(const DatasetIndex& index) {
  return index.has_images ? "yes" : "none (served to jobs that ask for members only)";
}

std::vector<std::string> Extensions(const SampleEntry& e) {
  std::vector<std::string> exts;
  for (const MemberRef& m : e.members) exts.push_back(m.ext);
  return exts;
}

// The extension of the sample's image, "" for a sample without one.
std::string ImageExtension(const SampleEntry& e) {
  const MemberRef* image = ImageMember(e);
  return image == nullptr ? std::string() : image->ext;
}

// What a job of `job`'s fields would be served: its selection, or the server's refusal.
struct JobSelection {
  const JobConfig* job = nullptr;  // null: no --fields asked
  absl::StatusOr<std::shared_ptr<const JobSamples>> samples = nullptr;
};

JobSelection SelectFor(const DatasetIndex& index, const InspectFlags& flags) {
  JobSelection selection;
  if (!flags.job) return selection;
  selection.job = &*flags.job;
  selection.samples = JobSamples::Select(index, *flags.job, flags.max_member_bytes);
  return selection;
}

void PrintSelection(const JobSelection& selection) {
  if (selection.job == nullptr) return;
  std::printf("\njob          fields %s, %s\n", FieldSpecsString(selection.job->fields).c_str(),
              selection.job->image ? "with the image" : "no image");
  if (!selection.samples.ok()) {
    std::printf("             refused: %s\n",
                std::string(selection.samples.status().message()).c_str());
    return;
  }
  const JobSamples& samples = **selection.samples;
  std::printf("             serves %lld samples, leaves out %zu reason(s)\n",
              static_cast<long long>(samples.num_samples()), samples.left_out().size());
  for (const LeftOut& out : samples.left_out()) {
    std::printf("%9lld  %s\n", static_cast<long long>(out.count), out.reason.c_str());
  }
}

std::string SelectionJson(const JobSelection& selection) {
  if (selection.job == nullptr) return "";
  std::string out = "  \"job\": {\"fields\": [";
  for (size_t i = 0; i < selection.job->fields.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", JsonQuote(selection.job->fields[i].ToString()));
  }
  absl::StrAppend(&out, "], \"image\": ", selection.job->image ? "true" : "false");
  if (!selection.samples.ok()) {
    absl::StrAppend(&out,
                    ", \"refused\": ", JsonQuote(std::string(selection.samples.status().message())),
                    "},\n");
    return out;
  }
  const JobSamples& samples = **selection.samples;
  absl::StrAppend(&out, ", \"samples\": ", samples.num_samples(), ", \"left_out\": [");
  for (size_t i = 0; i < samples.left_out().size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", "{\"reason\": ", JsonQuote(samples.left_out()[i].reason),
                    ", \"samples\": ", samples.left_out()[i].count, "}");
  }
  out += "]},\n";
  return out;
}

// What the printers need beside the index, computed once.
struct Report {
  const JobSelection& selection;
  const std::map<int64_t, int64_t>& label_counts;
  bool with_samples = false;
};

// One line per sample, shard by shard, printed as each shard is read: `line(shard, j,
// sample)`.
absl::Status PrintSamples(
    const DatasetIndex& index,
    absl::FunctionRef<std::string(uint32_t, uint32_t, const SampleEntry&)> line) {
  for (uint32_t si = 0; si < index.shards.size(); ++si) {
    absl::Status read = ForEachSample(index, si, [&](uint32_t j, const SampleEntry& e) {
      const std::string text = line(si, j, e);
      std::fwrite(text.data(), 1, text.size(), stdout);
    });
    if (!read.ok()) return read;
  }
  return absl::OkStatus();
}

absl::Status PrintTable(const DatasetIndex& index, const Report& report) {
  uint64_t total_bytes = 0;
  for (const ShardInfo& s : index.shards) total_bytes += s.file_size;
  std::printf("dataset      %s\n", index.root.c_str());
  std::printf("fingerprint  %s (%s)\n", index.fingerprint.c_str(),
              index.loaded_from_cache ? "loaded from cache" : "scanned");
  std::printf(
      "shards %zu (%s), samples %lld, classes %d, skipped %zu, skipped shards %zu, warnings "
      "%zu\n\n",
      index.shards.size(), FormatBytes(static_cast<double>(total_bytes)).c_str(),
      static_cast<long long>(index.num_samples), index.num_classes, index.skipped.size(),
      index.skipped_shards.size(), index.warnings.size());
  std::printf("labels       %s\nimages       %s\n", LabelsLine(index).c_str(),
              ImagesLine(index).c_str());
  PrintSelection(report.selection);
  std::printf("\n");

  std::printf("%6s  %-40s %9s %11s  %s\n", "SHARD", "PATH", "SAMPLES", "SIZE", "COMPRESSED");
  const std::vector<uint32_t> counts = index.ShardSampleCounts();
  for (size_t i = 0; i < index.shards.size(); ++i) {
    const ShardInfo& s = index.shards[i];
    std::printf("%6zu  %-40s %9u %11s  %s\n", i, s.path.c_str(), counts[i],
                FormatBytes(static_cast<double>(s.file_size)).c_str(), s.compressed ? "yes" : "no");
  }

  std::printf("\n%9s  %s\n", "SAMPLES", "EXTENSION");
  for (const auto& [ext, samples] : index.MemberExtensionCounts()) {
    std::printf("%9lld  %s\n", static_cast<long long>(samples), ext.c_str());
  }

  if (index.num_classes > 0) {
    std::printf("\n%6s  %9s  %s\n", "LABEL", "SAMPLES", "CLASS");
    for (int64_t label = 0; label < index.num_classes; ++label) {
      const auto it = report.label_counts.find(label);
      std::printf("%6lld  %9lld  %s\n", static_cast<long long>(label),
                  static_cast<long long>(it == report.label_counts.end() ? 0 : it->second),
                  ClassName(index, label).c_str());
    }
  }

  if (!index.skipped_shards.empty()) {
    std::printf("\nskipped shards (%zu, not served):\n", index.skipped_shards.size());
    for (const SkippedShard& s : index.skipped_shards) {
      std::printf("  %s: %s\n", s.path.c_str(), s.reason.c_str());
    }
  }
  if (!index.skipped.empty()) {
    std::printf("\nskipped (%zu):\n", index.skipped.size());
    for (const SkippedSample& s : index.skipped) {
      std::printf("  %s  %s: %s\n", s.shard.c_str(), s.key.c_str(), s.reason.c_str());
    }
  }
  if (!index.warnings.empty()) {
    std::printf("\nwarnings (%zu):\n", index.warnings.size());
    for (const std::string& w : index.warnings) std::printf("  %s\n", w.c_str());
  }
  if (!report.with_samples) return absl::OkStatus();
  std::printf("\n%6s  %6s  %6s  %-32s %s\n", "SHARD", "INDEX", "LABEL", "KEY", "EXTENSIONS");
  return PrintSamples(index, [](uint32_t si, uint32_t j, const SampleEntry& e) {
    return absl::StrFormat("%6u  %6u  %6d  %-32s %s\n", si, j, e.label, e.key,
                           absl::StrJoin(Extensions(e), ","));
  });
}

absl::Status PrintJson(const DatasetIndex& index, const Report& report) {
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"root\": ", JsonQuote(index.root), ",\n");
  absl::StrAppend(&out, "  \"fingerprint\": ", JsonQuote(index.fingerprint), ",\n");
  absl::StrAppend(&out, "  \"loaded_from_cache\": ", index.loaded_from_cache ? "true" : "false",
                  ",\n");
  absl::StrAppend(&out, "  \"num_shards\": ", index.shards.size(), ",\n");
  absl::StrAppend(&out, "  \"num_samples\": ", index.num_samples, ",\n");
  absl::StrAppend(&out, "  \"num_classes\": ", index.num_classes, ",\n");
  absl::StrAppend(&out, "  \"has_labels\": ", index.has_labels ? "true" : "false", ",\n");
  absl::StrAppend(&out, "  \"has_images\": ", index.has_images ? "true" : "false", ",\n");
  out += SelectionJson(report.selection);
  out += "  \"extensions\": [";
  bool first_ext = true;
  for (const auto& [ext, samples] : index.MemberExtensionCounts()) {
    absl::StrAppend(&out, first_ext ? "\n    " : ",\n    ", "{\"extension\": ", JsonQuote(ext),
                    ", \"samples\": ", samples, "}");
    first_ext = false;
  }
  out += first_ext ? "],\n" : "\n  ],\n";
  out += "  \"shards\": [";
  const std::vector<uint32_t> counts = index.ShardSampleCounts();
  for (size_t i = 0; i < index.shards.size(); ++i) {
    const ShardInfo& s = index.shards[i];
    absl::StrAppend(&out, i ? ",\n    " : "\n    ", "{\"index\": ", i,
                    ", \"path\": ", JsonQuote(s.path), ", \"samples\": ", counts[i],
                    ", \"file_size\": ", s.file_size, ", \"mtime_ns\": ", s.mtime_ns,
                    ", \"compressed\": ", s.compressed ? "true" : "false", "}");
  }
  out += index.shards.empty() ? "],\n" : "\n  ],\n";
  out += "  \"classes\": [";
  for (int64_t label = 0; label < index.num_classes; ++label) {
    const auto it = report.label_counts.find(label);
    absl::StrAppend(&out, label ? ",\n    " : "\n    ", "{\"label\": ", label,
                    ", \"name\": ", JsonQuote(ClassName(index, label)),
                    ", \"samples\": ", it == report.label_counts.end() ? 0 : it->second, "}");
  }
  out += index.num_classes == 0 ? "],\n" : "\n  ],\n";
  out += "  \"skipped\": [";
  for (size_t i = 0; i < index.skipped.size(); ++i) {
    const SkippedSample& s = index.skipped[i];
    absl::StrAppend(&out, i ? ",\n    " : "\n    ", "{\"shard\": ", JsonQuote(s.shard),
                    ", \"key\": ", JsonQuote(s.key), ", \"reason\": ", JsonQuote(s.reason), "}");
  }
  out += index.skipped.empty() ? "],\n" : "\n  ],\n";
  out += "  \"skipped_shards\": [";
  for (size_t i = 0; i < index.skipped_shards.size(); ++i) {
    const SkippedShard& s = index.skipped_shards[i];
    absl::StrAppend(&out, i ? ",\n    " : "\n    ", "{\"path\": ", JsonQuote(s.path),
                    ", \"reason\": ", JsonQuote(s.reason), "}");
  }
  out += index.skipped_shards.empty() ? "],\n" : "\n  ],\n";
  out += "  \"warnings\": [";
  for (size_t i = 0; i < index.warnings.size(); ++i) {
    absl::StrAppend(&out, i ? ",\n    " : "\n    ", JsonQuote(index.warnings[i]));
  }
  out += index.warnings.empty() ? "]" : "\n  ]";
  if (report.with_samples) {
    out += ",\n  \"samples\": [";
    std::fwrite(out.data(), 1, out.size(), stdout);
    out.clear();
    bool first = true;
    absl::Status printed = PrintSamples(index, [&](uint32_t si, uint32_t j, const SampleEntry& e) {
      std::vector<std::string> exts;
      for (const std::string& ext : Extensions(e)) exts.push_back(JsonQuote(ext));
      const std::string line =
          absl::StrCat(first ? "\n    " : ",\n    ", "{\"shard\": ", si, ", \"index\": ", j,
                       ", \"key\": ", JsonQuote(e.key), ", \"label\": ", e.label,
                       ", \"image\": ", JsonQuote(ImageExtension(e)), ", \"extensions\": [",
                       absl::StrJoin(exts, ", "), "]}");
      first = false;
      return line;
    });
    if (!printed.ok()) return printed;
    out += first ? "]" : "\n  ]";
  }
  out += "\n}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return absl::OkStatus();
}

int RunInspect(const std::vector<std::string>& args) {
  absl::StatusOr<InspectFlags> flags = ParseFlags(args);
  if (!flags.ok()) {
    std::fprintf(stderr, "shardcast-ctl inspect: %s\n\n%s",
                 std::string(flags.status().message()).c_str(), kUsage);
    return 2;
  }
  if (flags->help) {
    std::printf("%s\nflags:\n%s", kUsage, flags->help_text.c_str());
    return 0;
  }
  // The samples stay in an index cache (--cache-dir, else a temporary one) and are read
  // a shard at a time: memory that grows with the shards, as the server's.
  absl::StatusOr<ScratchIndexCache> cache = ScratchIndexCache::Use(flags->dir, &flags->options);
  absl::StatusOr<DatasetIndex> index =
      cache.ok() ? BuildDatasetIndex(flags->dir, flags->options) : cache.status();
  if (!index.ok()) {
    std::fprintf(stderr, "shardcast-ctl inspect: %s\n", index.status().ToString().c_str());
    return 1;
  }
  const JobSelection selection = SelectFor(*index, *flags);
  absl::StatusOr<std::map<int64_t, int64_t>> label_counts = LabelCounts(*index);
  absl::Status printed = label_counts.status();
  if (printed.ok()) {
    const Report report{selection, *label_counts, flags->samples};
    printed = flags->json ? PrintJson(*index, report) : PrintTable(*index, report);
  }
  if (!printed.ok()) {
    std::fflush(stdout);
    std::fprintf(stderr, "shardcast-ctl inspect: %s\n", printed.ToString().c_str());
    return 1;
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

RegisterCommand reg("inspect",
                    {"index a shard directory: shards, samples, classes, skips", RunInspect});

}  // namespace
}  // namespace shardcast::ctl

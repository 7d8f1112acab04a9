// shardcast-pack: writes WebDataset shards from an ImageFolder tree or from a
// generated (synthetic) dataset. Run with --help for the flags.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/flags/flags.h"
#include "common/shards/dataset_index.h"
#include "tools/pack/image_folder.h"
#include "tools/pack/synthetic_dataset.h"

namespace {

constexpr char kUsage[] = R"(shardcast-pack: write WebDataset tar shards.

Usage:
  shardcast-pack [FLAGS] SRC_DIR OUT_DIR       pack an ImageFolder tree
  shardcast-pack --synthetic N [FLAGS] OUT_DIR  generate a learnable dataset

ImageFolder mode: SRC_DIR/CLASS_NAME/**/*.{jpg,jpeg,png} (case-insensitive).
  Classes are the sorted subdirectory names (label 0..C-1), files are sorted
  within a class. Each image becomes KEY.jpg or KEY.png (original bytes, the
  extension chosen by the content, so .jpeg -> .jpg), KEY.json
  {"label": L, "class": "NAME", "count": INDEX_IN_SHARD, "file": "CLASS/x.jpg"}
  and KEY.cls (the label as text); KEY = 8-digit position in packing order.
  Unreadable, empty or non-image files are skipped with a warning; the run
  fails only if nothing could be packed.

Synthetic mode: N JPEG images (TurboJPEG, 4:2:0) whose class is a hue and a
  stripe orientation, with per-sample jitter and noise; a small CNN learns it
  in an epoch or two. Labels are balanced and interleaved. Class names
  class_000, class_001, ...; samples KEY.jpg + KEY.json + KEY.cls as above
  (no "file" field). --captions adds KEY.txt (after KEY.jpg) and "caption",
  "width", "height" in KEY.json; --no-labels leaves out KEY.cls and the label
  fields.

Both modes write OUT_DIR/shard-000000.tar, shard-000001.tar, ... and
OUT_DIR/info.json ({"dataset size", "num_classes", "class names", "shards",
"shard samples"}). Output is deterministic: the same input and flags give
byte-identical shards (fixed tar headers), whatever --threads is.

Flags:
)";

constexpr char kExitStatus[] =
    "\nExit status: 0 packed, 1 failed (nothing written or a write error), 2 bad usage.\n";

struct Args {
  std::vector<std::string> positional;
  std::optional<int32_t> synthetic;
  int classes = 10;
  int width = 64, height = 64;
  int quality = 90;
  bool captions = false;
  bool no_labels = false;
  int64_t per_shard = 1000;
  int64_t max_shard_bytes = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  int threads = 0;
  bool overwrite = false;
  bool quiet = false;
  bool help = false;
  std::string help_text;
};

// Parses argv into `a`; an error is a usage error (exit 2).
absl::Status ParseArgs(int argc, char** argv, Args& a) {
  shardcast::FlagSet flags("shardcast-pack");
  flags.Int64({{"--per-shard"}, "N", "samples per shard; 0 = no count limit"}, &a.per_shard, 0);
  flags.Size({{"--max-shard-bytes"},
              "SIZE",
              "shard size limit (e.g. 512MiB; K/M/G are binary); 0 = none. A sample is\n"
              "never split, and a sample larger than the limit gets a shard of its own"},
             &a.max_shard_bytes);
  flags.Uint64({{"--seed"}, "S", "seed of the shuffle / the synthetic images"}, &a.seed);
  flags.Bool({{"--shuffle"},
              "",
              "ImageFolder: interleave classes by a permutation seeded by --seed\n"
              "(one-class shards are bad for shard-split training)"},
             &a.shuffle);
  flags.Add({{"--no-shuffle"}, "", "ImageFolder: keep class-by-class, file-sorted order"}, 0,
            [&a](const std::string& flag, const std::vector<std::string>& values) {
              if (!values.empty()) return absl::InvalidArgumentError(flag + " takes no value");
              a.shuffle = false;
              return absl::OkStatus();
            });
  flags.Int({{"--threads"}, "T", "reader/encoder threads; 0 = all cores"}, &a.threads, 0);
  flags.Bool({{"--overwrite"},
              "",
              "replace shard-*.tar and info.json already in OUT_DIR (otherwise their\n"
              "presence is an error)"},
             &a.overwrite);
  flags.Bool({{"--quiet"}, "", "print only warnings and errors"}, &a.quiet);
  flags.Section("Synthetic mode only:");
  flags.OptionalInt({{"--synthetic"}, "N", "number of samples to generate"}, &a.synthetic, 1,
                    std::numeric_limits<int32_t>::max());
  flags.Int({{"--classes"}, "C", "number of classes"}, &a.classes, 1);
  flags.Add({{"--size"},
             "WxH",
             "image width x height (500x375 is the size of a typical ImageNet photo)",
             "64x64"},
            1, [&a](const std::string& flag, const std::vector<std::string>& values) {
              const std::vector<std::string> wh =
                  absl::StrSplit(absl::AsciiStrToLower(values[0]), 'x');
              if (wh.size() != 2 || !absl::SimpleAtoi(wh[0], &a.width) ||
                  !absl::SimpleAtoi(wh[1], &a.height) || a.width <= 0 || a.height <= 0) {
                return absl::InvalidArgumentError(
                    absl::StrCat(flag, " takes WxH (e.g. 64x64), got '", values[0], "'"));
              }
              return absl::OkStatus();
            });
  flags.Int({{"--quality"}, "Q", "JPEG quality"}, &a.quality, 1, 100);
  flags.Bool({{"--captions"},
              "",
              "also write KEY.txt, a caption that describes the image (its colour and\n"
              "stripes; some in Chinese or with emoji), and \"caption\" in KEY.json"},
             &a.captions);
  flags.Bool({{"--no-labels"},
              "",
              "leave out KEY.cls and the label in KEY.json (num_classes 0); with\n"
              "--captions: img2dataset's layout, jpg + txt + json"},
             &a.no_labels);
  flags.AcceptPositional(&a.positional);
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) return s;
  a.help = flags.help_requested();
  if (a.help) a.help_text = flags.Help();
  if (flags.Given("--shuffle") && flags.Given("--no-shuffle")) {
    return absl::InvalidArgumentError("--shuffle and --no-shuffle contradict each other");
  }
  if ((a.captions || a.no_labels) && !a.synthetic.has_value()) {
    return absl::InvalidArgumentError("--captions and --no-labels need --synthetic N");
  }
  return absl::OkStatus();
}
// Refuses to mix a new dataset with an old one unless asked to replace it.
std::string CheckOutputDir(const std::string& out_dir, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (overwrite || !fs::is_directory(out_dir, ec)) return "";
  for (const fs::directory_entry& e : fs::directory_iterator(out_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "info.json" || (absl::StartsWith(name, "shard-") && absl::EndsWith(name, ".tar"))) {
      return absl::StrCat(out_dir, " already holds a dataset (", name,
                          "); pass --overwrite to replace it");
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (absl::Status s = ParseArgs(argc, argv, a); !s.ok()) {
    std::fprintf(stderr, "shardcast-pack: %s (see --help)\n", std::string(s.message()).c_str());
    return 2;
  }
  if (a.help) {
    std::printf("%s%s%s", kUsage, a.help_text.c_str(), kExitStatus);
    return 0;
  }
  const bool synthetic = a.synthetic.has_value();
  const size_t want = synthetic ? 1 : 2;
  if (a.positional.size() != want) {
    std::fprintf(stderr, "shardcast-pack: expected %s, got %zu argument(s) (see --help)\n",
                 synthetic ? "OUT_DIR" : "SRC_DIR OUT_DIR", a.positional.size());
    return 2;
  }
  const std::string out_dir = a.positional.back();
  if (std::string err = CheckOutputDir(out_dir, a.overwrite); !err.empty()) {
    std::fprintf(stderr, "shardcast-pack: %s\n", err.c_str());
    return 1;
  }

  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<shardcast::pack::PackSummary> result;
  if (synthetic) {
    shardcast::pack::SyntheticOptions o;
    o.num_samples = *a.synthetic;
    o.num_classes = a.classes;
    o.width = a.width;
    o.height = a.height;
    o.per_shard = a.per_shard;
    o.max_shard_bytes = a.max_shard_bytes;
    o.seed = a.seed;
    o.quality = a.quality;
    o.threads = a.threads;
    o.captions = a.captions;
    o.labels = !a.no_labels;
    result = shardcast::pack::WriteSyntheticDataset(out_dir, o);
  } else {
    shardcast::pack::PackOptions o;
    o.per_shard = a.per_shard;
    o.max_shard_bytes = a.max_shard_bytes;
    o.shuffle = a.shuffle;
    o.seed = a.seed;
    o.threads = a.threads;
    result = shardcast::pack::PackImageFolder(a.positional[0], out_dir, o);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!result.ok()) {
    std::fprintf(stderr, "shardcast-pack: %s\n", result.status().ToString().c_str());
    return 1;
  }
  for (const std::string& w : result->warnings) {
    std::fprintf(stderr, "warning: %s\n", w.c_str());
  }
  // The dataset index file beside the shards: a server reading them from object storage
  // loads it with one GET instead of reading every shard (a local server ignores it).
  absl::StatusOr<shardcast::DatasetIndex> index = shardcast::BuildDatasetIndex(out_dir, {});
  if (!index.ok()) {
    std::fprintf(stderr, "shardcast-pack: indexing what was written: %s\n",
                 index.status().ToString().c_str());
    return 1;
  }
  const std::string index_file = out_dir + "/" + shardcast::kIndexFileName;
  absl::StatusOr<std::string> index_bytes = shardcast::SerializeIndexFile(*index, {});
  if (!index_bytes.ok()) {
    std::fprintf(stderr, "shardcast-pack: index of %s: %s\n", out_dir.c_str(),
                 index_bytes.status().ToString().c_str());
    return 1;
  }
  std::ofstream(index_file, std::ios::binary | std::ios::trunc) << *index_bytes;
  if (!std::ifstream(index_file)) {
    std::fprintf(stderr, "shardcast-pack: cannot write %s\n", index_file.c_str());
    return 1;
  }
  if (!a.quiet) {
    std::printf(
        "packed %lld samples (%d classes) into %zu shard(s) in %s: %.1f MiB, %.2f s, "
        "%.0f samples/s%s\n",
        static_cast<long long>(result->samples), result->num_classes, result->shards.size(),
        out_dir.c_str(), result->bytes / 1048576.0, secs, result->samples / std::max(secs, 1e-9),
        result->skipped > 0
            ? absl::StrFormat("; skipped %lld", static_cast<long long>(result->skipped)).c_str()
            : "");
  }
  return 0;
}

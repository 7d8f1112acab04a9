// shardcast-pack: writes WebDataset shards from an ImageFolder tree or from a
// generated (synthetic) dataset. Run with --help for the flags.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
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
  (no "file" field).

Both modes write OUT_DIR/shard-000000.tar, shard-000001.tar, ... and
OUT_DIR/info.json ({"dataset size", "num_classes", "class names", "shards",
"shard samples"}). Output is deterministic: the same input and flags give
byte-identical shards (fixed tar headers), whatever --threads is.

Flags:
  --per-shard N        samples per shard (default 1000; 0 = no count limit)
  --max-shard-bytes B  shard size limit in bytes, K/M/G suffixes allowed
                       (default 0 = none); a sample is never split, and a
                       sample larger than B gets a shard of its own
  --seed S             seed of the shuffle / the synthetic images (default 0)
  --shuffle            ImageFolder: interleave classes by a permutation seeded
                       by --seed (default; one-class shards are bad for
                       shard-split training)
  --no-shuffle         ImageFolder: keep class-by-class, file-sorted order
  --threads T          reader/encoder threads (default 0 = all cores)
  --overwrite          replace shard-*.tar and info.json already in OUT_DIR
                       (otherwise their presence is an error)
  --quiet              print only warnings and errors
  --help               this text
Synthetic mode only:
  --synthetic N        number of samples to generate
  --classes C          number of classes (default 10)
  --size WxH           image width x height (default 64x64; 500x375 is the
                       size of a typical ImageNet photo)
  --quality Q          JPEG quality 1..100 (default 90)

Exit status: 0 packed, 1 failed (nothing written or a write error), 2 bad usage.
)";

struct Args {
  std::vector<std::string> positional;
  int64_t synthetic = -1;
  int classes = 10;
  int width = 64, height = 64;
  int quality = 90;
  int64_t per_shard = 1000;
  int64_t max_shard_bytes = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  int threads = 0;
  bool overwrite = false;
  bool quiet = false;
  bool help = false;
};

bool ParseBytes(absl::string_view text, int64_t* out) {
  int64_t mult = 1;
  std::string t = absl::AsciiStrToUpper(text);
  if (absl::EndsWith(t, "B")) t.pop_back();
  if (!t.empty()) {
    switch (t.back()) {
      case 'K':
        mult = int64_t{1} << 10;
        break;
      case 'M':
        mult = int64_t{1} << 20;
        break;
      case 'G':
        mult = int64_t{1} << 30;
        break;
      default:
        mult = 1;
    }
    if (mult != 1) t.pop_back();
  }
  int64_t v;
  if (!absl::SimpleAtoi(t, &v) || v < 0) return false;
  *out = v * mult;
  return true;
}

// Parses argv; on error returns a message (usage error).
std::string ParseArgs(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) a.positional.push_back(argv[i]);
      break;
    }
    if (!absl::StartsWith(arg, "--")) {
      a.positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    absl::StrReplaceAll({{"_", "-"}}, &name);
    auto flag = [&](bool& b, bool v) -> std::string {
      if (has_value) return absl::StrCat("--", name, " takes no value");
      b = v;
      return "";
    };
    if (name == "help") {
      std::string e = flag(a.help, true);
      if (!e.empty()) return e;
      continue;
    }
    if (name == "shuffle") {
      std::string e = flag(a.shuffle, true);
      if (!e.empty()) return e;
      continue;
    }
    if (name == "no-shuffle") {
      std::string e = flag(a.shuffle, false);
      if (!e.empty()) return e;
      continue;
    }
    if (name == "overwrite") {
      std::string e = flag(a.overwrite, true);
      if (!e.empty()) return e;
      continue;
    }
    if (name == "quiet") {
      std::string e = flag(a.quiet, true);
      if (!e.empty()) return e;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) return absl::StrCat("--", name, " needs a value");
      value = argv[++i];
    }
    bool ok = true;
    if (name == "synthetic") {
      ok = absl::SimpleAtoi(value, &a.synthetic) && a.synthetic > 0;
    } else if (name == "classes") {
      ok = absl::SimpleAtoi(value, &a.classes) && a.classes > 0;
    } else if (name == "size") {
      std::vector<std::string> wh = absl::StrSplit(absl::AsciiStrToLower(value), 'x');
      ok = wh.size() == 2 && absl::SimpleAtoi(wh[0], &a.width) &&
           absl::SimpleAtoi(wh[1], &a.height) && a.width > 0 && a.height > 0;
    } else if (name == "quality") {
      ok = absl::SimpleAtoi(value, &a.quality) && a.quality >= 1 && a.quality <= 100;
    } else if (name == "per-shard") {
      ok = absl::SimpleAtoi(value, &a.per_shard) && a.per_shard >= 0;
    } else if (name == "max-shard-bytes") {
      ok = ParseBytes(value, &a.max_shard_bytes);
    } else if (name == "seed") {
      ok = absl::SimpleAtoi(value, &a.seed);
    } else if (name == "threads") {
      ok = absl::SimpleAtoi(value, &a.threads) && a.threads >= 0;
    } else {
      return absl::StrCat("unknown flag --", name);
    }
    if (!ok) return absl::StrCat("bad value '", value, "' for --", name);
  }
  return "";
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
  if (std::string err = ParseArgs(argc, argv, a); !err.empty()) {
    std::fprintf(stderr, "shardcast-pack: %s (see --help)\n", err.c_str());
    return 2;
  }
  if (a.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const bool synthetic = a.synthetic > 0;
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
    o.num_samples = a.synthetic;
    o.num_classes = a.classes;
    o.width = a.width;
    o.height = a.height;
    o.per_shard = a.per_shard;
    o.max_shard_bytes = a.max_shard_bytes;
    o.seed = a.seed;
    o.quality = a.quality;
    o.threads = a.threads;
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

// Generated dataset: each class has its own hue and stripe orientation, so a
// small CNN separates classes within an epoch or two; per-sample phase,
// colour jitter and noise keep samples distinct. Pure function of the seed.
#include "tools/pack/synthetic_dataset.h"

#include <cmath>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/util/json_fields.h"
#include "tools/pack/image_encode.h"
#include "tools/pack/pack_pipeline.h"

namespace shardcast::pack {
namespace {

constexpr double kPi = 3.14159265358979323846;

// HSV in [0,1] to RGB in [0,1].
void HsvToRgb(double h, double s, double v, double rgb[3]) {
  h = h - std::floor(h);
  const double f = h * 6.0;
  const int sector = static_cast<int>(f) % 6;
  const double frac = f - std::floor(f);
  const double p = v * (1 - s), q = v * (1 - s * frac), t = v * (1 - s * (1 - frac));
  const double table[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
  for (int c = 0; c < 3; ++c) rgb[c] = table[sector][c];
}

// Independent stream per (seed, sample): a sample renders the same whatever
// thread renders it and whatever other samples exist.
uint64_t SampleSeed(uint64_t seed, int64_t index) {
  SplitMix64 mix(seed * 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(index));
  mix.Next();
  return mix.Next();
}

// A sample's colour and stripes: the first draws of its stream, in this order
// (the pixel noise follows them, so the order is part of the output bytes).
struct Look {
  double hue;    // [0, 1) turns, class label/C jittered by at most a fifth of the gap
  double sat;    // [0.55, 0.9)
  double val;    // [0.55, 0.9)
  double angle;  // radians: class label*180/C degrees, +-5 degrees
  double phase;  // radians
  double depth;  // stripe contrast, [0.25, 0.4)
};

Look DrawLook(const SyntheticOptions& options, int label, SplitMix64& rng) {
  const int classes = std::max(options.num_classes, 1);
  Look look;
  look.hue = (label + (rng.Uniform() - 0.5) * 0.4) / classes;
  look.sat = 0.55 + 0.35 * rng.Uniform();
  look.val = 0.55 + 0.35 * rng.Uniform();
  look.angle = kPi * label / classes + (rng.Uniform() - 0.5) * (kPi / 18);
  look.phase = 2 * kPi * rng.Uniform();
  look.depth = 0.25 + 0.15 * rng.Uniform();
  return look;
}

// The colour wheel in twelve 30-degree steps from red: English, Chinese, emoji.
struct ColourName {
  const char* english;
  const char* chinese;
  const char* emoji;
};
constexpr ColourName kColourNames[12] = {
    {"red", "红色", "🟥"},    {"orange", "橙色", "🟧"},    {"yellow", "黄色", "🟨"},
    {"lime", "黄绿色", "🟩"}, {"green", "绿色", "🟩"},     {"mint", "薄荷绿", "🟩"},
    {"cyan", "青色", "🟦"},   {"azure", "天蓝色", "🟦"},   {"blue", "蓝色", "🟦"},
    {"violet", "紫色", "🟪"}, {"magenta", "品红色", "🟪"}, {"rose", "玫瑰色", "🟥"},
};

absl::Status CheckOptions(const SyntheticOptions& o) {
  if (o.num_samples <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic dataset needs num_samples > 0, got ", o.num_samples));
  }
  if (o.num_classes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic dataset needs num_classes > 0, got ", o.num_classes));
  }
  if (o.width < 1 || o.height < 1 || o.width > 16384 || o.height > 16384) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic image size ", o.width, "x", o.height, " is not in 1..16384"));
  }
  if (o.quality < 1 || o.quality > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG quality ", o.quality, " is not in 1..100"));
  }
  return CheckShardLimits(o.per_shard, o.max_shard_bytes);
}

}  // namespace

std::string SyntheticClassName(int label) { return absl::StrFormat("class_%03d", label); }

std::vector<int> SyntheticLabels(int64_t num_samples, int num_classes, uint64_t seed) {
  std::vector<int> labels;
  if (num_samples <= 0 || num_classes <= 0) return labels;
  const std::vector<int64_t> perm = SeededPermutation(num_samples, seed);
  labels.reserve(perm.size());
  for (int64_t p : perm) labels.push_back(static_cast<int>(p % num_classes));
  return labels;
}

std::vector<uint8_t> RenderSyntheticImage(const SyntheticOptions& options, int64_t index,
                                          int label) {
  const int w = std::max(options.width, 1), h = std::max(options.height, 1);
  SplitMix64 rng(SampleSeed(options.seed, index));
  const Look look = DrawLook(options, label, rng);  // the noise below continues `rng`
  double base[3];
  HsvToRgb(look.hue, look.sat, look.val, base);
  // Stripe period relative to the image, so the pattern survives resizing;
  // three period families spread neighbouring classes further apart.
  const double period = std::min(w, h) * (0.18 + 0.08 * (label % 3)) + 2.0;
  constexpr int kNoiseAmp = 10;  // +-10 levels of uniform pixel noise

  // The stripe is sin(2*pi*(x*cos + y*sin)/period + phase), read from a table
  // indexed by the phase in 1/kLut turns: ~10x faster than std::sin per pixel,
  // which matters for photo-sized images.
  constexpr int kLut = 4096;
  static const std::vector<float> shade_lut = [] {
    std::vector<float> t(kLut);
    for (int i = 0; i < kLut; ++i) t[i] = static_cast<float>(std::sin(2 * kPi * i / kLut));
    return t;
  }();
  const double dx = std::cos(look.angle) * kLut / period, dy = std::sin(look.angle) * kLut / period;
  // Keeps the table index positive whatever the angle (|x*dx + y*dy| < 2^40).
  const double bias = look.phase / (2 * kPi) * kLut + static_cast<double>(int64_t{1} << 40);
  float base255[3];
  for (int c = 0; c < 3; ++c) base255[c] = static_cast<float>(255.0 * base[c]);
  const float lo = static_cast<float>(1.0 - look.depth), amp = static_cast<float>(look.depth);

  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  uint8_t* out = rgb.data();
  for (int y = 0; y < h; ++y) {
    const double row = y * dy + bias;
    for (int x = 0; x < w; ++x) {
      const int64_t turn = static_cast<int64_t>(row + x * dx);
      const float shade = lo + amp * shade_lut[static_cast<size_t>(turn & (kLut - 1))];
      const uint64_t r = rng.Next();
      for (int c = 0; c < 3; ++c) {
        const int noise =
            static_cast<int>(((r >> (16 * c)) & 0xFFFF) % (2 * kNoiseAmp + 1)) - kNoiseAmp;
        // NOLINTNEXTLINE(bugprone-incorrect-roundings): colour times shade is never negative
        const int v = static_cast<int>(base255[c] * shade + 0.5f) + noise;
        *out++ = static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
    }
  }
  return rgb;
}

std::string SyntheticCaption(const SyntheticOptions& options, int64_t index, int label) {
  SplitMix64 rng(SampleSeed(options.seed, index));
  const Look look = DrawLook(options, label, rng);
  const double turns = look.hue - std::floor(look.hue);
  const ColourName& colour = kColourNames[static_cast<int>(std::floor(turns * 12 + 0.5)) % 12];
  // The stripes run across the direction the shade varies in; their angle is measured
  // from the horizontal (90 is vertical) and rounded to 5 degrees, so captions share
  // words as images share angles.
  const int degrees = static_cast<int>(std::lround((look.angle / kPi * 180 + 90) / 5)) * 5 % 180;
  static constexpr const char* kWidths[3] = {"thin", "medium", "wide"};
  std::string caption = absl::StrCat(
      "a ", look.val < 0.7 ? "dark" : "bright", ", ", look.sat < 0.7 ? "muted" : "vivid", " ",
      colour.english, " picture of ", kWidths[label % 3], " stripes at ", degrees, " degrees");
  if (index % 4 == 1) absl::StrAppend(&caption, " (", colour.chinese, "的条纹)");
  if (index % 4 == 3) absl::StrAppend(&caption, " ", colour.emoji, "✨");
  return caption;
}

absl::StatusOr<PackSummary> WriteSyntheticDataset(const std::string& out_dir,
                                                  const SyntheticOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  if (absl::Status s = PrepareOutputDir(out_dir); !s.ok()) return s;
  const std::vector<int> labels =
      SyntheticLabels(options.num_samples, options.num_classes, options.seed);
  std::vector<std::string> class_names;
  class_names.reserve(options.num_classes);
  for (int c = 0; c < options.num_classes; ++c) class_names.push_back(SyntheticClassName(c));

  ShardWriter writer({out_dir, options.per_shard, options.max_shard_bytes});
  const JpegOptions jpeg{options.quality, ChromaSubsampling::k420, false};
  const int threads = ResolveThreads(options.threads);

  std::function<absl::StatusOr<std::string>(int64_t)> produce = [&](int64_t i) {
    const std::vector<uint8_t> rgb = RenderSyntheticImage(options, i, labels[i]);
    return EncodeJpeg(rgb.data(), options.width, options.height, jpeg);
  };
  std::function<absl::Status(int64_t, absl::StatusOr<std::string>&)> consume =
      [&](int64_t i, absl::StatusOr<std::string>& jpg) -> absl::Status {
    if (!jpg.ok()) {
      return absl::Status(jpg.status().code(),
                          absl::StrCat("sample ", i, ": ", jpg.status().message()));
    }
    const int label = labels[i];
    const std::string caption =
        options.captions ? SyntheticCaption(options, i, label) : std::string();
    return writer.AddSample(absl::StrFormat("%08d", i), [&](int64_t count) {
      // Copies: make_fields may run twice (on rotation).
      std::vector<SampleField> fields = {{"jpg", *jpg}};
      if (options.captions) fields.emplace_back("txt", caption);
      std::vector<std::string> json;
      if (options.labels) {
        json.push_back(absl::StrCat("\"label\": ", label, ", \"class\": \"", class_names[label],
                                    "\", \"count\": ", count));
      }
      if (options.captions) json.push_back(absl::StrCat("\"caption\": ", JsonQuote(caption)));
      if (options.captions || !options.labels) {
        json.push_back(
            absl::StrCat("\"width\": ", options.width, ", \"height\": ", options.height));
      }
      fields.emplace_back("json", absl::StrCat("{", absl::StrJoin(json, ", "), "}"));
      if (options.labels) fields.emplace_back("cls", absl::StrCat(label));
      return fields;
    });
  };
  absl::Status s = RunOrdered<absl::StatusOr<std::string>>(options.num_samples, threads,
                                                           4 * threads, produce, consume);
  if (!s.ok()) return s;
  PackSummary summary;
  if (!options.labels) class_names.clear();
  if (absl::Status f = FinishDataset(out_dir, writer, options.labels ? options.num_classes : 0,
                                     class_names, summary);
      !f.ok()) {
    return f;
  }
  return summary;
}

}  // namespace shardcast::pack

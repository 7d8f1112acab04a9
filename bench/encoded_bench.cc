// Encoded delivery at the image library, per image and one thread, on the same JPEGs:
// (a) the server's CPU in server delivery (DecodeAndTransform of bytes in memory)
//     against encoded delivery (PlanEncodedSample, the bytes copied into an
//     EncodedImage, serialized), with the lossless cut for random crops;
// (b) the bytes on the wire per image for each;
// (c) the client's decode (DecodeWithCrop) of the whole stored image against the cut.
//
//   encoded_bench --dir DIR [--seconds S] [--rounds R] [--resize 256] [--crop 224]
//                 [--dct-scaling]
//
// CPU is the thread's CPU time (the machine is shared); rows run interleaved, R rounds,
// and each row reports its median round. Random crops are drawn with seed 1000 + the
// file's index, as a job's per-sample seeds would differ.
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_timing.h"
#include "common/image/image_transform.h"
#include "common/image/jpeg_lossless_cut.h"
#include "proto/encoded_image_proto.h"
#include "shardcast/v1/shardcast.pb.h"

namespace {

namespace fs = std::filesystem;

uint64_t SeedOf(size_t index) { return 1000 + index; }

// CPU microseconds per image of fn(i) over the n images, cycling for at least
// `seconds` after one warm-up pass; -1 if fn failed.
double MicrosPerImage(size_t n, double seconds, const std::function<bool(size_t)>& fn) {
  const double rate = shardcast::bench::ItemsPerCpuSecond(n, seconds, fn);
  return rate < 0 ? -1 : 1e6 / rate;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// The server's work for one sample in encoded delivery; `cut_random` cuts when the
// crop leaves something to cut and the cut succeeds, else sends the stored bytes.
// Returns the serialized EncodedImage's size, 0 on error.
size_t ServeEncoded(const std::string& stored, const shardcast::TransformSpec& spec, uint64_t seed,
                    bool cut_random, std::string* wire) {
  absl::StatusOr<shardcast::EncodedPlan> plan = shardcast::PlanEncodedSample(stored, spec, seed);
  if (!plan.ok()) return 0;
  shardcast::v1::EncodedImage message;
  absl::StatusOr<shardcast::LosslessCut> cut = absl::FailedPreconditionError("no cut");
  if (cut_random && spec.mode == shardcast::TransformMode::kRandom &&
      plan->info.format == shardcast::ImageFormat::kJpeg) {
    absl::StatusOr<shardcast::SourceRect> needed =
        shardcast::SourcePixelsRead(plan->info, plan->crop, spec.dct_scaling);
    if (!needed.ok()) return 0;
    cut = shardcast::CutJpegLosslessly(stored, plan->info, *needed);
  }
  if (cut.ok()) {
    message.set_data(cut->bytes);
    shardcast::SetWireCrop(plan->crop, &cut->window, &message);
  } else {
    message.set_data(stored.data(), stored.size());
    shardcast::SetWireCrop(plan->crop, nullptr, &message);
  }
  wire->clear();
  if (!message.SerializeToString(wire)) return 0;
  return wire->size();
}

struct Row {
  Row(std::string row_name, std::function<bool(size_t)> row_fn)
      : name(std::move(row_name)), fn(std::move(row_fn)) {}
  std::string name;
  std::function<bool(size_t)> fn;
  std::vector<double> micros;  // one per round
  double Micros() const { return Median(micros); }
};

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  double seconds = 2.0;
  int rounds = 3;
  shardcast::TransformSpec center;
  center.mode = shardcast::TransformMode::kCenter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--dir") {
      dir = next();
    } else if (a == "--seconds") {
      seconds = std::atof(next().c_str());
    } else if (a == "--rounds") {
      rounds = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--resize") {
      center.resize = std::atoi(next().c_str());
    } else if (a == "--crop") {
      center.crop = std::atoi(next().c_str());
    } else if (a == "--dct-scaling") {
      center.dct_scaling = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s --dir DIR [--seconds S] [--rounds R] [--resize 256] [--crop 224] "
                   "[--dct-scaling]\n",
                   argv[0]);
      return 2;
    }
  }
  shardcast::TransformSpec random = center;
  random.mode = shardcast::TransformMode::kRandom;
  if (dir.empty()) {
    std::fprintf(stderr, "--dir DIR of JPEGs is required (bench/make_photo_corpus.py)\n");
    return 2;
  }
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg" || ext == ".JPEG")) {
      paths.push_back(e.path());
    }
  }
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> files;
  size_t stored_bytes = 0;
  for (const fs::path& p : paths) {
    files.push_back(shardcast::bench::ReadFile(p));
    stored_bytes += files.back().size();
  }
  if (files.empty()) {
    std::fprintf(stderr, "no .jpg files in %s\n", dir.c_str());
    return 1;
  }
  const size_t n = files.size();

  // (b) and (c)'s inputs: each image's random crop, and its cut when it has one.
  std::string wire;
  size_t wire_center = 0, wire_random = 0, wire_cut = 0, cut_count = 0;
  std::vector<shardcast::SampleCrop> random_crops(n);
  std::vector<shardcast::LosslessCut> cuts(n);
  std::vector<bool> has_cut(n, false);
  for (size_t i = 0; i < n; ++i) {
    const size_t c = ServeEncoded(files[i], center, SeedOf(i), false, &wire);
    const size_t r = ServeEncoded(files[i], random, SeedOf(i), false, &wire);
    const size_t k = ServeEncoded(files[i], random, SeedOf(i), true, &wire);
    if (c == 0 || r == 0 || k == 0) {
      std::fprintf(stderr, "%s: not servable in encoded delivery\n", paths[i].c_str());
      return 1;
    }
    wire_center += c;
    wire_random += r;
    wire_cut += k;
    absl::StatusOr<shardcast::EncodedPlan> plan =
        shardcast::PlanEncodedSample(files[i], random, SeedOf(i));
    random_crops[i] = plan->crop;
    absl::StatusOr<shardcast::SourceRect> needed =
        shardcast::SourcePixelsRead(plan->info, plan->crop, random.dct_scaling);
    absl::StatusOr<shardcast::LosslessCut> cut =
        shardcast::CutJpegLosslessly(files[i], plan->info, *needed);
    if (cut.ok()) {
      cuts[i] = *std::move(cut);
      has_cut[i] = true;
      ++cut_count;
    }
  }

  std::vector<uint8_t> out(3 * static_cast<size_t>(center.crop) * center.crop);
  std::vector<Row> rows;
  rows.push_back(
      {"server delivery, center: DecodeAndTransform", [&](size_t i) {
         return shardcast::DecodeAndTransform(files[i], center, SeedOf(i), out.data()).ok();
       }});
  rows.push_back({"encoded, center: plan + EncodedImage", [&](size_t i) {
                    return ServeEncoded(files[i], center, SeedOf(i), false, &wire) > 0;
                  }});
  rows.push_back(
      {"server delivery, random: DecodeAndTransform", [&](size_t i) {
         return shardcast::DecodeAndTransform(files[i], random, SeedOf(i), out.data()).ok();
       }});
  rows.push_back({"encoded, random: plan + EncodedImage", [&](size_t i) {
                    return ServeEncoded(files[i], random, SeedOf(i), false, &wire) > 0;
                  }});
  rows.push_back({"encoded, random + lossless cut", [&](size_t i) {
                    return ServeEncoded(files[i], random, SeedOf(i), true, &wire) > 0;
                  }});
  rows.push_back({"client, center: DecodeWithCrop (whole image)", [&](size_t i) {
                    absl::StatusOr<shardcast::EncodedPlan> plan =
                        shardcast::PlanEncodedSample(files[i], center, SeedOf(i));
                    return plan.ok() && shardcast::DecodeWithCrop(files[i], plan->crop,
                                                                  center.dct_scaling, out.data())
                                            .ok();
                  }});
  rows.push_back({"client, random: DecodeWithCrop (whole image)", [&](size_t i) {
                    return shardcast::DecodeWithCrop(files[i], random_crops[i], random.dct_scaling,
                                                     out.data())
                        .ok();
                  }});
  rows.push_back({"client, random: DecodeWithCrop (the cut)", [&](size_t i) {
                    if (!has_cut[i]) {
                      return shardcast::DecodeWithCrop(files[i], random_crops[i],
                                                       random.dct_scaling, out.data())
                          .ok();
                    }
                    return shardcast::DecodeWithCrop(cuts[i].bytes, random_crops[i],
                                                     random.dct_scaling, out.data(), nullptr,
                                                     &cuts[i].window)
                        .ok();
                  }});
  // Interleaved rounds: a busy neighbour slows a round, not a row.
  for (int round = 0; round < rounds; ++round) {
    for (Row& r : rows) {
      const double us = MicrosPerImage(n, seconds, r.fn);
      if (us < 0) {
        std::fprintf(stderr, "row \"%s\" failed\n", r.name.c_str());
        return 1;
      }
      r.micros.push_back(us);
    }
  }

  std::printf(
      "encoded_bench: %zu JPEGs in %s, mean %.1f KB; resize %d, crop %d, DCT scaling %s; "
      "median of %d rounds of %.1f CPU s per row, 1 thread\n",
      n, dir.c_str(), stored_bytes / 1024.0 / n, center.resize, center.crop,
      center.dct_scaling ? "on" : "off", rounds, seconds);
  const auto micros = [&](const std::string& name) {
    for (const Row& r : rows) {
      if (r.name == name) return r.Micros();
    }
    return -1.0;
  };
  std::printf("\n(a, c) CPU per image\n%-48s %12s %14s\n", "row", "us/image", "x reference");
  for (const Row& r : rows) {
    // Each row against the one it replaces: the server's decode, or the whole image's.
    std::string reference;
    if (r.name.rfind("encoded, center", 0) == 0) {
      reference = "server delivery, center: DecodeAndTransform";
    } else if (r.name.rfind("encoded, random", 0) == 0) {
      reference = "server delivery, random: DecodeAndTransform";
    } else if (r.name == "client, random: DecodeWithCrop (the cut)") {
      reference = "client, random: DecodeWithCrop (whole image)";
    }
    std::printf("%-48s %12.1f", r.name.c_str(), r.Micros());
    if (!reference.empty()) std::printf(" %14.3f", r.Micros() / micros(reference));
    std::printf("\n");
  }
  const double pixels = 3.0 * center.crop * center.crop;
  std::printf("\n(b) wire bytes per image (EncodedImage serialized; server: the pixels)\n");
  std::printf("%-48s %12s %14s\n", "delivery", "bytes/image", "x server");
  const std::pair<const char*, double> wire_rows[] = {
      {"server delivery (3 x C x C)", pixels},
      {"encoded, center", static_cast<double>(wire_center) / n},
      {"encoded, random", static_cast<double>(wire_random) / n},
      {"encoded, random + lossless cut", static_cast<double>(wire_cut) / n}};
  for (const auto& [name, bytes] : wire_rows) {
    std::printf("%-48s %12.0f %14.3f\n", name, bytes, bytes / pixels);
  }
  std::printf("lossless cut made for %zu of %zu random crops (the rest read the whole image)\n",
              cut_count, n);
  const double cut_saved = static_cast<double>(wire_random - wire_cut) / n;
  const double cut_cpu =
      micros("encoded, random + lossless cut") - micros("encoded, random: plan + EncodedImage");
  const double decode_saved = micros("client, random: DecodeWithCrop (whole image)") -
                              micros("client, random: DecodeWithCrop (the cut)");
  std::printf(
      "the cut: %.0f bytes/image saved (%.1f%% of encoded random) for %.1f us of server CPU "
      "per image; the client's decode %.1f us/image faster\n",
      cut_saved, 100.0 * cut_saved / (static_cast<double>(wire_random) / n), cut_cpu, decode_saved);
  return 0;
}

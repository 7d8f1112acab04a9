// Decode + transform throughput per thread, side by side in one run: raw
// TurboJPEG decode, shardcast's DecodeAndTransform, and the Python reference.
//
//   decode_bench [--dir DIR | --generate N [--size WxH]] [--seconds S] [--rounds R]
//                [--python PY --script FILE]
//   decode_bench --dir DIR --dump-transforms OUT
//
// Two more rows time a libjpeg decompressor's setup per image, fresh against kept per
// thread (what a decoder state per thread would save).
//
// --only TEXT keeps the raw row and the rows whose name contains TEXT (for a profile:
// perf record build/bench/decode_bench --dir DIR --only "center 256/224, DCT scaling on").
//
// --dump-transforms writes, instead of measuring, each file's DecodeAndTransform
// results (center 256/224 and RandomResizedCrop 224 + flip, DCT scaling on and off)
// and OUT/jobs.json describing them, for bench/photo_conformance.py to compare with
// torchvision on PIL's decode of the same bytes.
//
// With --generate (default 200), writes N photo-like 500x375 (--size) JPEGs (quality 90,
// 4:2:0: ImageNet-sized files) to a temp dir first; the Python reference reads
// the same files.
#include <stdlib.h>
#include <time.h>
#include <turbojpeg.h>

// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_timing.h"
#include "common/image/image_transform.h"

namespace {

namespace fs = std::filesystem;

// Gradients, shapes and sensor-like noise; sized so that a 500x375 q90 4:2:0
// JPEG is about as big as an ImageNet photo (~110 KB).
std::vector<uint8_t> PhotoLike(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 19.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double cx = u(rng) * w, cy = u(rng) * h, rad = (0.2 + 0.3 * u(rng)) * std::min(w, h);
  const double phase = u(rng) * 6.28, fx = 0.02 + 0.1 * u(rng), fy = 0.02 + 0.1 * u(rng);
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const bool disc = (x - cx) * (x - cx) + (y - cy) * (y - cy) < rad * rad;
      for (int c = 0; c < 3; ++c) {
        double v = 128 + 80 * std::sin(phase + c + 3.0 * x / w + 2.0 * y / h) +
                   30 * std::sin(fx * x * (c + 1)) * std::cos(fy * y);
        if (disc) v = 0.5 * v + 60 * c + 20 * std::sin(0.3 * x + 0.2 * y);
        // Mid-frequency texture (foliage, fabric): what makes photos expensive.
        v += 30 * std::sin(0.9 * x + 0.4 * y + c) * std::sin(0.35 * y + 0.15 * x * (c + 1));
        v += noise(rng);
        px[(static_cast<size_t>(y) * w + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  }
  return px;
}

std::string Encode(const std::vector<uint8_t>& px, int w, int h) {
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  std::string out;
  if (tjCompress2(tj, px.data(), w, w * 3, h, TJPF_RGB, &buf, &size, TJSAMP_420, 90, 0) == 0) {
    out.assign(reinterpret_cast<char*>(buf), size);
  }
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

// Images per CPU second of `fn` over `files`, cycling for at least `seconds`
// (after one warm-up pass). Returns -1 if fn failed.
double Measure(const std::vector<std::string>& files, double seconds,
               const std::function<bool(const std::string&)>& fn) {
  return shardcast::bench::ItemsPerCpuSecond(files.size(), seconds,
                                             [&](size_t i) { return fn(files[i]); });
}

struct RawDecoder {
  tjhandle tj = tjInitDecompress();
  std::vector<uint8_t> buf;
  ~RawDecoder() { tjDestroy(tj); }
  // Full-size (or num/denom) decode to RGB, as anyone using TurboJPEG would.
  bool Decode(const std::string& jpeg, int num, int denom) {
    int w, h, ss, cs;
    const auto* p = reinterpret_cast<const unsigned char*>(jpeg.data());
    if (tjDecompressHeader3(tj, p, jpeg.size(), &w, &h, &ss, &cs) != 0) return false;
    const tjscalingfactor sf{num, denom};
    w = TJSCALED(w, sf);
    h = TJSCALED(h, sf);
    buf.resize(static_cast<size_t>(w) * h * 3);
    return tjDecompress2(tj, p, jpeg.size(), buf.data(), w, w * 3, h, TJPF_RGB, 0) == 0;
  }
};

// What a libjpeg decompressor costs per image beyond the decode itself: a fresh one
// (create, read the header, destroy: what the region decode does for every image, so
// no image decodes with tables left by the previous one) against one kept per thread
// (read the header, abort). The difference between the two rows is what one
// decompressor per thread would save.
class DecompressorSetup {
 public:
  DecompressorSetup() {
    kept_.err = SetUpErrors();
    jpeg_create_decompress(&kept_);
  }
  ~DecompressorSetup() { jpeg_destroy_decompress(&kept_); }

  bool Fresh(const std::string& jpeg) {
    jpeg_decompress_struct cinfo{};
    cinfo.err = SetUpErrors();
    jpeg_create_decompress(&cinfo);
    const bool ok = ReadHeader(&cinfo, jpeg);
    jpeg_destroy_decompress(&cinfo);
    return ok;
  }
  bool Reused(const std::string& jpeg) {
    const bool ok = ReadHeader(&kept_, jpeg);
    jpeg_abort_decompress(&kept_);
    return ok;
  }

 private:
  jpeg_error_mgr* SetUpErrors() {
    jpeg_std_error(&err_);
    err_.error_exit = [](j_common_ptr cinfo) {
      std::longjmp(static_cast<DecompressorSetup*>(cinfo->client_data)->jump_, 1);
    };
    return &err_;
  }
  bool ReadHeader(jpeg_decompress_struct* cinfo, const std::string& jpeg) {
    cinfo->client_data = this;
    if (setjmp(jump_) != 0) return false;
    jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(jpeg.data()),
                 static_cast<unsigned long>(jpeg.size()));
    jpeg_read_header(cinfo, TRUE);
    jpeg_calc_output_dimensions(cinfo);
    return true;
  }

  jpeg_error_mgr err_{};
  std::jmp_buf jump_;
  jpeg_decompress_struct kept_{};
};

// Runs the Python reference; parses "images_per_s NAME VALUE" lines.
std::vector<std::pair<std::string, double>> RunPython(const std::string& python,
                                                      const std::string& script,
                                                      const std::string& dir, double seconds,
                                                      int rounds) {
  std::vector<std::pair<std::string, double>> out;
  const std::string cmd = python + " " + script + " --dir " + dir + " --seconds " +
                          std::to_string(seconds) + " --rounds " + std::to_string(rounds) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char line[1024];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    char name[256];
    double v;
    if (std::sscanf(line, "images_per_s %255s %lf", name, &v) == 2) {
      out.emplace_back(name, v);
    } else {
      std::fprintf(stderr, "python: %s", line);
    }
  }
  pclose(p);
  return out;
}

// Writes OUT/<i>.<center|random>.dct<0|1>.u8 (planar uint8 224x224) and OUT/jobs.json.
int DumpTransforms(const std::vector<fs::path>& paths, const std::vector<std::string>& files,
                   const std::string& out_dir) {
  fs::create_directories(out_dir);
  std::ofstream jobs(out_dir + "/jobs.json");
  jobs << "[\n";
  std::vector<uint8_t> out(3 * 224 * 224);
  bool first = true;
  for (size_t i = 0; i < files.size(); ++i) {
    absl::StatusOr<shardcast::ImageInfo> info = shardcast::ReadImageInfo(files[i]);
    if (!info.ok()) {
      std::fprintf(stderr, "%s: %s\n", paths[i].c_str(), info.status().ToString().c_str());
      return 1;
    }
    const uint64_t seed = 1000 + i;
    const shardcast::CropParams p =
        shardcast::RandomResizedCropParams(info->width, info->height, seed);
    for (const bool random : {false, true}) {
      for (const bool dct : {false, true}) {
        shardcast::TransformSpec spec;
        spec.mode = random ? shardcast::TransformMode::kRandom : shardcast::TransformMode::kCenter;
        spec.dct_scaling = dct;
        if (absl::Status s = shardcast::DecodeAndTransform(files[i], spec, seed, out.data());
            !s.ok()) {
          std::fprintf(stderr, "%s: %s\n", paths[i].c_str(), s.ToString().c_str());
          return 1;
        }
        const std::string output = out_dir + "/" + std::to_string(i) +
                                   (random ? ".random" : ".center") + (dct ? ".dct1" : ".dct0") +
                                   ".u8";
        std::ofstream(output, std::ios::binary)
            .write(reinterpret_cast<const char*>(out.data()), out.size());
        jobs << (first ? "" : ",\n") << "{\"jpeg\": \"" << paths[i].string() << "\", \"output\": \""
             << output << "\", \"dct\": " << (dct ? "true" : "false");
        if (random) {
          jobs << ", \"op\": \"resized_crop\", \"top\": " << p.top << ", \"left\": " << p.left
               << ", \"crop_height\": " << p.height << ", \"crop_width\": " << p.width
               << ", \"crop\": 224, \"flip\": " << (p.flip ? "true" : "false") << "}";
        } else {
          jobs << ", \"op\": \"center\", \"resize\": 256, \"crop\": 224}";
        }
        first = false;
      }
    }
  }
  jobs << "\n]\n";
  std::printf("decode_bench: %zu files' transforms in %s/jobs.json\n", files.size(),
              out_dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, python = "/usr/bin/python3", script, dump_dir, only;
  int generate = 200;
  int gen_w = 500, gen_h = 375;
  double seconds = 2.0;
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--dir")
      dir = next();
    else if (a == "--generate")
      generate = std::atoi(next().c_str());
    else if (a == "--size") {
      if (std::sscanf(next().c_str(), "%dx%d", &gen_w, &gen_h) != 2 || gen_w < 1 || gen_h < 1) {
        std::fprintf(stderr, "--size wants WxH\n");
        return 2;
      }
    } else if (a == "--seconds")
      seconds = std::atof(next().c_str());
    else if (a == "--rounds")
      rounds = std::max(1, std::atoi(next().c_str()));
    else if (a == "--python")
      python = next();
    else if (a == "--script")
      script = next();
    else if (a == "--only")
      only = next();
    else if (a == "--dump-transforms")
      dump_dir = next();
    else {
      std::fprintf(
          stderr,
          "usage: %s [--dir DIR | --generate N [--size WxH]] [--seconds S] [--rounds R] "
          "[--python PY] "
          "[--script bench/python_reference_decode.py] [--only TEXT] [--dump-transforms OUT]\n",
          argv[0]);
      return 2;
    }
  }
  std::string temp_dir;
  if (dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "shardcast_decode_bench_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    dir = temp_dir = tmpl;
    for (int i = 0; i < generate; ++i) {
      const std::string jpeg = Encode(PhotoLike(gen_w, gen_h, 1000 + i), gen_w, gen_h);
      char name[64];
      std::snprintf(name, sizeof(name), "/img_%05d.jpg", i);
      std::ofstream(dir + name, std::ios::binary).write(jpeg.data(), jpeg.size());
    }
  }
  std::vector<std::string> files;
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg" || ext == ".JPEG")) {
      paths.push_back(e.path());
    }
  }
  std::sort(paths.begin(), paths.end());
  size_t bytes = 0;
  for (const fs::path& p : paths) {
    files.push_back(shardcast::bench::ReadFile(p));
    bytes += files.back().size();
  }
  if (files.empty()) {
    std::fprintf(stderr, "no .jpg files in %s\n", dir.c_str());
    return 1;
  }
  if (!dump_dir.empty()) {
    const int rc = DumpTransforms(paths, files, dump_dir);
    if (!temp_dir.empty()) fs::remove_all(temp_dir);
    return rc;
  }
  std::printf(
      "decode_bench: %zu JPEGs in %s, mean %.1f KB; best of %d rounds of %.1f CPU s per row, "
      "1 thread each, images per thread-CPU-second\n",
      files.size(), dir.c_str(), bytes / 1024.0 / files.size(), rounds, seconds);

  RawDecoder raw;
  std::vector<uint8_t> out(3 * 224 * 224);
  auto ours = [&](shardcast::TransformMode mode, bool dct) {
    return [&, mode, dct](const std::string& f) {
      shardcast::TransformSpec spec;
      spec.mode = mode;
      spec.dct_scaling = dct;
      return shardcast::DecodeAndTransform(f, spec, 12345, out.data()).ok();
    };
  };
  // Rows run interleaved, `rounds` times, and each keeps its best round: on a
  // shared machine, contention only ever slows a round down, and interleaving
  // keeps a slow period from landing on one row only.
  struct Row {
    std::string name;
    std::function<bool(const std::string&)> fn;
    double ips = 0;
  };
  std::vector<Row> rows;
  rows.push_back({"raw TurboJPEG decode, full size",
                  [&](const std::string& f) { return raw.Decode(f, 1, 1); }});
  for (auto [num, denom] : {std::pair{7, 8}, std::pair{3, 4}, std::pair{1, 2}}) {
    rows.push_back({"raw TurboJPEG decode at " + std::to_string(num) + "/" + std::to_string(denom),
                    [&, num = num, denom = denom](const std::string& f) {
                      return raw.Decode(f, num, denom);
                    }});
  }
  rows.push_back(
      {"ours center 256/224, DCT scaling on", ours(shardcast::TransformMode::kCenter, true)});
  rows.push_back(
      {"ours center 256/224, DCT scaling off", ours(shardcast::TransformMode::kCenter, false)});
  rows.push_back(
      {"ours random 224 (RRC+flip), DCT on", ours(shardcast::TransformMode::kRandom, true)});
  const std::string ours_center_row = "ours center 256/224, DCT scaling on";
  // The transform alone, on already-decoded images (what decode leaves to it).
  std::vector<shardcast::RgbImage> decoded;
  for (const std::string& f : files) {
    absl::StatusOr<shardcast::RgbImage> img = shardcast::DecodeImage(f);
    if (img.ok()) decoded.push_back(*std::move(img));
  }
  size_t next_image = 0;
  rows.push_back({"ours center 256/224, transform only (no decode)", [&](const std::string&) {
                    shardcast::TransformSpec spec;
                    const shardcast::RgbImage& img = decoded[next_image++ % decoded.size()];
                    return shardcast::ApplyTransform(img, spec, 0, out.data()).ok();
                  }});
  DecompressorSetup setup;
  rows.push_back({"libjpeg decompressor per image: create+header+destroy",
                  [&](const std::string& f) { return setup.Fresh(f); }});
  rows.push_back({"libjpeg decompressor per thread: header+abort",
                  [&](const std::string& f) { return setup.Reused(f); }});
  // --only: the raw row and the rows whose name contains the text (to profile one).
  for (size_t i = rows.size(); i-- > 1;) {
    if (!only.empty() && rows[i].name.find(only) == std::string::npos) rows.erase(rows.begin() + i);
  }
  for (int round = 0; round < rounds; ++round) {
    for (Row& r : rows) r.ips = std::max(r.ips, Measure(files, seconds, r.fn));
  }
  if (!script.empty()) {
    for (const auto& [name, v] : RunPython(python, script, dir, seconds, rounds)) {
      rows.push_back({"python " + name, nullptr, v});
    }
  }
  const double raw_ips = rows[0].ips;
  double py_ips = -1;
  for (const Row& r : rows) {
    if (r.name == "python PIL+torchvision(Resize256,CenterCrop224)->uint8") py_ips = r.ips;
  }
  std::printf("\n%-58s %12s %10s %10s\n", "pipeline (1 thread)", "images/s", "x raw", "x python");
  for (const Row& r : rows) {
    std::printf("%-58s %12.1f %10.2f", r.name.c_str(), r.ips, r.ips / raw_ips);
    if (py_ips > 0) std::printf(" %10.2f", r.ips / py_ips);
    std::printf("\n");
  }
  // The targets of issue 13: per core, against the raw full-size decode of the same files.
  for (const auto& [name, target] : {std::pair<std::string, double>{ours_center_row, 1.0},
                                     {"ours random 224 (RRC+flip), DCT on", 1.2}}) {
    for (const Row& r : rows) {
      if (r.name == name) {
        std::printf("target: %s / raw = %.2f (target >= %.1f)\n", name.c_str(), r.ips / raw_ips,
                    target);
      }
    }
  }
  if (!temp_dir.empty()) fs::remove_all(temp_dir);
  return 0;
}

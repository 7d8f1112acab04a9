// A generated, learnable image-classification dataset written as WebDataset
// shards: class = hue + stripe orientation, with per-sample jitter and noise;
// optionally with a caption that describes each image (image-text pairs) and
// without labels (img2dataset's layout).
#ifndef SHARDCAST_TOOLS_PACK_SYNTHETIC_DATASET_H_
#define SHARDCAST_TOOLS_PACK_SYNTHETIC_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/pack/tar_writer.h"

namespace shardcast::pack {

struct SyntheticOptions {
  int64_t num_samples = 1000;
  int num_classes = 10;
  int width = 64;
  int height = 64;
  int64_t per_shard = 1000;     // samples per shard; 0 = no count limit
  int64_t max_shard_bytes = 0;  // 0 = no byte limit
  uint64_t seed = 0;
  int quality = 90;       // JPEG quality, 4:2:0 baseline
  int threads = 0;        // encoder threads; 0 = hardware concurrency
  bool captions = false;  // write KEY.txt (SyntheticCaption) and "caption" in KEY.json
  bool labels = true;     // write KEY.cls and the label in KEY.json
};

// The label of every sample: a seeded permutation of i % C, so classes are
// balanced (sizes differ by at most one) and interleaved across shards.
std::vector<int> SyntheticLabels(int64_t num_samples, int num_classes, uint64_t seed);

// RGB pixels (height x width x 3) of sample `index` with `label`, a pure
// function of (options.seed, options.num_classes, size, index, label): hue
// label/C around the colour wheel and stripes at angle label*180/C degrees,
// with random phase, small hue/saturation/brightness jitter and pixel noise.
std::vector<uint8_t> RenderSyntheticImage(const SyntheticOptions& options, int64_t index,
                                          int label);

// A one-line English caption of the image RenderSyntheticImage draws for
// (index, label): its colour, brightness, saturation, stripe width and angle,
// all read from the same per-sample draws as the pixels. Some captions also
// name the colour in Chinese (index % 4 == 1) or end with emoji (index % 4 == 3),
// so tests see multi-byte UTF-8. A pure function, like the image.
std::string SyntheticCaption(const SyntheticOptions& options, int64_t index, int label);

// Writes OUT_DIR/shard-NNNNNN.tar and OUT_DIR/info.json. Samples are %08d keys
// with, in this order: .jpg; .txt (the caption) with `captions`; .json; .cls
// (the label) with `labels`. The .json holds {"label", "class", "count"} with
// `labels`, then {"caption", "width", "height"} with `captions` (without labels
// and captions: {"width", "height"}). Without labels, info.json has
// num_classes 0 and no class names. Creates OUT_DIR; replaces shards and
// info.json of an earlier run there (files named shard-*.tar, shard-*.tar.tmp,
// info.json), and touches nothing else. Byte-identical output for equal options,
// whatever `threads` is.
absl::StatusOr<PackSummary> WriteSyntheticDataset(const std::string& out_dir,
                                                  const SyntheticOptions& options);

// Class names the synthetic dataset writes: "class_000", "class_001", ...
std::string SyntheticClassName(int label);

}  // namespace shardcast::pack

#endif  // SHARDCAST_TOOLS_PACK_SYNTHETIC_DATASET_H_

// Packs an ImageFolder tree (SRC/class_name/*.jpg|jpeg|png) into WebDataset
// shards, keeping the original image bytes.
#ifndef SHARDCAST_TOOLS_PACK_IMAGE_FOLDER_H_
#define SHARDCAST_TOOLS_PACK_IMAGE_FOLDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/pack/tar_writer.h"

namespace shardcast::pack {

struct PackOptions {
  int64_t per_shard = 1000;     // samples per shard; 0 = no count limit
  int64_t max_shard_bytes = 0;  // 0 = no byte limit
  // Order of samples across shards. Unshuffled: class by class (classes by name,
  // files by name), which gives one-class shards - bad for shard-split training.
  // Shuffled (default): a permutation seeded by `seed` of that order.
  bool shuffle = true;
  uint64_t seed = 0;
  int threads = 0;  // file reader threads; 0 = hardware concurrency
};

// One image found in the tree.
struct ImageFolderEntry {
  std::string path;        // full path of the file
  std::string class_name;  // its class directory's name
  std::string relative;    // path relative to SRC ("class_name/x.jpg")
  int label = 0;           // index of class_name among the sorted class dirs
  std::string extension;   // lower-cased source extension: "jpg", "jpeg" or "png"
};

// The tree's classes (sorted subdirectory names) and images in packing order.
// Files with other extensions and hidden entries are ignored. Errors: SRC is
// missing / not a directory, has no class directories, or no images.
// Like torchvision's ImageFolder, images in subdirectories of a class
// directory belong to that class; symlinks are followed.
struct ImageFolderListing {
  std::vector<std::string> class_names;
  std::vector<ImageFolderEntry> entries;
  std::vector<std::string> warnings;  // e.g. a class directory without images
};
absl::StatusOr<ImageFolderListing> ListImageFolder(const std::string& src_dir,
                                                   const PackOptions& options);

// Writes OUT_DIR/shard-NNNNNN.tar with, per image, KEY.jpg or KEY.png (the
// original bytes, not re-encoded; the extension follows the content, so a
// .jpeg file becomes .jpg - what webdataset's to_tuple("jpg", ...) expects -
// and a PNG misnamed .JPEG becomes .png), KEY.json {"label", "class", "count",
// "file"} and KEY.cls, KEY = "%08d" position in packing order; then
// OUT_DIR/info.json. A file that cannot be read, is empty, or is neither JPEG
// nor PNG is skipped with a warning in the summary; fails only if nothing could
// be packed. Creates OUT_DIR and replaces shards of an earlier run there, like
// WriteSyntheticDataset. Deterministic for equal input, whatever `threads` is.
absl::StatusOr<PackSummary> PackImageFolder(const std::string& src_dir, const std::string& out_dir,
                                            const PackOptions& options);

}  // namespace shardcast::pack

#endif  // SHARDCAST_TOOLS_PACK_IMAGE_FOLDER_H_

// ImageFolder -> shards: list and order the tree, read files on a thread pool,
// write samples in order with one ShardWriter (see pack_pipeline.h).
#include "tools/pack/image_folder.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/json_fields.h"
#include "tools/pack/pack_pipeline.h"

namespace shardcast::pack {
namespace {

namespace fs = std::filesystem;

bool Hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// Lower-cased extension without the dot if it is an image we pack, else "".
std::string ImageExtension(const fs::path& p) {
  std::string ext = absl::AsciiStrToLower(p.extension().string());
  if (ext == ".jpg" || ext == ".jpeg" || ext == ".png") return ext.substr(1);
  return "";
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(std::strerror(errno));
  std::string data;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return absl::UnavailableError(std::strerror(err));
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return data;
}

// The extension a sample's image gets, from its content: "jpg", "png", or ""
// for neither.
std::string SniffImage(const std::string& data) {
  if (data.size() >= 3 && static_cast<unsigned char>(data[0]) == 0xFF &&
      static_cast<unsigned char>(data[1]) == 0xD8 && static_cast<unsigned char>(data[2]) == 0xFF) {
    return "jpg";
  }
  if (data.size() >= 8 && data.compare(0, 8, "\x89PNG\r\n\x1a\n", 8) == 0) return "png";
  return "";
}

// Files under `dir` (recursively, symlinks followed), relative paths sorted.
std::vector<fs::path> ImagesUnder(const fs::path& dir, std::error_code& ec) {
  std::vector<fs::path> out;
  auto it =
      fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::path& p = it->path();
    if (Hidden(p)) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (ImageExtension(p).empty()) continue;
    // A dangling symlink is listed so that reading it fails and is reported,
    // rather than being silently ignored like directories and devices.
    const bool dangling = it->is_symlink() && !fs::exists(it->path());
    if (!it->is_regular_file() && !dangling) continue;
    out.push_back(p.lexically_relative(dir));
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct ReadResult {
  std::string data;
  std::string ext;    // "jpg" / "png"; empty when skipped
  std::string error;  // why it is skipped
};

}  // namespace

absl::StatusOr<ImageFolderListing> ListImageFolder(const std::string& src_dir,
                                                   const PackOptions& options) {
  std::error_code ec;
  if (!fs::exists(src_dir, ec)) {
    return absl::NotFoundError(absl::StrCat("source directory ", src_dir, " does not exist"));
  }
  if (!fs::is_directory(src_dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("source ", src_dir, " is not a directory"));
  }
  ImageFolderListing listing;
  for (const fs::directory_entry& e : fs::directory_iterator(src_dir, ec)) {
    if (!Hidden(e.path()) && e.is_directory()) {
      listing.class_names.push_back(e.path().filename().string());
    }
  }
  if (ec) return absl::UnavailableError(absl::StrCat("cannot list ", src_dir, ": ", ec.message()));
  if (listing.class_names.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no class directories in ", src_dir, " (expected SRC/class_name/image.jpg)"));
  }
  std::sort(listing.class_names.begin(), listing.class_names.end());

  for (size_t label = 0; label < listing.class_names.size(); ++label) {
    const std::string& name = listing.class_names[label];
    const fs::path dir = fs::path(src_dir) / name;
    std::vector<fs::path> files = ImagesUnder(dir, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot list class directory ", dir.string(), ": ", ec.message()));
    }
    if (files.empty()) {
      listing.warnings.push_back(absl::StrCat("class ", label, " '", name, "' (", dir.string(),
                                              ") has no .jpg/.jpeg/.png images"));
    }
    for (const fs::path& rel : files) {
      ImageFolderEntry entry;
      entry.path = (dir / rel).string();
      entry.class_name = name;
      entry.relative = (fs::path(name) / rel).string();
      entry.label = static_cast<int>(label);
      entry.extension = ImageExtension(rel);
      listing.entries.push_back(std::move(entry));
    }
  }
  if (listing.entries.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no .jpg/.jpeg/.png images under the class directories of ", src_dir));
  }
  if (options.shuffle) {
    const std::vector<int64_t> perm =
        SeededPermutation(static_cast<int64_t>(listing.entries.size()), options.seed);
    std::vector<ImageFolderEntry> shuffled;
    shuffled.reserve(perm.size());
    for (int64_t p : perm) shuffled.push_back(std::move(listing.entries[static_cast<size_t>(p)]));
    listing.entries = std::move(shuffled);
  }
  return listing;
}

absl::StatusOr<PackSummary> PackImageFolder(const std::string& src_dir, const std::string& out_dir,
                                            const PackOptions& options) {
  if (absl::Status s = CheckShardLimits(options.per_shard, options.max_shard_bytes); !s.ok()) {
    return s;
  }
  // OUT_DIR directly inside SRC_DIR would be taken for a class directory on
  // the next run (and shift every label after it).
  std::error_code ec;
  const fs::path out_parent = fs::weakly_canonical(out_dir, ec).parent_path();
  if (!ec && fs::exists(src_dir) && out_parent == fs::weakly_canonical(src_dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("output directory ", out_dir,
                                                   " must not be inside the source directory ",
                                                   src_dir, " (it would become a class)"));
  }
  absl::StatusOr<ImageFolderListing> listing = ListImageFolder(src_dir, options);
  if (!listing.ok()) return listing.status();
  if (absl::Status s = PrepareOutputDir(out_dir); !s.ok()) return s;

  PackSummary summary;
  summary.warnings = listing->warnings;
  ShardWriter writer({out_dir, options.per_shard, options.max_shard_bytes});
  const int threads = ResolveThreads(options.threads);
  const std::vector<ImageFolderEntry>& entries = listing->entries;

  std::function<ReadResult(int64_t)> produce = [&](int64_t i) {
    ReadResult r;
    absl::StatusOr<std::string> data = ReadWholeFile(entries[i].path);
    if (!data.ok()) {
      r.error = absl::StrCat("cannot read: ", data.status().message());
    } else if (data->empty()) {
      r.error = "empty file";
    } else if ((r.ext = SniffImage(*data)).empty()) {
      r.error = "neither a JPEG nor a PNG";
    } else {
      r.data = *std::move(data);
    }
    return r;
  };
  std::function<absl::Status(int64_t, ReadResult&)> consume = [&](int64_t i, ReadResult& r) {
    const ImageFolderEntry& e = entries[i];
    if (!r.error.empty()) {
      ++summary.skipped;
      summary.warnings.push_back(absl::StrCat("skipped ", e.path, ": ", r.error));
      return absl::OkStatus();
    }
    return writer.AddSample(absl::StrFormat("%08d", i), [&](int64_t count) {
      return std::vector<SampleField>{
          {r.ext, r.data},  // copied: make_fields may run twice (on rotation)
          {"json",
           absl::StrCat("{\"label\": ", e.label, ", \"class\": ", JsonQuote(e.class_name),
                        ", \"count\": ", count, ", \"file\": ", JsonQuote(e.relative), "}")},
          {"cls", absl::StrCat(e.label)},
      };
    });
  };
  // A window of 8 files per thread keeps readers busy behind one writer while
  // bounding memory to a few dozen images.
  absl::Status s = RunOrdered<ReadResult>(static_cast<int64_t>(entries.size()), threads,
                                          8 * threads, produce, consume);
  if (!s.ok()) return s;
  if (writer.samples() == 0) {
    writer.Close().IgnoreError();
    return absl::InvalidArgumentError(
        absl::StrCat("none of the ", entries.size(), " images under ", src_dir,
                     " could be packed; first: ", summary.warnings[listing->warnings.size()]));
  }
  const int num_classes = static_cast<int>(listing->class_names.size());
  if (absl::Status f = FinishDataset(out_dir, writer, num_classes, listing->class_names, summary);
      !f.ok()) {
    return f;
  }
  return summary;
}

}  // namespace shardcast::pack

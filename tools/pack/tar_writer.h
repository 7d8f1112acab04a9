// Deterministic WebDataset shard writing: one tar file (TarWriter), a rotating
// sequence of shards (ShardWriter), and the dataset's info.json.
#ifndef SHARDCAST_TOOLS_PACK_TAR_WRITER_H_
#define SHARDCAST_TOOLS_PACK_TAR_WRITER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct archive;
struct archive_entry;

namespace shardcast::pack {

// Writes one uncompressed tar (ustar; PAX headers only where ustar cannot hold a
// name) with libarchive. Every header is fixed (mtime 0, uid/gid 0, mode 0644,
// empty uname/gname) so the same members give byte-identical files, and the last
// block is not padded to 10 KiB: the file is exactly
// sum(512 + round_up(size, 512)) + 1024 bytes for ustar-sized names.
// The file is written as PATH.tmp and renamed to PATH by Close(), so a crash
// never leaves a truncated file under the final name. Not thread-safe.
class TarWriter {
 public:
  // Creates (truncates) PATH.tmp. Errors name the path.
  static absl::StatusOr<std::unique_ptr<TarWriter>> Open(const std::string& path);
  ~TarWriter();  // Without Close(): removes PATH.tmp.
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  // Appends a regular file member. `name` is stored verbatim (any '/' makes it
  // a path inside the archive); it must be non-empty ASCII (libarchive encodes
  // other names by the process locale, which would break reproducibility).
  absl::Status AddMember(absl::string_view name, absl::string_view data);
  // Finishes the archive and renames PATH.tmp to PATH.
  absl::Status Close();

  const std::string& path() const { return path_; }
  int64_t members() const { return members_; }
  // Size of the archive so far (headers and padding included, end marker not);
  // after Close(), the size of the finished file.
  int64_t bytes_written() const;

  // The bytes one member adds to an archive (header(s) + data padded to 512).
  static int64_t MemberBytes(absl::string_view name, int64_t size);
  // Bytes of the end-of-archive marker Close() appends.
  static constexpr int64_t kEndBytes = 1024;

 private:
  friend struct TarWriterCallbacks;
  TarWriter(std::string path, int fd);

  std::string path_;
  int fd_ = -1;
  ::archive* archive_ = nullptr;
  ::archive_entry* entry_ = nullptr;  // reused for every member
  int64_t members_ = 0;
  int64_t logical_bytes_ = 0;  // sum of MemberBytes() of the members added
  int64_t file_bytes_ = 0;     // bytes handed to write() (libarchive buffers)
  bool closed_ = false;
  std::string write_error_;  // set by TarWriterCallbacks::Write on a failed write()
};

// One field of a sample: extension (no leading dot, e.g. "jpg") and its bytes.
using SampleField = std::pair<std::string, std::string>;

struct ShardWriterOptions {
  std::string out_dir;          // must exist
  int64_t per_shard = 1000;     // max samples per shard; 0 = no count limit
  int64_t max_shard_bytes = 0;  // max tar file size; 0 = no byte limit. A single
                                // sample larger than this gets a shard of its own.
};

// Name of shard number `n`: "shard-000000.tar", ... (natural order = numeric order).
std::string ShardFileName(int n);

// Writes samples (KEY.EXT members, consecutive, never split across shards) into
// OUT/shard-000000.tar, shard-000001.tar, ..., starting a new shard before a
// sample that would exceed per_shard samples or max_shard_bytes bytes.
// Not thread-safe: one writer thread; produce samples in parallel elsewhere.
class ShardWriter {
 public:
  explicit ShardWriter(ShardWriterOptions options);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends KEY.EXT for every field, in the given order. `key` must be
  // non-empty, contain no '.', and not start with "__" (webdataset metadata).
  absl::Status AddSample(absl::string_view key, const std::vector<SampleField>& fields);
  // Same, for fields that depend on the sample's index in its shard (the .json
  // "count"): make_fields(i) is called with the index the sample will get.
  using FieldsFn = std::function<std::vector<SampleField>(int64_t index_in_shard)>;
  absl::Status AddSample(absl::string_view key, const FieldsFn& make_fields);
  // Closes the last shard. Idempotent.
  absl::Status Close();

  // Total tar bytes a sample with these fields takes.
  static int64_t SampleBytes(absl::string_view key, const std::vector<SampleField>& fields);

  const std::vector<std::string>& shard_paths() const { return shard_paths_; }
  const std::vector<int64_t>& shard_samples() const { return shard_samples_; }
  int64_t samples() const { return samples_; }
  int64_t bytes() const { return bytes_; }  // total bytes of closed shards

 private:
  absl::Status CloseCurrent();

  ShardWriterOptions options_;
  std::unique_ptr<TarWriter> current_;
  std::vector<std::string> shard_paths_;  // every shard opened, in order
  std::vector<int64_t> shard_samples_;    // samples in each shard
  int64_t samples_ = 0;
  int64_t bytes_ = 0;
  bool closed_ = false;
};

// The info.json next to the shards, in the seed's format plus extras.
struct DatasetInfo {
  int64_t dataset_size = 0;              // "dataset size"
  int num_classes = 0;                   // "num_classes"
  std::vector<std::string> class_names;  // "class names" (omitted when empty)
  std::vector<std::string> shards;       // "shards": file names (omitted when empty)
  std::vector<int64_t> shard_samples;    // "shard samples" (omitted when empty)
};

// What a packing run produced (returned by WriteSyntheticDataset / PackImageFolder).
struct PackSummary {
  int64_t samples = 0;  // samples written
  int num_classes = 0;
  std::vector<std::string> shards;     // full paths, in order
  std::vector<int64_t> shard_samples;  // samples per shard
  int64_t bytes = 0;                   // total bytes of all shards
  int64_t skipped = 0;                 // inputs skipped (unreadable, empty, ...)
  std::vector<std::string> warnings;   // one line per skipped input
};

// JSON text of `info` (pretty-printed, keys in a fixed order).
std::string DatasetInfoJson(const DatasetInfo& info);
// Writes OUT_DIR/info.json (via a temporary file and rename).
absl::Status WriteDatasetInfo(const std::string& out_dir, const DatasetInfo& info);

}  // namespace shardcast::pack

#endif  // SHARDCAST_TOOLS_PACK_TAR_WRITER_H_

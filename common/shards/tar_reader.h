// Lists the regular-file members of a tar shard (.tar, or .tar.gz/.tgz) with libarchive:
// each member's name and where its data lies in the uncompressed stream.
#ifndef SHARDCAST_COMMON_SHARDS_TAR_READER_H_
#define SHARDCAST_COMMON_SHARDS_TAR_READER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardcast {

struct TarMember {
  std::string name;     // full path inside the archive (PAX / GNU long names resolved)
  uint64_t offset = 0;  // data offset in the uncompressed tar stream (= file offset for a .tar)
  uint64_t size = 0;
  bool sparse = false;  // GNU/PAX sparse file: its data is not one contiguous byte range
  bool has_content = false;
  std::string content;  // the member's bytes, when the scan's ContentFilter asked for them
};

struct TarScan {
  bool compressed = false;         // a compression filter (gzip, ...) sits under the tar
  std::vector<TarMember> members;  // regular files in archive order; each one is intact
  // OK when the archive was read to its end. Otherwise where and why it broke (names the
  // shard and the member); `members` then holds the members read completely before it.
  absl::Status error;
  // When `error` is set and the break is in a member's data: that member's name (its
  // header was read, so the members before it are known to be all there is before it).
  std::string broken_member;
};

// Asked once per regular member: true = read its data into TarMember::content.
using ContentFilter = std::function<bool(absl::string_view name, uint64_t size)>;

// Scans the tar at `path`: a plain tar or a gzip-compressed one (no other compression is
// accepted). The returned StatusOr is an error only when the file cannot be opened at all; a
// damaged or truncated archive yields the members before the damage plus TarScan::error.
// Non-regular entries (directories, links, devices) are not listed, as in webdataset. Data of a
// plain .tar is skipped with lseek, so a scan reads only headers (and the members `want_content`
// asks for). When `cancelled` becomes true the scan stops before the next member with
// TarScan::error CANCELLED.
absl::StatusOr<TarScan> ScanTar(const std::string& path, const ContentFilter& want_content = {},
                                const std::atomic<bool>* cancelled = nullptr);

// The whole uncompressed stream of a tar file, plain or gzip: the bytes that
// TarMember::offset indexes into (tests compare the serve path's reads with it).
absl::StatusOr<std::string> ReadUncompressedStream(const std::string& path);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_SHARDS_TAR_READER_H_

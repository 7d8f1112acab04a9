// Tar member listing with libarchive. Offsets come from archive_filter_bytes(a, 0), the
// position in the uncompressed stream, taken right after a member's header(s) were read.
#include "common/shards/tar_reader.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardcast {
namespace {

// libarchive's read block: big enough to amortise syscalls, small enough that skipping
// a member with lseek does not read much of it.
constexpr size_t kReadBlockBytes = 64 * 1024;

struct ArchiveDeleter {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveDeleter>;

std::string ArchiveError(archive* a) {
  const char* msg = archive_error_string(a);
  return msg != nullptr ? msg : "unknown libarchive error";
}

// Only gzip under the tar (besides none): libarchive's other filters include ones that
// run external programs (lrzip, lzop, grzip, ...) on untrusted input, and the serve path
// can seek in gzip alone (gzip_index.h). A gzip filter that would itself need the
// external `gzip` program (libarchive built without zlib) is refused too.
absl::Status AllowGzipOnly(archive* a, const std::string& path) {
  if (archive_read_support_filter_gzip(a) != ARCHIVE_OK) {
    return absl::UnimplementedError(
        absl::StrCat(path, ": this libarchive cannot read gzip without an external program"));
  }
  return absl::OkStatus();
}

std::string EntryName(archive_entry* entry) {
  // The UTF-8 form survives a C locale where converting PAX (UTF-8) names may fail.
  if (const char* utf8 = archive_entry_pathname_utf8(entry); utf8 != nullptr) return utf8;
  if (const char* raw = archive_entry_pathname(entry); raw != nullptr) return raw;
  return std::string();
}

}  // namespace

absl::StatusOr<TarScan> ScanTar(const std::string& path, const ContentFilter& want_content,
                                const std::atomic<bool>* cancelled) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);

  ArchivePtr a(archive_read_new());
  if (absl::Status allowed = AllowGzipOnly(a.get(), path); !allowed.ok()) return allowed;
  archive_read_support_format_tar(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), kReadBlockBytes) != ARCHIVE_OK) {
    return absl::DataLossError(absl::StrCat(
        path, ": not a readable tar archive (plain or gzip): ", ArchiveError(a.get())));
  }

  TarScan scan;
  scan.compressed = archive_filter_code(a.get(), 0) != ARCHIVE_FILTER_NONE;
  std::string last_good = "(start of archive)";
  const auto broke = [&](absl::string_view where, absl::string_view why) {
    scan.error = absl::DataLossError(absl::StrCat(path, ": ", where, ": ", why));
  };

  archive_entry* entry = nullptr;
  while (true) {
    if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) {
      scan.error = absl::CancelledError(absl::StrCat(path, ": scan cancelled"));
      break;
    }
    const int r = archive_read_next_header(a.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      broke(absl::StrCat("after member '", last_good, "'"),
            absl::StrCat("bad or truncated header: ", ArchiveError(a.get())));
      break;
    }
    const std::string name = EntryName(entry);
    const int64_t position = archive_filter_bytes(a.get(), 0);
    const bool regular =
        archive_entry_filetype(entry) == AE_IFREG && archive_entry_hardlink(entry) == nullptr;
    if (!regular) {
      last_good = name;
      continue;  // webdataset (tarfile.isreg) ignores everything but regular files
    }
    TarMember member;
    member.name = name;
    member.offset = position < 0 ? 0 : static_cast<uint64_t>(position);
    member.size = archive_entry_size_is_set(entry)
                      ? static_cast<uint64_t>(std::max<int64_t>(0, archive_entry_size(entry)))
                      : 0;
    member.sparse = archive_entry_sparse_count(entry) > 0;
    // In a plain tar a member's data must lie inside the file; libarchive skips data with
    // lseek, which would not notice a file cut short in the middle of the last member.
    if (!scan.compressed && member.offset + member.size > file_size) {
      scan.broken_member = name;
      broke(absl::StrCat("member '", name, "' at offset ", member.offset),
            absl::StrCat("truncated: its ", member.size, " bytes run past the end of the file (",
                         file_size, " bytes)"));
      break;
    }
    if (want_content && want_content(name, member.size)) {
      member.content.resize(member.size);
      size_t got = 0;
      while (got < member.size) {
        const la_ssize_t n =
            archive_read_data(a.get(), member.content.data() + got, member.size - got);
        if (n <= 0) break;
        got += static_cast<size_t>(n);
      }
      if (got != member.size) {
        scan.broken_member = name;
        broke(absl::StrCat("member '", name, "' at offset ", member.offset),
              absl::StrCat("read ", got, " of ", member.size, " bytes: ", ArchiveError(a.get())));
        break;
      }
      member.has_content = true;
    } else if (archive_read_data_skip(a.get()) != ARCHIVE_OK) {
      scan.broken_member = name;
      broke(absl::StrCat("member '", name, "' at offset ", member.offset),
            absl::StrCat("cannot read its data: ", ArchiveError(a.get())));
      break;
    }
    last_good = name;
    scan.members.push_back(std::move(member));
  }
  return scan;
}

absl::StatusOr<std::string> ReadUncompressedStream(const std::string& path) {
  ArchivePtr a(archive_read_new());
  if (absl::Status allowed = AllowGzipOnly(a.get(), path); !allowed.ok()) return allowed;
  // "raw" hands back the filtered (decompressed) bytes as one entry: the tar stream itself.
  archive_read_support_format_raw(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), kReadBlockBytes) != ARCHIVE_OK) {
    return absl::DataLossError(absl::StrCat(path, ": cannot open: ", ArchiveError(a.get())));
  }
  archive_entry* entry = nullptr;
  const int r = archive_read_next_header(a.get(), &entry);
  std::string out;
  if (r == ARCHIVE_EOF) return out;
  if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
    return absl::DataLossError(absl::StrCat(path, ": cannot read: ", ArchiveError(a.get())));
  }
  const void* block = nullptr;
  size_t size = 0;
  la_int64_t offset = 0;
  while (true) {
    const int rr = archive_read_data_block(a.get(), &block, &size, &offset);
    if (rr == ARCHIVE_EOF) break;
    if (rr != ARCHIVE_OK && rr != ARCHIVE_WARN) {
      return absl::DataLossError(absl::StrCat(path, ": decompression failed after ", out.size(),
                                              " bytes: ", ArchiveError(a.get())));
    }
    if (static_cast<uint64_t>(offset) != out.size()) out.resize(static_cast<size_t>(offset));
    out.append(static_cast<const char*>(block), size);
  }
  return out;
}

}  // namespace shardcast

// Deterministic tar shards with libarchive: fixed headers, no 10 KiB tail
// padding, written under a temporary name and renamed when complete.
#include "tools/pack/tar_writer.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/util/json_fields.h"

namespace shardcast::pack {
namespace {

constexpr int64_t kBlock = 512;
// ustar holds names up to 100 bytes (plus a 155-byte prefix split at '/';
// we do not count on it). Longer names get a PAX header.
constexpr size_t kUstarNameMax = 100;

int64_t RoundUp(int64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

bool IsAscii(absl::string_view s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

}  // namespace

// libarchive's client callbacks; a friend of TarWriter.
struct TarWriterCallbacks {
  static la_ssize_t Write(struct archive*, void* client, const void* buf, size_t len) {
    auto* self = static_cast<TarWriter*>(client);
    const char* p = static_cast<const char*>(buf);
    size_t left = len;
    while (left > 0) {
      ssize_t n = ::write(self->fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        self->write_error_ = std::strerror(errno);
        return -1;
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    self->file_bytes_ += static_cast<int64_t>(len);
    return static_cast<la_ssize_t>(len);
  }
};

TarWriter::TarWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

absl::StatusOr<std::unique_ptr<TarWriter>> TarWriter::Open(const std::string& path) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot create shard ", tmp, ": ", std::strerror(errno)));
  }
  std::unique_ptr<TarWriter> w(new TarWriter(path, fd));
  w->archive_ = archive_write_new();
  w->entry_ = archive_entry_new();
  if (w->archive_ == nullptr || w->entry_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("libarchive allocation failed for ", path));
  }
  // pax_restricted = ustar headers unless a name needs PAX; 64 KiB writes, and
  // the last block is not padded (a plain tar needs only the two zero blocks).
  if (archive_write_set_format_pax_restricted(w->archive_) != ARCHIVE_OK ||
      archive_write_set_bytes_per_block(w->archive_, 64 * 1024) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(w->archive_, 1) != ARCHIVE_OK ||
      archive_write_open(w->archive_, w.get(), nullptr, &TarWriterCallbacks::Write, nullptr) !=
          ARCHIVE_OK) {
    return absl::InternalError(
        absl::StrCat("cannot start tar ", tmp, ": ", archive_error_string(w->archive_)));
  }
  return w;
}

TarWriter::~TarWriter() {
  if (archive_ != nullptr) archive_write_free(archive_);
  if (entry_ != nullptr) archive_entry_free(entry_);
  if (fd_ >= 0) ::close(fd_);
  if (!closed_) ::unlink((path_ + ".tmp").c_str());
}

int64_t TarWriter::MemberBytes(absl::string_view name, int64_t size) {
  int64_t bytes = kBlock + RoundUp(size);
  if (name.size() > kUstarNameMax) {
    // A PAX 'x' header block plus its records ("NN path=...\n" and friends);
    // an upper bound, so byte-limited shards stay under their limit.
    bytes += kBlock + RoundUp(static_cast<int64_t>(name.size()) * 2 + 128);
  }
  return bytes;
}

absl::Status TarWriter::AddMember(absl::string_view name, absl::string_view data) {
  if (closed_) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("empty member name in ", path_));
  }
  // libarchive's PAX writer converts non-ASCII names through the process
  // locale: the bytes would depend on LANG, and with a UTF-8 name in the "C"
  // locale libarchive 3.6 crashes. Our keys are ASCII; refuse the rest.
  if (!IsAscii(name) || name.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("member name '", absl::CHexEscape(name), "' in ", path_, " is not ASCII"));
  }
  archive_entry_clear(entry_);
  const std::string name_str(name);
  archive_entry_copy_pathname(entry_, name_str.c_str());
  archive_entry_set_filetype(entry_, AE_IFREG);
  archive_entry_set_perm(entry_, 0644);
  archive_entry_set_size(entry_, static_cast<la_int64_t>(data.size()));
  // Fixed metadata: the same members must give the same bytes on any machine.
  archive_entry_set_mtime(entry_, 0, 0);
  archive_entry_set_uid(entry_, 0);
  archive_entry_set_gid(entry_, 0);
  if (archive_write_header(archive_, entry_) != ARCHIVE_OK) {
    return absl::InternalError(absl::StrCat("cannot write header of ", name, " to ", path_, ": ",
                                            archive_error_string(archive_),
                                            write_error_.empty() ? "" : " ", write_error_));
  }
  size_t off = 0;
  while (off < data.size()) {
    la_ssize_t n = archive_write_data(archive_, data.data() + off, data.size() - off);
    if (n <= 0) {
      return absl::InternalError(absl::StrCat("cannot write ", name, " to ", path_, ": ",
                                              archive_error_string(archive_), " ", write_error_));
    }
    off += static_cast<size_t>(n);
  }
  ++members_;
  logical_bytes_ += MemberBytes(name, static_cast<int64_t>(data.size()));
  return absl::OkStatus();
}

absl::Status TarWriter::Close() {
  if (closed_) return absl::OkStatus();
  if (archive_write_close(archive_) != ARCHIVE_OK) {
    return absl::InternalError(absl::StrCat(
        "cannot finish tar ", path_, ".tmp: ", archive_error_string(archive_), " ", write_error_));
  }
  if (::close(fd_) != 0) {
    fd_ = -1;
    return absl::InternalError(
        absl::StrCat("cannot close ", path_, ".tmp: ", std::strerror(errno)));
  }
  fd_ = -1;
  const std::string tmp = path_ + ".tmp";
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path_, ": ", std::strerror(errno)));
  }
  closed_ = true;
  return absl::OkStatus();
}

int64_t TarWriter::bytes_written() const { return closed_ ? file_bytes_ : logical_bytes_; }

// ---------------------------------------------------------------------------

std::string ShardFileName(int n) { return absl::StrFormat("shard-%06d.tar", n); }

ShardWriter::ShardWriter(ShardWriterOptions options) : options_(std::move(options)) {}

ShardWriter::~ShardWriter() = default;

int64_t ShardWriter::SampleBytes(absl::string_view key, const std::vector<SampleField>& fields) {
  int64_t bytes = 0;
  for (const auto& [ext, data] : fields) {
    bytes += TarWriter::MemberBytes(absl::StrCat(key, ".", ext), static_cast<int64_t>(data.size()));
  }
  return bytes;
}

absl::Status ShardWriter::AddSample(absl::string_view key, const std::vector<SampleField>& fields) {
  return AddSample(key, [&fields](int64_t) { return fields; });
}

absl::Status ShardWriter::AddSample(absl::string_view key, const FieldsFn& make_fields) {
  if (closed_) return absl::FailedPreconditionError("shard writer is closed");
  if (key.empty() || absl::StrContains(key, '.') || absl::StartsWith(key, "__")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad sample key '", key, "': must be non-empty, without '.', not starting with __"));
  }
  int64_t index = current_ != nullptr ? shard_samples_.back() : 0;
  std::vector<SampleField> fields = make_fields(index);
  if (fields.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("sample ", key, " has no fields"));
  }
  std::set<absl::string_view> seen;
  for (const auto& [ext, data] : fields) {
    if (ext.empty() || absl::StrContains(ext, '/')) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", key, ": bad extension '", ext, "'"));
    }
    if (!seen.insert(ext).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", key, ": extension '", ext, "' given twice"));
    }
  }
  if (current_ != nullptr && index > 0) {
    const bool full_by_count = options_.per_shard > 0 && index >= options_.per_shard;
    const bool full_by_bytes =
        options_.max_shard_bytes > 0 &&
        current_->bytes_written() + SampleBytes(key, fields) + TarWriter::kEndBytes >
            options_.max_shard_bytes;
    if (full_by_count || full_by_bytes) {
      if (absl::Status s = CloseCurrent(); !s.ok()) return s;
      index = 0;
      fields = make_fields(0);
    }
  }
  if (current_ == nullptr) {
    const std::string path =
        absl::StrCat(options_.out_dir, "/", ShardFileName(static_cast<int>(shard_paths_.size())));
    absl::StatusOr<std::unique_ptr<TarWriter>> w = TarWriter::Open(path);
    if (!w.ok()) return w.status();
    current_ = *std::move(w);
    shard_paths_.push_back(path);
    shard_samples_.push_back(0);
  }
  for (const auto& [ext, data] : fields) {
    if (absl::Status s = current_->AddMember(absl::StrCat(key, ".", ext), data); !s.ok()) {
      return s;
    }
  }
  ++shard_samples_.back();
  ++samples_;
  return absl::OkStatus();
}

absl::Status ShardWriter::CloseCurrent() {
  if (current_ == nullptr) return absl::OkStatus();
  absl::Status s = current_->Close();
  bytes_ += current_->bytes_written();
  current_.reset();
  return s;
}

absl::Status ShardWriter::Close() {
  if (closed_) return absl::OkStatus();
  closed_ = true;
  return CloseCurrent();
}

std::string DatasetInfoJson(const DatasetInfo& info) {
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"dataset size\": ", info.dataset_size, ",\n");
  absl::StrAppend(&out, "  \"num_classes\": ", info.num_classes);
  if (!info.class_names.empty()) {
    std::vector<std::string> quoted;
    for (const auto& n : info.class_names) quoted.push_back(JsonQuote(n));
    absl::StrAppend(&out, ",\n  \"class names\": [", absl::StrJoin(quoted, ", "), "]");
  }
  if (!info.shards.empty()) {
    std::vector<std::string> quoted;
    for (const auto& n : info.shards) quoted.push_back(JsonQuote(n));
    absl::StrAppend(&out, ",\n  \"shards\": [", absl::StrJoin(quoted, ", "), "]");
  }
  if (!info.shard_samples.empty()) {
    absl::StrAppend(&out, ",\n  \"shard samples\": [", absl::StrJoin(info.shard_samples, ", "),
                    "]");
  }
  out += "\n}\n";
  return out;
}

absl::Status WriteDatasetInfo(const std::string& out_dir, const DatasetInfo& info) {
  const std::string path = out_dir + "/info.json";
  const std::string tmp = path + ".tmp";
  const std::string text = DatasetInfoJson(info);
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace shardcast::pack

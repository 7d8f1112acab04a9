// Gzip access points (see gzip_index.h). After zlib's examples/zran.c: inflate with
// Z_BLOCK stops at deflate block boundaries, where the bit position and the last 32 KiB
// of output are all a later inflate needs to resume.
#include "common/shards/gzip_index.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace shardcast {
namespace {

constexpr size_t kWindowBytes = 32768;  // deflate's largest back-reference
constexpr size_t kChunkBytes = 64 * 1024;
constexpr int kGzipWindowBits = 15 + 16;  // gzip header and trailer, 32 KiB window
constexpr int kRawWindowBits = -15;       // bare deflate data

// Owns a z_stream set up with inflateInit2.
class Inflater {
 public:
  Inflater() { std::memset(&strm_, 0, sizeof(strm_)); }
  ~Inflater() {
    if (initialized_) inflateEnd(&strm_);
  }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  absl::Status Init(int window_bits) {
    if (inflateInit2(&strm_, window_bits) != Z_OK) {
      return absl::ResourceExhaustedError("zlib: cannot set up inflate");
    }
    initialized_ = true;
    return absl::OkStatus();
  }
  z_stream* get() { return &strm_; }

 private:
  z_stream strm_;
  bool initialized_ = false;
};

// Compressed input read with pread from a running position. Bytes not yet consumed by
// inflate stay at the front of the buffer when more is read (Peek needs two at once).
class CompressedInput {
 public:
  CompressedInput(int fd, uint64_t position) : fd_(fd), position_(position), buffer_(kChunkBytes) {}

  // Makes at least `want` unconsumed bytes available in `strm`, unless the file ends
  // first. Returns how many are available; an error when the read fails.
  absl::StatusOr<size_t> Fill(z_stream* strm, size_t want) {
    while (strm->avail_in < want) {
      const size_t kept = strm->avail_in;
      if (kept > 0 && strm->next_in != buffer_.data())
        std::memmove(buffer_.data(), strm->next_in, kept);
      const ssize_t n =
          ::pread(fd_, buffer_.data() + kept, buffer_.size() - kept, static_cast<off_t>(position_));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return absl::UnavailableError(absl::StrCat("read failed: ", std::strerror(errno)));
      strm->next_in = buffer_.data();
      strm->avail_in = static_cast<uInt>(kept);
      if (n == 0) break;
      position_ += static_cast<uint64_t>(n);
      strm->avail_in += static_cast<uInt>(n);
    }
    return static_cast<size_t>(strm->avail_in);
  }

 private:
  const int fd_;
  uint64_t position_;  // next file offset to read
  std::vector<unsigned char> buffer_;
};

std::string ZlibError(const z_stream& strm, int ret) {
  return strm.msg != nullptr ? strm.msg : absl::StrCat("zlib error ", ret);
}

}  // namespace

absl::StatusOr<GzipIndex> GzipIndex::Build(int fd, uint64_t span) {
  GzipIndex index;
  Inflater inflater;
  if (absl::Status s = inflater.Init(kGzipWindowBits); !s.ok()) return s;
  z_stream* strm = inflater.get();
  CompressedInput input(fd, 0);
  std::vector<unsigned char> window(kWindowBytes);  // circular: the latest output
  uint64_t total_in = 0, total_out = 0, last_point = 0;
  index.points_.push_back(AccessPoint{0, 0, 0, true, std::string()});
  strm->avail_out = 0;
  while (true) {
    absl::StatusOr<size_t> available = input.Fill(strm, 1);
    if (!available.ok()) return available.status();
    if (*available == 0) {
      return absl::DataLossError(absl::StrCat("gzip data cut short at compressed byte ", total_in));
    }
    if (strm->avail_out == 0) {
      strm->next_out = window.data();
      strm->avail_out = kWindowBytes;
    }
    const uInt in_before = strm->avail_in, out_before = strm->avail_out;
    const int ret = inflate(strm, Z_BLOCK);
    total_in += in_before - strm->avail_in;
    total_out += out_before - strm->avail_out;
    if (ret == Z_NEED_DICT || ret == Z_DATA_ERROR || ret == Z_MEM_ERROR ||
        (ret == Z_BUF_ERROR && strm->avail_in > 0)) {
      return absl::DataLossError(absl::StrCat("not valid gzip at compressed byte ", total_in, ": ",
                                              ZlibError(*strm, ret)));
    }
    if (ret == Z_STREAM_END) {
      // Another member follows only if its magic does; anything else ends the stream.
      available = input.Fill(strm, 2);
      if (!available.ok()) return available.status();
      if (*available < 2 || strm->next_in[0] != 0x1f || strm->next_in[1] != 0x8b) break;
      if (inflateReset(strm) != Z_OK) return absl::InternalError("zlib: inflateReset failed");
      index.points_.push_back(AccessPoint{total_out, total_in, 0, true, std::string()});
      last_point = total_out;
      continue;
    }
    // At a block boundary that is not the end of the last block: a place to resume.
    const bool block_end = (strm->data_type & 128) != 0 && (strm->data_type & 64) == 0;
    if (block_end && total_out - last_point >= span) {
      AccessPoint point;
      point.out = total_out;
      point.in = total_in;
      point.bits = strm->data_type & 7;
      // Oldest first: the unwritten tail of the circular buffer, then its head.
      const size_t left = strm->avail_out;
      point.window.reserve(kWindowBytes);
      point.window.append(reinterpret_cast<const char*>(window.data()) + kWindowBytes - left, left);
      point.window.append(reinterpret_cast<const char*>(window.data()), kWindowBytes - left);
      index.points_.push_back(std::move(point));
      last_point = total_out;
    }
  }
  index.uncompressed_size_ = total_out;
  return index;
}

absl::Status GzipIndex::Read(int fd, uint64_t offset, uint64_t size, char* out) const {
  if (offset > uncompressed_size_ || size > uncompressed_size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes ", offset, "..+", size,
                                              " lie past the end of the ", uncompressed_size_,
                                              "-byte uncompressed stream"));
  }
  if (size == 0) return absl::OkStatus();
  const auto after = std::upper_bound(points_.begin(), points_.end(), offset,
                                      [](uint64_t o, const AccessPoint& p) { return o < p.out; });
  const AccessPoint& point = *(after - 1);  // points_[0].out == 0 <= offset

  Inflater inflater;
  if (absl::Status s = inflater.Init(point.member_start ? kGzipWindowBits : kRawWindowBits);
      !s.ok()) {
    return s;
  }
  z_stream* strm = inflater.get();
  const auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("gzip data resumed at compressed byte ", point.in,
                                            " no longer inflates (", why,
                                            "): the file changed since it was indexed"));
  };
  if (!point.member_start) {
    if (point.bits > 0) {
      unsigned char byte = 0;
      if (::pread(fd, &byte, 1, static_cast<off_t>(point.in - 1)) != 1)
        return corrupt("short read");
      if (inflatePrime(strm, point.bits, byte >> (8 - point.bits)) != Z_OK) {
        return corrupt("inflatePrime");
      }
    }
    if (inflateSetDictionary(strm, reinterpret_cast<const Bytef*>(point.window.data()),
                             static_cast<uInt>(point.window.size())) != Z_OK) {
      return corrupt("inflateSetDictionary");
    }
  }
  CompressedInput input(fd, point.in);
  std::vector<unsigned char> discard(std::min<uint64_t>(kWindowBytes, offset - point.out));
  uint64_t skip = offset - point.out;  // output before `offset`, inflated and dropped
  uint64_t got = 0;
  bool raw = !point.member_start;
  size_t trailer_left = 0;  // a raw inflate ended a member: its 8-byte trailer is next
  while (got < size) {
    absl::StatusOr<size_t> available = input.Fill(strm, 1);
    if (!available.ok()) return available.status();
    if (*available == 0) return corrupt("it ends early");
    if (trailer_left > 0) {
      const size_t n = std::min<size_t>(trailer_left, strm->avail_in);
      strm->next_in += n;
      strm->avail_in -= static_cast<uInt>(n);
      trailer_left -= n;
      if (trailer_left == 0 && inflateReset2(strm, kGzipWindowBits) != Z_OK) {
        return corrupt("inflateReset2");
      }
      continue;
    }
    uint64_t room = 0;
    if (skip > 0) {
      strm->next_out = discard.data();
      room = std::min<uint64_t>(skip, discard.size());
    } else {
      strm->next_out = reinterpret_cast<Bytef*>(out + got);
      room = size - got;
    }
    strm->avail_out = static_cast<uInt>(std::min<uint64_t>(room, std::numeric_limits<uInt>::max()));
    const uInt out_before = strm->avail_out;
    const int ret = inflate(strm, Z_NO_FLUSH);
    const uint64_t produced = out_before - strm->avail_out;
    if (skip > 0) {
      skip -= produced;
    } else {
      got += produced;
    }
    if (ret == Z_STREAM_END) {
      if (raw) {
        trailer_left = 8;
        raw = false;
      } else if (inflateReset(strm) != Z_OK) {
        return corrupt("inflateReset");
      }
    } else if (ret != Z_OK && !(ret == Z_BUF_ERROR && strm->avail_in == 0)) {
      return corrupt(ZlibError(*strm, ret));
    }
  }
  return absl::OkStatus();
}

size_t GzipIndex::memory_bytes() const {
  size_t bytes = sizeof(*this) + points_.capacity() * sizeof(AccessPoint);
  for (const AccessPoint& point : points_) bytes += point.window.capacity();
  return bytes;
}

absl::StatusOr<std::shared_ptr<const GzipIndex>> GzipIndexCache::Get(uint64_t id, int fd) {
  std::shared_ptr<Slot> slot;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Slot>& found = slots_[id];
    if (found == nullptr) found = std::make_shared<Slot>();
    found->last_use = ++clock_;
    slot = found;
  }
  std::shared_ptr<const GzipIndex> index;
  {
    absl::MutexLock lock(&slot->mu);
    if (!slot->done) {
      absl::StatusOr<GzipIndex> built = GzipIndex::Build(fd);
      slot->done = true;
      if (built.ok()) {
        slot->index = std::make_shared<const GzipIndex>(*std::move(built));
      } else {
        slot->status = built.status();
      }
    }
    if (!slot->status.ok()) {
      const absl::Status failed = slot->status;
      absl::MutexLock map_lock(&mu_);
      auto it = slots_.find(id);
      if (it != slots_.end() && it->second == slot) slots_.erase(it);  // the next call retries
      return failed;
    }
    index = slot->index;
  }
  absl::MutexLock lock(&mu_);
  auto it = slots_.find(id);
  // Counted once, by the first caller after the build (unless evicted meanwhile).
  if (it != slots_.end() && it->second == slot && slot->bytes == 0) {
    slot->bytes = index->memory_bytes();
    held_ += slot->bytes;
  }
  EvictLocked();
  return index;
}

void GzipIndexCache::EvictLocked() {
  while (slots_.size() > 1 && held_ > max_bytes_) {
    auto oldest = slots_.begin();
    for (auto it = slots_.begin(); it != slots_.end(); ++it) {
      if (it->second->last_use < oldest->second->last_use) oldest = it;
    }
    held_ -= oldest->second->bytes;
    slots_.erase(oldest);  // readers holding its index keep it until they are done
  }
}

size_t GzipIndexCache::bytes() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

}  // namespace shardcast

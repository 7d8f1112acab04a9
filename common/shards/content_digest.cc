#include "common/shards/content_digest.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/shards/shard_reader.h"

namespace shardcast {
namespace {

// Large enough that the read syscalls cost nothing next to the hashing.
constexpr size_t kReadBlockBytes = size_t{1} << 20;

}  // namespace

struct ContentHasher::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

ContentHasher::ContentHasher() : ctx_(std::make_unique<Ctx>()) {
  EVP_DigestInit_ex(ctx_->md, EVP_md5(), nullptr);
}

ContentHasher::~ContentHasher() = default;

void ContentHasher::Add(absl::string_view bytes) {
  if (!bytes.empty()) EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size());
}

std::string ContentHasher::Hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx_->md, digest, &length);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xF]);
  }
  return out;
}

absl::StatusOr<std::string> FileContentDigest(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::DataLossError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  ContentHasher hasher;
  std::vector<char> block(kReadBlockBytes);
  while (true) {
    const ssize_t n = ::read(fd, block.data(), block.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return HostIoError(path, "read failed", error);
    }
    if (n == 0) break;
    hasher.Add(absl::string_view(block.data(), static_cast<size_t>(n)));
  }
  ::close(fd);
  return hasher.Hex();
}

std::string EtagContentDigest(absl::string_view etag) {
  // A weak ETag promises equivalent content, not the same bytes.
  if (absl::StartsWith(etag, "W/")) return "";
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  if (etag.size() != 32) return "";
  for (char c : etag) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return "";
  }
  return absl::AsciiStrToLower(etag);
}

}  // namespace shardcast

// The one content digest of the project: 128-bit FNV-1a over length-prefixed fields.
// Stable across processes, machines and builds (unlike std::hash or absl::Hash), so
// a fingerprint means the same thing to every server replica and every client.
#ifndef SHARDCAST_COMMON_UTIL_DIGEST_H_
#define SHARDCAST_COMMON_UTIL_DIGEST_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace shardcast {

class Digest128 {
 public:
  // Raw bytes; use AddString for a field, so that ("ab","c") != ("a","bc").
  void AddBytes(absl::string_view bytes) {
    for (unsigned char c : bytes) {
      state_ ^= c;
      state_ *= kPrime;
    }
  }
  void AddString(absl::string_view s) {
    AddU64(s.size());
    AddBytes(s);
  }
  void AddU64(uint64_t v) {
    char buf[8];
    for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>(v >> (8 * i));
    AddBytes(absl::string_view(buf, 8));
  }
  // 32 lower-case hex digits.
  std::string Hex() const {
    return absl::StrFormat("%016x%016x", static_cast<uint64_t>(state_ >> 64),
                           static_cast<uint64_t>(state_));
  }

 private:
  static constexpr unsigned __int128 kPrime =
      (static_cast<unsigned __int128>(0x0000000001000000ULL) << 64) | 0x000000000000013BULL;
  unsigned __int128 state_ =
      (static_cast<unsigned __int128>(0x6c62272e07bb0142ULL) << 64) | 0x62b821756295c58dULL;
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_UTIL_DIGEST_H_

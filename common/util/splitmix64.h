// splitmix64 (Steele, Lea, Flood 2014): the seeded generator of augmentations and of
// shardcast-pack's synthetic data and shuffles. Its output is fixed forever and the same
// on every platform and library version, unlike std:: distributions.
#ifndef SHARDCAST_COMMON_UTIL_SPLITMIX64_H_
#define SHARDCAST_COMMON_UTIL_SPLITMIX64_H_

#include <cstdint>

namespace shardcast {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return Mix(state_ += 0x9e3779b97f4a7c15ULL); }
  // The finalizer alone: a bijective 64-bit mix (seeds of plans, streams, generators).
  static uint64_t Mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1), 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n), n >= 1 (Lemire's multiply-shift; bias < n / 2^64).
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_UTIL_SPLITMIX64_H_

// Deterministic random primitives of the epoch planner, exposed so the tests' reference
// planner uses the very same draws. Not part of the public contract (epoch_plan.h).
#ifndef SHARDCAST_COMMON_PLAN_EPOCH_PLAN_INTERNAL_H_
#define SHARDCAST_COMMON_PLAN_EPOCH_PLAN_INTERNAL_H_

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "common/util/splitmix64.h"

namespace shardcast::plan_internal {

// splitmix64's finalizer. Fixed forever: plans depend on it.
inline uint64_t Mix64(uint64_t x) { return SplitMix64::Mix(x); }

// Hashes a sequence of words into one seed (order matters).
inline uint64_t SeedOf(std::initializer_list<uint64_t> words) {
  uint64_t h = 0x6a09e667f3bcc909ULL;
  for (uint64_t w : words) h = Mix64(h ^ Mix64(w + 0x9e3779b97f4a7c15ULL));
  return h;
}

// Purpose tags keep the streams of different decisions independent.
enum SeedTag : uint64_t {
  kTagShardOrder = 1,
  kTagBlockPermutation = 2,
  kTagShuffleBuffer = 3,
  kTagAugment = 4,
};

// SplitMix64 with an exactly unbiased bounded draw (rejection sampling, unlike
// SplitMix64::Below's multiply-shift; no std:: distributions: their output is
// implementation-defined, and plans must match on every machine).
class PlanRng {
 public:
  explicit PlanRng(uint64_t seed) : rng_(seed) {}
  uint64_t Next() { return rng_.Next(); }
  // Uniform in [0, bound), bound >= 1 (rejection sampling, no modulo bias).
  uint64_t Below(uint64_t bound) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do {
      x = Next();
    } while (x >= limit);
    return x % bound;
  }

 private:
  SplitMix64 rng_;
};

// The epoch's shard order: 0..S-1, or a Fisher-Yates shuffle seeded by (seed, epoch).
std::vector<int32_t> EpochShardOrder(int32_t num_shards, bool shuffle, uint64_t seed,
                                     int64_t epoch);

// A seeded bijection of [0, size) computed on demand (4-round Feistel network on the
// next even bit width, cycle-walking back into range): the split-sample permutation
// without materializing N entries.
class FeistelPermutation {
 public:
  FeistelPermutation(uint64_t size, uint64_t key);
  uint64_t size() const { return size_; }
  uint64_t operator()(uint64_t x) const;

 private:
  uint64_t Encrypt(uint64_t x) const;
  uint64_t size_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t round_keys_[4];
};

// webdataset-style shuffle buffer over a stream: every sample is appended; once the
// buffer holds `capacity` samples (or the stream is exhausted) one slot chosen uniformly
// is yielded and filled by the last one. Pure state machine over sample ids.
class ShuffleBuffer {
 public:
  ShuffleBuffer(uint32_t capacity, uint64_t seed) : capacity_(capacity), rng_(seed) {}
  bool full() const { return buf_.size() >= capacity_; }
  bool empty() const { return buf_.empty(); }
  void Push(uint64_t item) { buf_.push_back(item); }
  uint64_t Pick() {
    const uint64_t k = rng_.Below(buf_.size());
    const uint64_t out = buf_[k];
    buf_[k] = buf_.back();
    buf_.pop_back();
    return out;
  }

 private:
  uint32_t capacity_;
  PlanRng rng_;
  std::vector<uint64_t> buf_;
};

// Per-sample augmentation seeds: a key per (seed, epoch), then one bijective mix of
// (shard, index), so the seeds of an epoch's samples are all distinct.
inline uint64_t AugmentKey(uint64_t seed, int64_t epoch) {
  return SeedOf({kTagAugment, seed, static_cast<uint64_t>(epoch)});
}
inline uint64_t AugmentSeedWithKey(uint64_t key, int32_t shard, int32_t index) {
  const uint64_t sample =
      (static_cast<uint64_t>(static_cast<uint32_t>(shard)) << 32) | static_cast<uint32_t>(index);
  return Mix64(key ^ Mix64(sample + 0x9e3779b97f4a7c15ULL));
}

// Finds the slot of a position in a prefix-sum array (cum[0] = 0, non-decreasing): the
// last slot i with cum[i] <= pos, i.e. the non-empty shard holding pos. A bucket table
// of ~S entries narrows the binary search to a slot or two (10k shards: no cache-missing
// 14-step search per sample).
class SlotLocator {
 public:
  explicit SlotLocator(const std::vector<uint64_t>* cum);
  size_t Locate(uint64_t pos) const;

 private:
  const std::vector<uint64_t>* cum_;
  int shift_ = 0;
  std::vector<uint32_t> first_slot_;  // slot holding position (bucket << shift_)
};

inline uint64_t ShuffleBufferSeed(uint64_t seed, int64_t epoch, int32_t rank, int32_t worker) {
  return SeedOf({kTagShuffleBuffer, seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(rank),
                 static_cast<uint64_t>(worker)});
}
inline uint64_t BlockPermutationKey(uint64_t seed, int64_t epoch, uint64_t block) {
  return SeedOf({kTagBlockPermutation, seed, static_cast<uint64_t>(epoch), block});
}

}  // namespace shardcast::plan_internal

#endif  // SHARDCAST_COMMON_PLAN_EPOCH_PLAN_INTERNAL_H_

// The epoch planner: validation (refusals) and the two splits as lazy per-rank
// iterators. Semantics are documented in epoch_plan.h; the plan fingerprint is in
// plan_fingerprint.cc (bump kPlannerVersion there when this file deals other samples).
#include "common/plan/epoch_plan.h"

#include <algorithm>
#include <cinttypes>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/plan/epoch_plan_internal.h"

namespace shardcast {
namespace plan_internal {

std::vector<int32_t> EpochShardOrder(int32_t num_shards, bool shuffle, uint64_t seed,
                                     int64_t epoch) {
  std::vector<int32_t> order(num_shards);
  std::iota(order.begin(), order.end(), 0);
  if (shuffle) {
    PlanRng rng(SeedOf({kTagShardOrder, seed, static_cast<uint64_t>(epoch)}));
    for (int32_t i = num_shards - 1; i > 0; --i) {
      std::swap(order[i], order[rng.Below(static_cast<uint64_t>(i) + 1)]);
    }
  }
  return order;
}

FeistelPermutation::FeistelPermutation(uint64_t size, uint64_t key) : size_(size) {
  // Bits needed for the values 0..size-1, rounded up to an even count (>= 2) so the
  // two halves are equal; cycle-walking then needs < 4 rounds per value on average.
  int bits = 2;
  while (bits < 64 && (uint64_t{1} << bits) < size) ++bits;
  if (bits % 2 != 0) ++bits;
  half_bits_ = bits / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  for (uint64_t r = 0; r < 4; ++r) round_keys_[r] = SeedOf({key, r});
}

uint64_t FeistelPermutation::Encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (uint64_t round_key : round_keys_) {
    const uint64_t next = left ^ (Mix64(right ^ round_key) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t FeistelPermutation::operator()(uint64_t x) const {
  if (size_ <= 1) return x;
  // Encrypt is a bijection of [0, 2^bits); walking the cycle of x until it re-enters
  // [0, size) restricts it to a bijection of [0, size).
  uint64_t y = Encrypt(x);
  while (y >= size_) y = Encrypt(y);
  return y;
}

SlotLocator::SlotLocator(const std::vector<uint64_t>* cum) : cum_(cum) {
  const uint64_t total = cum->back();
  const uint64_t slots = cum->size() - 1;
  // About one bucket per slot: bucket width = largest power of two <= total / slots.
  while (slots > 0 && (uint64_t{2} << shift_) <= total / slots) ++shift_;
  const uint64_t buckets = (total >> shift_) + 2;
  first_slot_.resize(buckets);
  size_t slot = 0;
  for (uint64_t b = 0; b < buckets; ++b) {
    const uint64_t pos = b << shift_;
    while (slot + 1 < slots && (*cum)[slot + 1] <= pos) ++slot;
    first_slot_[b] = static_cast<uint32_t>(slot);
  }
}

size_t SlotLocator::Locate(uint64_t pos) const {
  const uint64_t bucket = pos >> shift_;
  const size_t lo = first_slot_[bucket];
  const size_t hi = first_slot_[bucket + 1] + 2;  // one past the last candidate's cum
  const auto begin = cum_->begin();
  return std::upper_bound(begin + lo, begin + std::min(hi, cum_->size()), pos) - begin - 1;
}

}  // namespace plan_internal

namespace {

using plan_internal::FeistelPermutation;
using plan_internal::ShuffleBuffer;

bool ShuffleBufferOn(const PlanConfig& config) { return config.shuffle_buffer > 1; }

// Sum of the smallest `count` shard sizes.
uint64_t SumOfSmallest(std::vector<uint32_t> sizes, size_t count) {
  count = std::min(count, sizes.size());
  std::nth_element(sizes.begin(), sizes.begin() + count, sizes.end());
  uint64_t sum = 0;
  for (size_t i = 0; i < count; ++i) sum += sizes[i];
  return sum;
}

// Checks that every rank's pass yields at least one full batch (split kShard).
absl::Status CheckShardSplitPasses(const std::vector<uint32_t>& sizes, const PlanConfig& c) {
  const int64_t num_shards = static_cast<int64_t>(sizes.size());
  const int64_t w = c.world_size, k = c.workers, b = c.batch_size;
  if (!c.shuffle_shards) {
    // Exact: the assignment is the same every epoch.
    for (int64_t rank = 0; rank < w; ++rank) {
      uint64_t best = 0;
      for (int64_t worker = 0; worker < k; ++worker) {
        uint64_t total = 0;
        for (int64_t pos = rank + worker * w; pos < num_shards; pos += w * k) total += sizes[pos];
        best = std::max(best, total);
      }
      if (best < static_cast<uint64_t>(b)) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "split shard: rank %d reads shards %d, %d, ... (every %d-th) and its fullest of %d "
            "workers holds %d samples, fewer than batch size %d, so a pass of rank %d yields no "
            "full batch; use split sample, fewer workers or ranks, or a smaller batch size",
            rank, rank, rank + w, w, k, best, b, rank));
      }
    }
    return absl::OkStatus();
  }
  // Shuffled: the assignment changes every epoch, and registration must hold for all
  // of them. Worst case: a rank with floor(S/W) shards that are the smallest ones. Its
  // fullest worker holds at least the ceil(share/K) smallest shards and at least the
  // share's average per worker; if that bound is below B, refuse (conservative for K > 1,
  // exact for K == 1).
  const int64_t share = num_shards / w;
  const int64_t per_worker = (share + k - 1) / k;
  const uint64_t smallest_share = SumOfSmallest(sizes, share);
  const uint64_t bound = std::max(SumOfSmallest(sizes, per_worker),
                                  (smallest_share + k - 1) / static_cast<uint64_t>(k));
  if (bound < static_cast<uint64_t>(b)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "split shard with shuffled shards: in some epoch a rank may get the %d smallest "
        "shards (%d samples in all) over %d workers, and then its fullest worker may hold only "
        "%d samples, fewer than batch size %d, so that rank's pass would yield no full batch; "
        "use split sample, fewer workers or ranks, or a smaller batch size",
        share, smallest_share, k, bound, b));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Split kShard.

class ShardSplitPlan;

// One virtual DataLoader worker of a rank: its shards, read as one stream.
class WorkerStream {
 public:
  WorkerStream(std::vector<int32_t> shards, const std::vector<uint32_t>& sizes, int32_t batch_size,
               int32_t buffer_capacity, uint64_t buffer_seed)
      : shards_(std::move(shards)),
        batch_size_(batch_size),
        buffer_capacity_(buffer_capacity),
        buffer_seed_(buffer_seed) {
    cum_.reserve(shards_.size() + 1);
    cum_.push_back(0);
    for (int32_t shard : shards_) cum_.push_back(cum_.back() + sizes[shard]);
    batches_per_pass_ = static_cast<int64_t>(cum_.back() / batch_size_);
  }

  int64_t batches_per_pass() const { return batches_per_pass_; }

  // Positions the stream before its batch `batch` of the pass.
  void Seek(int64_t batch) {
    next_ = 0;
    cursor_ = 0;
    buffer_.reset();
    if (buffer_capacity_ > 1) {
      buffer_.emplace(buffer_capacity_, buffer_seed_);
      // The buffer's state depends on every draw before: replay them.
      const uint64_t skip = static_cast<uint64_t>(batch) * batch_size_;
      for (uint64_t i = 0; i < skip; ++i) NextSample();
    } else {
      next_ = static_cast<uint64_t>(batch) * batch_size_;
      cursor_ = LocateShard(next_);
    }
  }

  // REQUIRES: the pass has a batch left.
  void NextBatch(std::vector<SampleRef>* out) {
    for (int32_t i = 0; i < batch_size_; ++i) out->push_back(NextSample());
  }

 private:
  SampleRef RefAt(size_t slot, uint64_t pos) const {
    SampleRef ref;
    ref.shard = shards_[slot];
    ref.index = static_cast<int32_t>(pos - cum_[slot]);
    return ref;
  }
  size_t LocateShard(uint64_t pos) const {
    const size_t slot = std::upper_bound(cum_.begin(), cum_.end(), pos) - cum_.begin() - 1;
    return std::min(slot, shards_.size() - 1);
  }

  SampleRef NextSample() {
    if (!buffer_) {
      while (next_ >= cum_[cursor_ + 1]) ++cursor_;  // skips empty shards
      return RefAt(cursor_, next_++);
    }
    while (!buffer_->full() && next_ < cum_.back()) buffer_->Push(next_++);
    const uint64_t pos = buffer_->Pick();
    return RefAt(LocateShard(pos), pos);
  }

  std::vector<int32_t> shards_;
  std::vector<uint64_t> cum_;  // cum_[i] = samples in shards_[0..i)
  int32_t batch_size_;
  int32_t buffer_capacity_;
  uint64_t buffer_seed_;
  int64_t batches_per_pass_ = 0;
  uint64_t next_ = 0;  // next stream position to read (or to push into the buffer)
  size_t cursor_ = 0;  // slot of the shard holding next_ (unbuffered reads)
  std::optional<ShuffleBuffer> buffer_;
};

class ShardSplitIterator : public RankBatchIterator {
 public:
  ShardSplitIterator(std::shared_ptr<const ShardSplitPlan> plan, int32_t rank, int64_t start_batch);
  bool Next(PlannedBatch* batch) override;

 private:
  void SeekPass(int64_t batch_in_pass);

  std::shared_ptr<const ShardSplitPlan> plan_;
  int32_t rank_;
  int64_t next_batch_;
  int64_t end_batch_;
  std::vector<WorkerStream> workers_;
  int64_t pass_length_ = 0;  // batches in one pass over the rank's shards
  int64_t max_rounds_ = 0;   // rounds of the round-robin in one pass
  int64_t round_ = 0;        // current round-robin round of the pass
  int32_t worker_ = 0;       // next worker to ask within the round
};

class ShardSplitPlan : public EpochPlan, public std::enable_shared_from_this<ShardSplitPlan> {
 public:
  ShardSplitPlan(std::vector<uint32_t> sizes, const PlanConfig& config, int64_t epoch, int64_t n)
      : sizes_(std::move(sizes)), config_(config), epoch_(epoch), n_(n) {
    order_ = plan_internal::EpochShardOrder(static_cast<int32_t>(sizes_.size()),
                                            config_.shuffle_shards, config_.seed, epoch_);
  }

  int64_t batches_per_rank() const override { return n_; }

  std::vector<int32_t> ShardsOfRank(int32_t rank) const override {
    std::vector<int32_t> shards;
    if (rank < 0 || rank >= config_.world_size) return shards;
    for (size_t pos = rank; pos < order_.size(); pos += config_.world_size) {
      shards.push_back(order_[pos]);
    }
    return shards;
  }

  std::unique_ptr<RankBatchIterator> Iterate(int32_t rank, int64_t start_batch) const override {
    return std::make_unique<ShardSplitIterator>(shared_from_this(), rank, start_batch);
  }

  const std::vector<uint32_t>& sizes() const { return sizes_; }
  const PlanConfig& config() const { return config_; }
  int64_t epoch() const { return epoch_; }
  uint64_t augment_key() const { return augment_key_; }

 private:
  std::vector<uint32_t> sizes_;
  PlanConfig config_;
  int64_t epoch_;
  int64_t n_;
  std::vector<int32_t> order_;  // the epoch's shard order
  uint64_t augment_key_ = plan_internal::AugmentKey(config_.seed, epoch_);
};

ShardSplitIterator::ShardSplitIterator(std::shared_ptr<const ShardSplitPlan> plan, int32_t rank,
                                       int64_t start_batch)
    : plan_(std::move(plan)), rank_(rank) {
  const PlanConfig& c = plan_->config();
  end_batch_ = plan_->batches_per_rank();
  next_batch_ = std::clamp<int64_t>(start_batch, 0, end_batch_);
  if (rank < 0 || rank >= c.world_size) {  // violated REQUIRES: an empty stream
    next_batch_ = end_batch_;
    return;
  }
  const std::vector<int32_t> rank_shards = plan_->ShardsOfRank(rank);
  for (int32_t w = 0; w < c.workers; ++w) {
    std::vector<int32_t> shards;
    for (size_t pos = w; pos < rank_shards.size(); pos += c.workers) {
      shards.push_back(rank_shards[pos]);
    }
    workers_.emplace_back(std::move(shards), plan_->sizes(), c.batch_size,
                          ShuffleBufferOn(c) ? c.shuffle_buffer : 0,
                          plan_internal::ShuffleBufferSeed(c.seed, plan_->epoch(), rank, w));
    pass_length_ += workers_.back().batches_per_pass();
    max_rounds_ = std::max(max_rounds_, workers_.back().batches_per_pass());
  }
  if (pass_length_ == 0) {  // refused by Create; never loop forever
    next_batch_ = end_batch_;
    return;
  }
  SeekPass(next_batch_ % pass_length_);
}

// Sets every worker and the round-robin cursor to just before batch `k` of the pass.
void ShardSplitIterator::SeekPass(int64_t k) {
  // Batches of rounds [0, t): sum over workers of min(per_pass, t); find the round of k.
  auto before_round = [this](int64_t t) {
    int64_t total = 0;
    for (const WorkerStream& w : workers_) total += std::min(w.batches_per_pass(), t);
    return total;
  };
  int64_t lo = 0, hi = max_rounds_;  // largest t with before_round(t) <= k
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (before_round(mid) <= k) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  round_ = lo;
  int64_t skip = k - before_round(round_);
  worker_ = 0;
  for (int32_t w = 0; w < static_cast<int32_t>(workers_.size()); ++w) {
    if (workers_[w].batches_per_pass() > round_) {
      if (skip == 0) {
        worker_ = w;
        break;
      }
      --skip;
    }
  }
  for (int32_t w = 0; w < static_cast<int32_t>(workers_.size()); ++w) {
    const int64_t done = std::min(workers_[w].batches_per_pass(), round_) +
                         (w < worker_ && workers_[w].batches_per_pass() > round_ ? 1 : 0);
    workers_[w].Seek(done);
  }
}

bool ShardSplitIterator::Next(PlannedBatch* batch) {
  if (next_batch_ >= end_batch_) return false;
  const int32_t num_workers = static_cast<int32_t>(workers_.size());
  // The next worker with a batch left in this round; a new pass after the last round.
  while (true) {
    if (worker_ == num_workers) {
      worker_ = 0;
      ++round_;
    }
    if (round_ >= max_rounds_) {
      SeekPass(0);  // repeat: the same pass again
    }
    if (workers_[worker_].batches_per_pass() > round_) break;
    ++worker_;
  }
  batch->epoch = plan_->epoch();
  batch->rank = rank_;
  batch->index = next_batch_;
  batch->samples.clear();
  batch->samples.reserve(plan_->config().batch_size);
  workers_[worker_].NextBatch(&batch->samples);
  for (SampleRef& ref : batch->samples) {
    ref.augment_seed =
        plan_internal::AugmentSeedWithKey(plan_->augment_key(), ref.shard, ref.index);
  }
  ++worker_;
  ++next_batch_;
  return true;
}

// ---------------------------------------------------------------------------------------
// Split kSample.

class SampleSplitPlan : public EpochPlan, public std::enable_shared_from_this<SampleSplitPlan> {
 public:
  SampleSplitPlan(const std::vector<uint32_t>& sizes, const PlanConfig& config, int64_t epoch,
                  int64_t n)
      : config_(config), epoch_(epoch), n_(n) {
    const int32_t num_shards = static_cast<int32_t>(sizes.size());
    order_ = plan_internal::EpochShardOrder(num_shards, /*shuffle=*/true, config_.seed, epoch_);
    cum_.reserve(num_shards + 1);
    cum_.push_back(0);
    for (int32_t shard : order_) cum_.push_back(cum_.back() + sizes[shard]);
    block_size_ = config_.block_size > 0 ? std::min(config_.block_size, num_shards) : num_shards;
    const int64_t num_blocks = (num_shards + block_size_ - 1) / block_size_;
    blocks_.reserve(num_blocks);
    for (int64_t b = 0; b < num_blocks; ++b) {
      const int64_t first = b * block_size_;
      const int64_t last = std::min<int64_t>(first + block_size_, num_shards);
      blocks_.emplace_back(cum_[last] - cum_[first],
                           plan_internal::BlockPermutationKey(config_.seed, epoch_, b));
    }
    locator_.emplace(&cum_);
  }

  int64_t batches_per_rank() const override { return n_; }
  std::vector<int32_t> ShardsOfRank(int32_t) const override { return {}; }
  std::unique_ptr<RankBatchIterator> Iterate(int32_t rank, int64_t start_batch) const override;
  absl::StatusOr<std::unique_ptr<RankBatchIterator>> IterateFrom(
      int32_t rank, int64_t start_batch, int64_t sample_offset) const override;

  const PlanConfig& config() const { return config_; }
  int64_t epoch() const { return epoch_; }
  uint64_t num_samples() const { return cum_.back(); }
  uint64_t augment_key() const { return augment_key_; }

  // The sample at position `pos` (< num_samples()) of the epoch's permutation.
  SampleRef At(uint64_t pos) const {
    // Shard slot (in the epoch's order) holding pos, hence its block.
    const size_t block = locator_->Locate(pos) / block_size_;
    const size_t first = block * block_size_;
    const uint64_t target = cum_[first] + blocks_[block](pos - cum_[first]);
    // target lies in the block, so the slot found is one of the block's shards.
    const size_t target_slot = locator_->Locate(target);
    SampleRef ref;
    ref.shard = order_[target_slot];
    ref.index = static_cast<int32_t>(target - cum_[target_slot]);
    return ref;
  }

 private:
  PlanConfig config_;
  int64_t epoch_;
  int64_t n_;
  std::vector<int32_t> order_;                         // the epoch's shard order
  std::vector<uint64_t> cum_;                          // samples before each slot of order_
  size_t block_size_ = 1;                              // shards per block (last may be short)
  std::vector<FeistelPermutation> blocks_;             // permutation of each block's samples
  std::optional<plan_internal::SlotLocator> locator_;  // over cum_
  uint64_t augment_key_ = plan_internal::AugmentKey(config_.seed, epoch_);
};

class SampleSplitIterator : public RankBatchIterator {
 public:
  // `end_batch`: batches of the epoch dealt from `sample_offset`.
  SampleSplitIterator(std::shared_ptr<const SampleSplitPlan> plan, int32_t rank,
                      int64_t start_batch, uint64_t sample_offset, int64_t end_batch)
      : plan_(std::move(plan)), rank_(rank), sample_offset_(sample_offset) {
    end_batch_ = end_batch;
    next_batch_ = std::clamp<int64_t>(start_batch, 0, end_batch_);
    if (rank < 0 || rank >= plan_->config().world_size) next_batch_ = end_batch_;
  }

  bool Next(PlannedBatch* batch) override {
    if (next_batch_ >= end_batch_) return false;
    const PlanConfig& c = plan_->config();
    batch->epoch = plan_->epoch();
    batch->rank = rank_;
    batch->index = next_batch_;
    batch->samples.assign(c.batch_size, SampleRef{});
    const uint64_t first =
        sample_offset_ + (static_cast<uint64_t>(next_batch_) * c.world_size + rank_) * c.batch_size;
    for (int32_t i = 0; i < c.batch_size; ++i) {
      const uint64_t pos = first + i;
      if (pos >= plan_->num_samples()) break;  // padding (remainder pad) from here on
      SampleRef& ref = batch->samples[i];
      ref = plan_->At(pos);
      ref.augment_seed =
          plan_internal::AugmentSeedWithKey(plan_->augment_key(), ref.shard, ref.index);
    }
    ++next_batch_;
    return true;
  }

 private:
  std::shared_ptr<const SampleSplitPlan> plan_;
  int32_t rank_;
  uint64_t sample_offset_;  // the epoch is dealt from this position (elastic resume)
  int64_t next_batch_;
  int64_t end_batch_;
};

std::unique_ptr<RankBatchIterator> SampleSplitPlan::Iterate(int32_t rank,
                                                            int64_t start_batch) const {
  return std::make_unique<SampleSplitIterator>(shared_from_this(), rank, start_batch,
                                               /*sample_offset=*/0, n_);
}

absl::StatusOr<std::unique_ptr<RankBatchIterator>> SampleSplitPlan::IterateFrom(
    int32_t rank, int64_t start_batch, int64_t sample_offset) const {
  absl::StatusOr<int64_t> n =
      BatchesFromOffset(static_cast<int64_t>(num_samples()), config_, sample_offset);
  if (!n.ok()) return n.status();
  return std::unique_ptr<RankBatchIterator>(std::make_unique<SampleSplitIterator>(
      shared_from_this(), rank, start_batch, static_cast<uint64_t>(sample_offset), *n));
}

// Batches per rank for `samples` dealt `per_step` (> 0) a step. An exhaustive switch
// (no default: -Wswitch flags a new remainder policy here); only a value cast from
// outside the enum gets past it.
template <typename Int>
absl::StatusOr<Int> BatchCount(Int samples, Int per_step, Remainder remainder) {
  switch (remainder) {
    case Remainder::kDrop:
      return samples / per_step;
    case Remainder::kPad:
      return (samples + per_step - 1) / per_step;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown remainder ", static_cast<int>(remainder)));
}

}  // namespace

uint64_t AugmentSeed(uint64_t seed, int64_t epoch, int32_t shard, int32_t index) {
  return plan_internal::AugmentSeedWithKey(plan_internal::AugmentKey(seed, epoch), shard, index);
}

absl::StatusOr<int64_t> BatchesPerRank(const std::vector<uint32_t>& shard_sizes,
                                       const PlanConfig& c) {
  if (c.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size must be at least 1, got ", c.world_size));
  }
  if (c.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch size must be at least 1, got ", c.batch_size));
  }
  if (c.workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("workers must be at least 1, got ", c.workers));
  }
  if (c.shuffle_buffer < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shuffle buffer must be >= 0 (0 = off), got ", c.shuffle_buffer));
  }
  if (c.block_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block size must be >= 0 (0 = one global block), got ", c.block_size));
  }
  if (c.split == Split::kShard && c.remainder == Remainder::kPad) {
    return absl::InvalidArgumentError(
        "remainder pad requires split sample: split shard repeats each rank's shards to "
        "fill n batches, so there is nothing to pad; use split sample for exactly-once "
        "evaluation, or remainder drop");
  }
  if (shard_sizes.empty()) {
    return absl::FailedPreconditionError("the dataset has no shards");
  }
  if (shard_sizes.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::FailedPreconditionError(
        absl::StrCat("the dataset has ", shard_sizes.size(), " shards, more than 2^31-1"));
  }
  uint64_t total = 0;
  for (uint32_t size : shard_sizes) {
    if (size > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
      return absl::FailedPreconditionError(
          absl::StrCat("a shard has ", size, " samples, more than 2^31-1"));
    }
    total += size;
  }
  const uint64_t per_step = static_cast<uint64_t>(c.batch_size) * c.world_size;
  const absl::StatusOr<uint64_t> batches = BatchCount(total, per_step, c.remainder);
  if (!batches.ok()) return batches.status();
  const uint64_t n = *batches;
  if (n == 0) {
    if (total == 0) return absl::FailedPreconditionError("the dataset has no samples");
    return absl::FailedPreconditionError(absl::StrFormat(
        "the dataset has %d samples, fewer than batch size %d x world size %d = %d, so every "
        "rank would get 0 batches; lower the batch size or the world size%s",
        total, c.batch_size, c.world_size, per_step,
        c.split == Split::kSample ? ", or use remainder pad" : ""));
  }
  if (c.split == Split::kShard) {
    const uint64_t num_shards = shard_sizes.size();
    if (num_shards < static_cast<uint64_t>(c.world_size)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "split shard gives each rank whole shards, but there are %d shards for world size "
          "%d; use split sample, or fewer ranks",
          num_shards, c.world_size));
    }
    const uint64_t readers = static_cast<uint64_t>(c.world_size) * c.workers;
    if (num_shards < readers) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "split shard gives each worker whole shards, but there are %d shards for world size "
          "%d x %d workers = %d readers; use fewer workers (at most %d), or split sample",
          num_shards, c.world_size, c.workers, readers, num_shards / c.world_size));
    }
    absl::Status passes = CheckShardSplitPasses(shard_sizes, c);
    if (!passes.ok()) return passes;
  }
  return static_cast<int64_t>(n);
}

namespace {

absl::Status ElasticNeedsSampleSplit() {
  return absl::FailedPreconditionError(
      "an elastic resume (another world size or batch size mid-epoch) needs split sample: "
      "split shard deals whole shards by rank and repeats them, so there is no global "
      "position to continue from; resume with the same world size and batch size, or "
      "start the next epoch");
}

}  // namespace

absl::StatusOr<int64_t> BatchesFromOffset(int64_t num_samples, const PlanConfig& c,
                                          int64_t sample_offset) {
  if (sample_offset < 0 || sample_offset > num_samples) {
    return absl::OutOfRangeError(absl::StrFormat(
        "sample offset %d is outside the epoch's [0, %d] positions", sample_offset, num_samples));
  }
  if (sample_offset > 0 && c.split != Split::kSample) {
    return ElasticNeedsSampleSplit();
  }
  const int64_t per_step = int64_t{c.batch_size} * c.world_size;
  if (per_step <= 0) return absl::InvalidArgumentError("batch size x world size must be > 0");
  const int64_t left = num_samples - sample_offset;
  return BatchCount(left, per_step, c.remainder);
}

absl::StatusOr<std::unique_ptr<RankBatchIterator>> EpochPlan::IterateFrom(
    int32_t rank, int64_t start_batch, int64_t sample_offset) const {
  if (sample_offset != 0) {
    return ElasticNeedsSampleSplit();
  }
  return Iterate(rank, start_batch);
}

absl::StatusOr<std::shared_ptr<const EpochPlan>> EpochPlan::Create(
    std::vector<uint32_t> shard_sizes, const PlanConfig& config, int64_t epoch) {
  absl::StatusOr<int64_t> n = BatchesPerRank(shard_sizes, config);
  if (!n.ok()) return n.status();
  switch (config.split) {
    case Split::kShard:
      return std::make_shared<ShardSplitPlan>(std::move(shard_sizes), config, epoch, *n);
    case Split::kSample:
      return std::make_shared<SampleSplitPlan>(shard_sizes, config, epoch, *n);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown split ", static_cast<int>(config.split)));  // cast from outside
}

}  // namespace shardcast

// The epoch planner: which samples each rank gets in each batch of an epoch.
// A pure function of (shard sample counts, config, epoch): no I/O, no clock, no
// global state. It is the guarantee of the product: every rank gets exactly
// batches_per_rank() batches, for every epoch.
#ifndef SHARDCAST_COMMON_PLAN_EPOCH_PLAN_H_
#define SHARDCAST_COMMON_PLAN_EPOCH_PLAN_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/plan/job_config.h"
// PlanFingerprint and PlanConfigString: the plan's identity, below the planner so that
// the job fingerprint (job_config.cc) takes it without including this file.
#include "common/plan/plan_fingerprint.h"

namespace shardcast {

// The splits and remainders (enums and PlanConfig in common/plan/job_config.h).
// Semantics, pinned by tests/common/epoch_plan_test.cc:
//
// kShard (the seed's loader, batch for batch): the epoch's shard order is 0..S-1, or
// a shuffle seeded by (seed, epoch) when shuffle_shards. Rank r takes order positions
// r, r+W, ...; worker j of K takes positions j, j+K, ... of the rank's list. A worker's
// stream is its shards' samples concatenated in order, optionally passed through a
// shuffle buffer (webdataset's shuffle(bufsize): append each sample; once the buffer
// holds shuffle_buffer samples, or the stream has ended, yield a uniformly chosen slot
// and move the last sample into it; seeded by (seed, epoch, rank, worker)). A worker
// yields floor(samples / B) full batches per pass; its partial tail is dropped. The
// rank's pass is round-robin over workers (batch i from worker i % K), skipping workers
// that ran dry, as torch's DataLoader does for an IterableDataset. When the pass is
// over the SAME pass starts again (identical shuffle-buffer draws); the sequence is
// cut at n = N // (B*W). Remainder kPad is refused for kShard (repeat already fills
// every rank; padding would only mean something for exactly-once evaluation: use
// kSample). Shards are refused when S < W*K, or when some rank's pass could yield no
// full batch: for the natural order that is checked exactly for every rank; with
// shuffle_shards the order changes each epoch and registration must hold for all
// of them, so the check is for the worst order: a rank given the floor(S/W) smallest
// shards. Its fullest worker holds at least max(the ceil(floor(S/W)/K) smallest shards,
// that share's total / K) samples; the config is refused when that bound is below B
// (exact for K = 1, conservative for K > 1), so no later epoch can fail.
//
// kSample (exactly-once): shards are always shuffled by (seed, epoch) and grouped in
// blocks of block_size consecutive shards of that order (0 = one block of all); the
// samples of each block are permuted by a seeded bijection (computed on demand, never
// materialized); the blocks are concatenated into positions 0..N-1, and batch j of
// rank r is positions (j*W + r)*B ... (j*W + r + 1)*B - 1. Positions >= N are padding
// (kPad only). shuffle_shards, workers and shuffle_buffer do not apply to kSample.
//
// Elastic resume (kSample only): the permutation depends on neither W nor B, so an
// epoch interrupted after G of its positions were consumed continues on W' ranks with
// batch B' from position G: batch j of rank r is positions G + (j*W' + r)*B' ...
// +B'-1, n' = (N-G) // (B'*W') with kDrop, ceil((N-G) / (B'*W')) with kPad. Positions
// before G are never dealt again, so across the change no sample is served twice, and
// with kPad every one exactly once. kShard is refused: its rank-to-shard assignment
// and repeat/slice depend on W, so there is no position to continue from.

// A reference to one sample: shard position in the sorted shard list and position
// of the sample inside that shard. Padding entries have shard == index == -1.
struct SampleRef {
  int32_t shard = -1;
  int32_t index = -1;
  uint64_t augment_seed = 0;  // seeds kRandom transforms; fixed by the plan
  // A mixed job (mixture_epoch.h): the sample's dataset, its place in the mixture;
  // shard and index are then that dataset's. 0 for a single-dataset job.
  int32_t dataset = 0;
  bool valid() const { return shard >= 0; }
};

struct PlannedBatch {
  int64_t epoch = 0;
  int32_t rank = 0;
  int64_t index = 0;               // 0 .. batches_per_rank()-1
  std::vector<SampleRef> samples;  // exactly batch_size entries
};

// Produces one rank's batches lazily, in order.
class RankBatchIterator {
 public:
  virtual ~RankBatchIterator() = default;
  // Fills `batch` and returns true, or returns false after the last batch.
  virtual bool Next(PlannedBatch* batch) = 0;
};

// Augmentation seed of a sample in an epoch (same sample, epoch, seed -> same bytes).
uint64_t AugmentSeed(uint64_t seed, int64_t epoch, int32_t shard, int32_t index);

class EpochPlan {
 public:
  // Validates the config against the data and builds the epoch's shared state
  // (shard order, permutation). Refusals are InvalidArgument/FailedPrecondition
  // with a message that says why and what to change.
  static absl::StatusOr<std::shared_ptr<const EpochPlan>> Create(std::vector<uint32_t> shard_sizes,
                                                                 const PlanConfig& config,
                                                                 int64_t epoch);

  virtual ~EpochPlan() = default;
  virtual int64_t batches_per_rank() const = 0;
  // Shards read by `rank` in this epoch (split kShard; empty for kSample).
  virtual std::vector<int32_t> ShardsOfRank(int32_t rank) const = 0;
  // Batches start_batch .. batches_per_rank()-1 of `rank`; the suffix of the
  // sequence from 0. REQUIRES: 0 <= rank < world_size, 0 <= start_batch <= n.
  // The iterator keeps the plan alive.
  virtual std::unique_ptr<RankBatchIterator> Iterate(int32_t rank, int64_t start_batch) const = 0;
  // Elastic resume: batches start_batch .. of `rank` when the epoch is dealt from
  // position `sample_offset` (see above). sample_offset 0 is Iterate. REQUIRES:
  // 0 <= start_batch <= BatchesFromOffset(...). FAILED_PRECONDITION for kShard with
  // an offset; OUT_OF_RANGE for an offset outside [0, N].
  virtual absl::StatusOr<std::unique_ptr<RankBatchIterator>> IterateFrom(
      int32_t rank, int64_t start_batch, int64_t sample_offset) const;
};

// Batches per rank of an epoch dealt from position `sample_offset` of N samples
// (split kSample; see above): the n of the rest of an elastically resumed epoch.
// OUT_OF_RANGE for an offset outside [0, N]; FAILED_PRECONDITION for kShard with an
// offset (the message says what to do instead).
absl::StatusOr<int64_t> BatchesFromOffset(int64_t num_samples, const PlanConfig& config,
                                          int64_t sample_offset);

// n for (data, config) without building an epoch, or the refusal.
absl::StatusOr<int64_t> BatchesPerRank(const std::vector<uint32_t>& shard_sizes,
                                       const PlanConfig& config);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_PLAN_EPOCH_PLAN_H_

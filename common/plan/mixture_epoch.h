// A mixed job's epochs: the mixture planner's global sequence (mixture_plan.h) dealt to
// ranks in batches, as split="sample" deals its permutation. The wiring of
// MixturePlanner into jobs; the guarantees of the sequence are mixture_plan.h's.
#ifndef SHARDCAST_COMMON_PLAN_MIXTURE_EPOCH_H_
#define SHARDCAST_COMMON_PLAN_MIXTURE_EPOCH_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/plan/epoch_plan.h"
#include "common/plan/job_config.h"
#include "common/plan/mixture_plan.h"

namespace shardcast {

// A segment of an earlier run (StreamBatchesRequest.mix_resume) and the schedule its run
// drew under; empty: the segment before's (for the first: the resumed job's own).
struct MixtureRunSegment {
  MixtureSegment segment;
  std::vector<MixturePoint> schedule;
};

// How a mixed job deals its sequence (docs/design.md, "Mixtures"):
// epoch e is positions [e*S, (e+1)*S) of the global sequence (S = samples_per_epoch),
// and batch j of rank r is positions e*S + (j*W + r)*B ... + B-1, as split="sample"
// deals its permutation: n = S // (B*W) with remainder drop (the S mod (B*W) positions
// at the end of each epoch are drawn by the planner but served to no rank: with drop,
// a samples_per_epoch that is a multiple of B*W serves every draw), ceil(S / (B*W))
// with pad (positions at or past S are padding). The epoch start does not depend on W
// or B, so an elastic resume continues from a global position as split="sample" does.
// The schedule's step is position / (B*W) (one segment): the batches a rank has taken
// when S is a multiple of B*W, the same number on every rank always.
//
// Each drawn sample is a SampleRef with `dataset` set to the dataset's place in the
// mixture (canonical order: by name), `shard` and `index` the dataset's selected-sample
// coordinates (JobSamples: map them to the index per dataset), and an augment seed
// keyed by (seed, dataset, pass, shard, index), so two passes over a small dataset
// crop and flip it differently.
class MixtureJobPlan : public std::enable_shared_from_this<MixtureJobPlan> {
 public:
  // `shard_sizes[d]`: dataset d's selected samples per shard, d in the spec's order.
  // The spec's samples are their sums. Refusals: the planner's (InvalidArgument), and
  // FAILED_PRECONDITION for a remainder drop whose epoch has no full step.
  static absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> Create(
      MixtureSpec spec, std::vector<std::vector<uint32_t>> shard_sizes, const PlanConfig& config);

  // A resumed run (StreamBatchesRequest.mix_resume): this job's mixture continuing, from
  // `position`, the runs that drew the positions before it under `segments` (their
  // global batches, each with its run's schedule). The planner's state at `position` is
  // theirs, replayed segment by segment as each run drew it (O(position k), once): run i
  // planned under segments 0..i and its schedule, from run i-1's state at its start;
  // where the schedule changes the lags restart (passes go on), where only the global
  // batch changes nothing restarts. From `position` this job's schedule and global batch
  // hold (a segment from `position` at the step after the earlier run's last), the lags
  // restarting there under another schedule. INVALID_ARGUMENT naming the segment for
  // segments or schedules the planner refuses. Epochs before the one holding `position`
  // cannot be planned (OUT_OF_RANGE), nor positions before it (the stream's
  // sample_offset must reach it).
  absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> Resumed(
      int64_t position, const std::vector<MixtureRunSegment>& segments) const;
  // The first position this plan deals (0; a resumed plan's `position`).
  int64_t origin() const { return origin_.position; }

  int64_t batches_per_rank() const { return batches_per_rank_; }
  int64_t samples_per_epoch() const { return static_cast<int64_t>(spec_.samples_per_epoch); }
  const MixturePlanner& planner() const { return planner_; }
  const MixtureSpec& spec() const { return spec_; }

  // Epoch `epoch` as an EpochPlan (Iterate, IterateFrom with a sample offset). Walks
  // the sequence from the nearest epoch start already known (cached): the first plan
  // of an epoch costs O(S k) once. OUT_OF_RANGE past the planner's 2^62 positions.
  absl::StatusOr<std::shared_ptr<const EpochPlan>> Epoch(int64_t epoch) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The planner's state at the start of `epoch` (what Epoch walks from).
  absl::StatusOr<MixtureState> EpochStartState(int64_t epoch) const ABSL_LOCKS_EXCLUDED(mu_);

  // The planner's state at offset `offset` of `epoch` (0 <= offset <= S): the draws
  // per dataset up to there. O(offset k) past the epoch's start.
  absl::StatusOr<MixtureState> StateAt(int64_t epoch, int64_t offset) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The SampleRef of a draw (see the class comment); `epoch` is unused by the seed.
  SampleRef RefOf(const MixtureDraw& draw) const;

 private:
  // The planner's state at `position` after `segments` (see Resumed), and the step of
  // the position before it.
  struct Replayed {
    MixtureState state;
    int64_t last_step = 0;
  };
  absl::StatusOr<Replayed> Replay(int64_t position,
                                  const std::vector<MixtureRunSegment>& segments) const;
  static absl::Status DrawRun(const MixtureSpec& run, const MixtureState* from, int64_t end,
                              Replayed* out);

  MixtureJobPlan(MixtureSpec spec, MixturePlanner planner,
                 std::vector<std::vector<uint32_t>> shard_sizes, const PlanConfig& config,
                 int64_t batches_per_rank, MixtureState origin);

  const MixtureSpec spec_;
  const MixturePlanner planner_;
  const PlanConfig config_;
  const int64_t batches_per_rank_;
  // Per dataset, the first selected sample of each shard, and the total last.
  std::vector<std::vector<uint64_t>> cum_;
  std::vector<uint64_t> dataset_keys_;  // per dataset: the augment seeds' key
  std::vector<std::vector<uint32_t>> shard_sizes_;
  const MixtureState origin_;  // the state at the first position dealt (position 0 unless resumed)

  mutable absl::Mutex mu_;
  // Planner states at epoch starts, for the epochs walked so far (bounded: the most
  // recent few and epoch 0).
  mutable std::map<int64_t, MixtureState> starts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_PLAN_MIXTURE_EPOCH_H_

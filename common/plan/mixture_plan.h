// The mixture planner: which dataset, and which sample of it, each position of a job's
// global sequence draws from, when a job reads several datasets at set (or scheduled)
// weights. A pure function of (dataset sizes, schedule, segments, seed, position): no
// I/O, no clock. Not yet wired into jobs (issue 47): this is the planner alone.
#ifndef SHARDCAST_COMMON_PLAN_MIXTURE_PLAN_H_
#define SHARDCAST_COMMON_PLAN_MIXTURE_PLAN_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/plan/epoch_plan_internal.h"

namespace shardcast {

// Positions are the job's global sequence since the start of training, across epochs
// (epoch e's offset o is position e * samples_per_epoch + o when the wiring deals whole
// epochs). Steps are batches a rank has taken since the start of training.
//
// GUARANTEES, and why they hold.
//
// Fixed-point weights. Each schedule point's weights are normalised to integers that sum
// to exactly 2^58 (w / sum in IEEE double, correctly rounded on every machine and free of
// contraction, scaled by 2^58 and floored; the few units of rounding go to the largest
// weight). At step s between points (s0, A) and (s1, B) the interpolation fraction is
// f = floor(2^58 (s - s0) / (s1 - s0)) and dataset i's weight is
// A_i (2^58 - f) + B_i f in units of 2^-116: it depends on dataset i alone, the weights
// sum to exactly 2^116, and every operation is integer, so every machine and replica
// computes the same bits. Before the first point the first point's weights hold, after
// the last the last's. The fixed-point weight differs from the real-valued linear
// interpolation by < (k+2) 2^-53 per position (the double division's 2^-53, the
// floors' 2^-58, the rounding units given to the largest weight, the fraction's 2^-58):
// < 2^-49 for 8 datasets, so < 2^-9 over 2^40 positions. The bounds below are exact
// against the fixed-point weights.
//
// (1) Proportions. For every prefix of length n >= 0 and every dataset i,
//     |count_i(n) - T_i(n)| <= 1 - 1/(2k-2) (k >= 2 datasets; 0 for k = 1), where
//     T_i(n) is the sum of i's fixed-point weights over positions 0..n-1. How: Tijdeman's
//     solution of the chairman assignment problem (R. Tijdeman, "The chairman assignment
//     problem", Discrete Math. 32 (1980) 323-330). With lag_i = T_i(m) - count_i(m) and
//     w_i = i's weight at position m, dataset i is eligible at m when
//     lag_i + w_i >= 1/(2k-2); its deadline is the first m' >= m at which
//     lag_i + sum_{p=m..m'} w_i(p) > 1 - 1/(2k-2), i.e. the last position by which it
//     must be drawn. Position m draws the eligible dataset with the earliest deadline.
//     An eligible dataset always exists: the lags sum to 0 and the weights to 1, so some
//     lag_i + w_i >= 1/k >= 1/(2k-2). Drawing only eligible datasets keeps every lag
//     >= -(1 - 1/(2k-2)) (a draw lowers lag_i + w_i by 1). That every deadline is met,
//     so no lag ever exceeds 1 - 1/(2k-2), is Tijdeman's theorem for this rule, for any
//     sequence of weight vectors summing to 1, known in advance (here: computed from the
//     schedule). The property tests check the bound exactly at every prefix of every
//     random case; the largest lag they see is 0.92854 for k = 8, just under the bound
//     1 - 1/14 = 0.92857.
//     Ties (equal deadlines) go to the smallest seeded hash of (seed, position,
//     dataset), so the interleave of equal-weight datasets is no fixed pattern. Lags are
//     kept in units of 2^-116 / (2k-2) in __int128 (|lag| <= 1: no overflow), every
//     comparison exact. A dataset that is not drawn keeps its deadline (its lag grows by
//     exactly the weight its deadline already counted), so a deadline is recomputed only
//     for the dataset drawn; see "Cost".
// (2) Passes. Dataset i's c-th draw (c from 0) is sample perm_{i,c / N_i}(c mod N_i),
//     where perm_{i,p} is the split="sample" Feistel bijection of [0, N_i) keyed by
//     (seed, i, p): a new seeded shuffle per pass. A pass is a bijection, so within
//     pass p every sample is served once, and pass p+1 starts only after pass p ended:
//     no sample is served r+1 times before every sample of its dataset was served r
//     times, across epoch boundaries, resumes and weight changes alike.
// (3) Determinism. The sequence is a function of (sizes, fixed-point schedule,
//     segments, seed) and the position only: no floating point after normalisation, no
//     std:: distributions, no iteration order of hashed containers.
// (4) Resume. MixtureState (position, per dataset: draws and lag) is the whole state
//     of the sequence: deadlines are recomputed from it. Resuming under the same
//     schedule and segments continues the identical sequence (the deadlines recomputed
//     equal the ones the uninterrupted run held, being functions of the same lag and
//     future weights). Resuming under another schedule (another fingerprint) keeps
//     every dataset's draw count, so its pass continues where it was (never restarted),
//     and restarts the targets at the resume point (lags 0): (1) then holds for the
//     counts and targets taken from the resume point, by the same proof. An elastic
//     resume (same schedule, other segments from the resume position on) keeps the lags;
//     the future weights differ only through the step mapping; the bound from the start
//     is verified by the property tests rather than claimed by the proof above.
//
// Cost. Next(): O(k) to choose, plus the deadline of the drawn dataset, found by walking
// forward from the position over pieces (constant weight: one division) and, inside a
// ramp between two schedule points, over steps one at a time. A dataset of weight w is
// drawn at a rate w and looks ~2/w positions ahead, i.e. ~2/(w G) steps for a global
// batch G: amortised O(k + k/G) per position, plus one walk over a span of weight 0
// whenever such a dataset is drawn. Advance(n) is n Next() calls, O(n k): random access
// to position p costs O(p k) from the start (state checkpoints avoid it). Memory: O(k)
// plus the schedule; independent of the datasets' sizes (the permutations are computed,
// never materialised).

inline constexpr int kMaxMixtureDatasets = 256;
// Positions and steps stay below 2^62 (no overflow in steps * batch or the hashes).
inline constexpr int64_t kMaxMixturePosition = int64_t{1} << 62;
inline constexpr uint64_t kMaxSamplesPerEpoch = uint64_t{1} << 48;

struct MixtureDataset {
  std::string name;
  uint64_t samples = 0;  // usable samples, >= 1
};

// Weights at a step: every dataset of the mixture named once, each finite and >= 0.
struct MixturePoint {
  int64_t step = 0;
  std::vector<std::pair<std::string, double>> weights;
};

// Positions [start_position, next segment's start) take global_batch positions per step,
// counted from start_step. The first segment starts at position 0; a later one (an
// elastic resume) starts at a step after the previous segment's last.
struct MixtureSegment {
  int64_t start_position = 0;
  int64_t start_step = 0;
  int64_t global_batch = 1;  // batch_size * world_size

  bool operator==(const MixtureSegment& o) const {
    return start_position == o.start_position && start_step == o.start_step &&
           global_batch == o.global_batch;
  }
};

// INVALID_ARGUMENT unless `segments` is a run's sequence as the planner takes it: the
// first at position 0, start positions increasing, each global batch in [1, 2^40], each
// start step after the previous segment's last. What a client checks before it computes
// with segments read from a checkpoint (client/reconnect/mix_resume).
absl::Status ValidateMixtureSegments(const std::vector<MixtureSegment>& segments);

// Datasets are identified by their index here (the pass shuffles are keyed by it): the
// wiring must list them in one canonical order (e.g. by name) on every replica and resume.
struct MixtureSpec {
  std::vector<MixtureDataset> datasets;
  std::vector<MixturePoint> schedule;  // one point: constant weights
  std::vector<MixtureSegment> segments;
  uint64_t samples_per_epoch = 0;
  uint64_t seed = 0;
};

// One position's draw: sample `index` of dataset `dataset`, in that dataset's pass `pass`.
struct MixtureDraw {
  int32_t dataset = -1;
  uint64_t pass = 0;
  uint64_t index = 0;
  bool operator==(const MixtureDraw& o) const {
    return dataset == o.dataset && pass == o.pass && index == o.index;
  }
};

// The resumable state: the checkpoint. pass = draws / samples, into it = draws % samples.
struct MixtureDatasetState {
  uint64_t draws = 0;
  __int128 lag = 0;  // T_i - count_i in units of 2^-116 / (2k-2)
};
struct MixtureState {
  int64_t position = 0;
  uint64_t schedule_fingerprint = 0;  // of the schedule the lags refer to
  std::vector<MixtureDatasetState> datasets;
};

class MixturePlanner {
 public:
  // Validates the spec; refusals are InvalidArgument naming the problem.
  static absl::StatusOr<MixturePlanner> Create(const MixtureSpec& spec);

  int num_datasets() const { return static_cast<int>(sizes_.size()); }
  // The first position of `epoch` (epoch * samples_per_epoch): where a wiring that deals
  // whole epochs starts it. OutOfRange when it would pass 2^62.
  absl::StatusOr<int64_t> EpochStart(int64_t epoch) const;
  // Identity of the fixed-point schedule (not of the segments): a resume under another
  // fingerprint restarts the targets (guarantee 4).
  uint64_t schedule_fingerprint() const { return fingerprint_; }
  // Step of a position under the segments.
  int64_t StepOf(int64_t position) const;
  // Dataset i's weight at a step in units of 2^-116.
  unsigned __int128 WeightAt(int i, int64_t step) const;

  // A cursor walks the sequence; it holds the state plus each dataset's deadline and
  // current pass permutation (O(k) memory).
  class Cursor {
   public:
    const MixtureState& state() const { return state_; }
    int64_t position() const { return state_.position; }

   private:
    friend class MixturePlanner;
    MixtureState state_;
    std::vector<int64_t> deadline_;  // last position by which dataset i must be drawn
    std::vector<plan_internal::FeistelPermutation> perm_;
    std::vector<uint64_t> perm_pass_;
  };

  Cursor Start() const;
  // Continues from a checkpoint (guarantee 4): InvalidArgument when the state does not
  // fit this mixture (dataset count, position out of range).
  absl::StatusOr<Cursor> Resume(const MixtureState& state) const;
  // The draw at cursor->position(), then advances by one. REQUIRES: position < 2^62.
  MixtureDraw Next(Cursor* cursor) const;
  // n Next() calls without returning draws: O(n k).
  void Advance(Cursor* cursor, int64_t n) const;

 private:
  int64_t Deadline(const Cursor& c, int i, int64_t from) const;
  int64_t FirstPositionOfStep(int64_t step) const;
  size_t SegmentOf(int64_t position) const;

  std::vector<uint64_t> sizes_;
  std::vector<int64_t> point_steps_;
  std::vector<std::vector<uint64_t>> point_weights_;  // [point][dataset], sum 2^58
  std::vector<MixtureSegment> segments_;
  uint64_t samples_per_epoch_ = 0;
  uint64_t seed_ = 0;
  uint64_t fingerprint_ = 0;
  __int128 scale_ = 1;  // 2k-2 (1 for k = 1)
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_PLAN_MIXTURE_PLAN_H_

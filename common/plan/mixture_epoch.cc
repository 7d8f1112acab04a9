// A mixed job's epochs (mixture_epoch.h): the planner's sequence cut into epochs and
// dealt to ranks, with checkpoints of the planner's state so that a stream starting
// mid-epoch does not walk the epoch from its start.
#include "common/plan/mixture_epoch.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/plan/epoch_plan_internal.h"

namespace shardcast {
namespace {

// One checkpoint of the planner's state every this many positions of an epoch: a
// stream that starts at batch j walks at most this far to its first sample.
constexpr int64_t kCheckpointEvery = 4096;
// Epoch starts kept besides epoch 0 (ranks of a job share one or two epochs).
constexpr size_t kKeptStarts = 8;

constexpr uint64_t kTagMixtureAugment = 0x6d69786175673031ULL;  // "mixaug01"

// One epoch: its checkpoints, and the iterators that deal it.
class MixtureEpoch : public EpochPlan, public std::enable_shared_from_this<MixtureEpoch> {
 public:
  MixtureEpoch(std::shared_ptr<const MixtureJobPlan> job, const PlanConfig& config, int64_t epoch,
               int64_t base, std::vector<MixtureState> checkpoints)
      : job_(std::move(job)),
        config_(config),
        epoch_(epoch),
        base_(base),
        checkpoints_(std::move(checkpoints)) {}

  int64_t batches_per_rank() const override { return job_->batches_per_rank(); }
  std::vector<int32_t> ShardsOfRank(int32_t) const override { return {}; }
  std::unique_ptr<RankBatchIterator> Iterate(int32_t rank, int64_t start_batch) const override {
    return std::make_unique<Iterator>(shared_from_this(), rank, start_batch, 0,
                                      job_->batches_per_rank());
  }
  absl::StatusOr<std::unique_ptr<RankBatchIterator>> IterateFrom(
      int32_t rank, int64_t start_batch, int64_t sample_offset) const override {
    if (base_ + sample_offset < job_->origin()) {
      return absl::FailedPreconditionError(
          absl::StrCat("mix_resume: this run continues the mixture from position ", job_->origin(),
                       "; epoch ", epoch_, " from sample offset ", sample_offset,
                       " starts before it (position ", base_ + sample_offset, ")"));
    }
    absl::StatusOr<int64_t> n =
        BatchesFromOffset(job_->samples_per_epoch(), config_, sample_offset);
    if (!n.ok()) return n.status();
    return std::unique_ptr<RankBatchIterator>(
        std::make_unique<Iterator>(shared_from_this(), rank, start_batch, sample_offset, *n));
  }

 private:
  class Iterator : public RankBatchIterator {
   public:
    Iterator(std::shared_ptr<const MixtureEpoch> epoch, int32_t rank, int64_t start_batch,
             int64_t offset, int64_t count)
        : epoch_(std::move(epoch)),
          rank_(rank),
          next_(start_batch),
          offset_(offset),
          count_(count) {}

    bool Next(PlannedBatch* batch) override {
      if (next_ >= count_) return false;
      const PlanConfig& c = epoch_->config_;
      const int64_t S = epoch_->job_->samples_per_epoch();
      const int64_t first = offset_ + (next_ * c.world_size + rank_) * c.batch_size;
      batch->epoch = epoch_->epoch_;
      batch->rank = rank_;
      batch->index = next_;
      batch->samples.assign(static_cast<size_t>(c.batch_size), SampleRef{});
      MoveTo(first);
      for (int32_t i = 0; i < c.batch_size; ++i) {
        if (first + i >= S) break;  // remainder pad: past the epoch's positions
        batch->samples[static_cast<size_t>(i)] =
            epoch_->job_->RefOf(epoch_->job_->planner().Next(&*cursor_));
      }
      ++next_;
      return true;
    }

   private:
    // Places the cursor at offset `o` of the epoch: onward from where it is, or from the
    // nearest checkpoint when that is closer.
    void MoveTo(int64_t o) {
      const MixturePlanner& planner = epoch_->job_->planner();
      const int64_t target = epoch_->base_ + o;
      const int64_t here = cursor_.has_value() ? cursor_->position() : -1;
      const size_t c = static_cast<size_t>(o / kCheckpointEvery);
      // A resumed plan's checkpoints before its origin hold the origin's state: a
      // checkpoint is wherever its state is, never past `target` (IterateFrom's check).
      const int64_t checkpoint = epoch_->checkpoints_[c].position;
      if (here < 0 || here > target || checkpoint > here) {
        // The checkpoints were made by this planner: Resume cannot refuse them.
        cursor_ = *planner.Resume(epoch_->checkpoints_[c]);
      }
      planner.Advance(&*cursor_, target - cursor_->position());
    }

    const std::shared_ptr<const MixtureEpoch> epoch_;
    const int32_t rank_;
    int64_t next_;
    const int64_t offset_;
    const int64_t count_;
    std::optional<MixturePlanner::Cursor> cursor_;
  };

  const std::shared_ptr<const MixtureJobPlan> job_;
  const PlanConfig config_;
  const int64_t epoch_;
  const int64_t base_;
  const std::vector<MixtureState> checkpoints_;  // at offsets 0, kCheckpointEvery, ...
};

}  // namespace

absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> MixtureJobPlan::Create(
    MixtureSpec spec, std::vector<std::vector<uint32_t>> shard_sizes, const PlanConfig& config) {
  if (config.split != Split::kSample) {
    return absl::InvalidArgumentError(
        absl::StrCat("split: a mixture is dealt as split=\"sample\" (exactly-once within each "
                     "dataset's pass); split=\"",
                     SplitName(config.split), "\" cannot mix datasets"));
  }
  if (shard_sizes.size() != spec.datasets.size()) {
    return absl::InternalError("mixture: shard sizes for another number of datasets");
  }
  const int64_t per_step = int64_t{config.batch_size} * config.world_size;
  if (per_step < 1) return absl::InvalidArgumentError("batch size x world size must be > 0");
  spec.segments = {MixtureSegment{0, 0, per_step}};
  absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(spec);
  if (!planner.ok()) return planner.status();
  absl::StatusOr<int64_t> n =
      BatchesFromOffset(static_cast<int64_t>(spec.samples_per_epoch), config, 0);
  if (!n.ok()) return n.status();
  if (*n == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "samples_per_epoch: ", spec.samples_per_epoch, " samples make no full step of batch ",
        config.batch_size, " x world size ", config.world_size,
        " with remainder drop (raise samples_per_epoch or use remainder pad)"));
  }
  MixtureState origin = planner->Start().state();
  return std::shared_ptr<const MixtureJobPlan>(new MixtureJobPlan(
      std::move(spec), *std::move(planner), std::move(shard_sizes), config, *n, std::move(origin)));
}

// The draws of a run planned as `run` from `from` (nullptr: the start) up to `end`:
// the state there and the step of the position before it.
absl::Status MixtureJobPlan::DrawRun(const MixtureSpec& run, const MixtureState* from, int64_t end,
                                     Replayed* out) {
  absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(run);
  if (!planner.ok()) return planner.status();
  absl::StatusOr<MixturePlanner::Cursor> cursor =
      from == nullptr ? planner->Start() : planner->Resume(*from);
  if (!cursor.ok()) return cursor.status();
  planner->Advance(&*cursor, end - cursor->position());
  out->state = cursor->state();
  out->last_step = planner->StepOf(end - 1);
  return absl::OkStatus();
}

absl::StatusOr<MixtureJobPlan::Replayed> MixtureJobPlan::Replay(
    int64_t position, const std::vector<MixtureRunSegment>& segments) const {
  MixtureSpec run = spec_;
  run.segments.clear();
  for (const MixtureRunSegment& s : segments) run.segments.push_back(s.segment);
  if (absl::StatusOr<MixturePlanner> all = MixturePlanner::Create(run); !all.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("mix_resume: the earlier run: ", all.status().message()));
  }
  run.segments.clear();
  Replayed out;
  for (size_t i = 0; i < segments.size(); ++i) {
    // Run i as it drew: segments 0..i, its schedule, from the state at its start.
    run.segments.push_back(segments[i].segment);
    if (!segments[i].schedule.empty()) run.schedule = segments[i].schedule;
    const int64_t start = segments[i].segment.start_position;
    const int64_t end = i + 1 < segments.size()
                            ? std::min(position, segments[i + 1].segment.start_position)
                            : position;
    absl::Status drawn = start >= position
                             ? MixturePlanner::Create(run).status()  // checked, not drawn
                             : DrawRun(run, i == 0 ? nullptr : &out.state, end, &out);
    if (!drawn.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("mix_resume: earlier segment ", i, " (from position ",
                       segments[i].segment.start_position, "): ", drawn.message()));
    }
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> MixtureJobPlan::Resumed(
    int64_t position, const std::vector<MixtureRunSegment>& segments) const {
  if (position <= 0 || position >= kMaxMixturePosition) {
    return absl::InvalidArgumentError(
        absl::StrCat("mix_resume: position ", position, " is outside [1, 2^62)"));
  }
  absl::StatusOr<Replayed> replayed = Replay(position, segments);
  if (!replayed.ok()) return replayed.status();
  MixtureSpec after = spec_;
  after.segments.clear();
  for (const MixtureRunSegment& s : segments) {
    if (s.segment.start_position < position) after.segments.push_back(s.segment);
  }
  after.segments.push_back(MixtureSegment{position, replayed->last_step + 1,
                                          int64_t{config_.batch_size} * config_.world_size});
  absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(after);
  if (!planner.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("mix_resume: the resumed run: ", planner.status().message()));
  }
  // Under another schedule Resume restarts the lags here (mixture_plan.h, guarantee 4).
  absl::StatusOr<MixturePlanner::Cursor> resumed = planner->Resume(replayed->state);
  if (!resumed.ok()) return resumed.status();
  MixtureState origin = resumed->state();
  return std::shared_ptr<const MixtureJobPlan>(
      new MixtureJobPlan(std::move(after), *std::move(planner), shard_sizes_, config_,
                         batches_per_rank_, std::move(origin)));
}

MixtureJobPlan::MixtureJobPlan(MixtureSpec spec, MixturePlanner planner,
                               std::vector<std::vector<uint32_t>> shard_sizes,
                               const PlanConfig& config, int64_t batches_per_rank,
                               MixtureState origin)
    : spec_(std::move(spec)),
      planner_(std::move(planner)),
      config_(config),
      batches_per_rank_(batches_per_rank),
      shard_sizes_(shard_sizes),
      origin_(std::move(origin)) {
  for (size_t d = 0; d < shard_sizes.size(); ++d) {
    std::vector<uint64_t> cum(1, 0);
    for (uint32_t size : shard_sizes[d]) cum.push_back(cum.back() + size);
    cum_.push_back(std::move(cum));
    dataset_keys_.push_back(plan_internal::SeedOf({config.seed, kTagMixtureAugment, d}));
  }
  // The first state of the origin's epoch this plan has: the origin itself.
  starts_.emplace(origin_.position / samples_per_epoch(), origin_);
}

SampleRef MixtureJobPlan::RefOf(const MixtureDraw& draw) const {
  const std::vector<uint64_t>& cum = cum_[static_cast<size_t>(draw.dataset)];
  // The shard holding the draw's index: the last whose first sample is <= index.
  const size_t shard =
      static_cast<size_t>(std::upper_bound(cum.begin(), cum.end(), draw.index) - cum.begin() - 1);
  SampleRef ref;
  ref.dataset = draw.dataset;
  ref.shard = static_cast<int32_t>(shard);
  ref.index = static_cast<int32_t>(draw.index - cum[shard]);
  ref.augment_seed = plan_internal::AugmentSeedWithKey(
      plan_internal::AugmentKey(dataset_keys_[static_cast<size_t>(draw.dataset)],
                                static_cast<int64_t>(draw.pass)),
      ref.shard, ref.index);
  return ref;
}

absl::StatusOr<MixtureState> MixtureJobPlan::EpochStartState(int64_t epoch) const {
  absl::StatusOr<int64_t> target = planner_.EpochStart(epoch);
  if (!target.ok()) return target.status();
  absl::MutexLock lock(&mu_);
  auto known = starts_.upper_bound(epoch);
  if (known == starts_.begin()) {
    return absl::OutOfRangeError(absl::StrCat("mix_resume: epoch ", epoch,
                                              " lies before the position this run continues "
                                              "from, ",
                                              origin_.position));
  }
  --known;  // the origin's epoch is always known
  if (known->first == epoch) return known->second;
  // Walked under the lock: ranks asking for the same new epoch wait for one walk.
  MixturePlanner::Cursor cursor = *planner_.Resume(known->second);
  for (int64_t e = known->first + 1; e <= epoch; ++e) {
    planner_.Advance(&cursor, e * samples_per_epoch() - cursor.position());
    if (e == epoch || e % 16 == 0) starts_.emplace(e, cursor.state());
  }
  while (starts_.size() > kKeptStarts + 1) starts_.erase(std::next(starts_.begin()));
  return cursor.state();
}

absl::StatusOr<MixtureState> MixtureJobPlan::StateAt(int64_t epoch, int64_t offset) const {
  absl::StatusOr<MixtureState> start = EpochStartState(epoch);
  if (!start.ok()) return start.status();
  MixturePlanner::Cursor cursor = *planner_.Resume(*start);
  const int64_t target =
      epoch * samples_per_epoch() + std::clamp<int64_t>(offset, 0, samples_per_epoch());
  if (target > cursor.position()) planner_.Advance(&cursor, target - cursor.position());
  return cursor.state();
}

absl::StatusOr<std::shared_ptr<const EpochPlan>> MixtureJobPlan::Epoch(int64_t epoch) const {
  absl::StatusOr<MixtureState> start = EpochStartState(epoch);
  if (!start.ok()) return start.status();
  absl::StatusOr<int64_t> end = planner_.EpochStart(epoch + 1);
  if (!end.ok()) return end.status();
  const int64_t S = samples_per_epoch();
  const int64_t base = *end - S;
  std::vector<MixtureState> checkpoints;
  checkpoints.reserve(static_cast<size_t>(S / kCheckpointEvery + 1));
  // From the epoch's start, or a resumed plan's origin inside it: checkpoints before
  // that hold its state (no iterator starts before it).
  MixturePlanner::Cursor cursor = *planner_.Resume(*start);
  for (int64_t o = 0; o < S; o += kCheckpointEvery) {
    if (base + o > cursor.position()) planner_.Advance(&cursor, base + o - cursor.position());
    checkpoints.push_back(cursor.state());
  }
  planner_.Advance(&cursor, *end - cursor.position());
  {
    absl::MutexLock lock(&mu_);
    starts_.emplace(epoch + 1, cursor.state());
  }
  return std::shared_ptr<const EpochPlan>(std::make_shared<MixtureEpoch>(
      shared_from_this(), config_, epoch, base, std::move(checkpoints)));
}

}  // namespace shardcast

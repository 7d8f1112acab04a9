// The mixture planner (mixture_plan.h): validation, the fixed-point schedule, and
// Tijdeman's earliest-deadline-first choice with one dataset's deadline walk per draw.
#include "common/plan/mixture_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"

namespace shardcast {
namespace {

using plan_internal::FeistelPermutation;
using plan_internal::Mix64;
using plan_internal::SeedOf;
using u128 = unsigned __int128;
using i128 = __int128;

// Seed tags of the mixture's decisions, apart from SeedTag's small values (which other
// planners extend) so that no stream of the epoch planner can coincide with these.
constexpr uint64_t kTagMixturePass = 0x6d69787061737331ULL;  // "mixpass1"
constexpr uint64_t kTagMixtureTie = 0x6d69787469653031ULL;   // "mixtie01"
constexpr uint64_t kTagMixtureSchedule = 0x6d69787363683031ULL;

constexpr int kPointBits = 58;  // point weights sum to 2^58, the fraction f is < 2^58
constexpr u128 kPointOne = u128{1} << kPointBits;
constexpr i128 kOne = i128{1} << (2 * kPointBits);  // a weight of 1 in units of 2^-116
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

absl::Status Refuse(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("mixture: ", what));
}

absl::Status ValidateDatasets(const MixtureSpec& spec) {
  if (spec.datasets.empty()) return Refuse("the mixture names no dataset");
  if (spec.datasets.size() > kMaxMixtureDatasets) {
    return Refuse(absl::StrCat(spec.datasets.size(), " datasets; at most ", kMaxMixtureDatasets,
                               " may be mixed"));
  }
  std::set<std::string> names;
  for (const MixtureDataset& d : spec.datasets) {
    if (d.name.empty()) return Refuse("a dataset has an empty name");
    if (!names.insert(d.name).second) return Refuse(absl::StrCat("dataset '", d.name, "' twice"));
    if (d.samples == 0) return Refuse(absl::StrCat("dataset '", d.name, "' has no usable sample"));
  }
  if (spec.samples_per_epoch == 0 || spec.samples_per_epoch > kMaxSamplesPerEpoch) {
    return Refuse(
        absl::StrCat("samples_per_epoch ", spec.samples_per_epoch, " is outside [1, 2^48]"));
  }
  return absl::OkStatus();
}

// A point's weights in dataset order, or the refusal (names, finiteness, sign, sum).
absl::StatusOr<std::vector<double>> PointWeights(const MixtureSpec& spec, size_t p) {
  const MixturePoint& point = spec.schedule[p];
  const std::string where = absl::StrCat("schedule point ", p, " (step ", point.step, ")");
  std::vector<double> w(spec.datasets.size(), -1.0);
  for (const auto& [name, weight] : point.weights) {
    size_t i = 0;
    while (i < spec.datasets.size() && spec.datasets[i].name != name) ++i;
    if (i == spec.datasets.size()) {
      return Refuse(absl::StrCat(where, " names '", name, "', which is not in the mixture"));
    }
    if (w[i] >= 0) return Refuse(absl::StrCat(where, " names '", name, "' twice"));
    if (!std::isfinite(weight) || weight < 0) {
      return Refuse(absl::StrCat(where, ": the weight of '", name, "' is ", weight,
                                 "; weights are finite numbers >= 0"));
    }
    w[i] = weight;
  }
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] < 0) {
      return Refuse(absl::StrCat(where, " does not name '", spec.datasets[i].name,
                                 "'; every point names every dataset of the mixture"));
    }
  }
  return w;
}

// Weights -> integers summing to exactly 2^58. IEEE division and a power-of-two scale
// are correctly rounded everywhere; the rounding difference goes to the largest weight.
absl::StatusOr<std::vector<uint64_t>> FixedPoint(const std::vector<double>& w,
                                                 const std::string& where) {
  double sum = 0;
  for (double x : w) sum += x;
  if (!(sum > 0) || !std::isfinite(sum)) {
    return Refuse(absl::StrCat(where, ": the weights sum to ", sum, "; they must sum to > 0"));
  }
  std::vector<uint64_t> out(w.size());
  int64_t total = 0;
  size_t largest = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double scaled = std::floor((w[i] / sum) * 0x1p58);
    out[i] = static_cast<uint64_t>(std::min(scaled, 0x1p58));
    total += static_cast<int64_t>(out[i]);
    if (out[i] > out[largest]) largest = i;
  }
  out[largest] = static_cast<uint64_t>(static_cast<int64_t>(out[largest]) +
                                       (static_cast<int64_t>(kPointOne) - total));
  return out;
}

}  // namespace

absl::Status ValidateMixtureSegments(const std::vector<MixtureSegment>& segments) {
  if (segments.empty() || segments[0].start_position != 0) {
    return Refuse("the first segment must start at position 0");
  }
  for (size_t j = 0; j < segments.size(); ++j) {
    const MixtureSegment& s = segments[j];
    if (s.global_batch < 1 || s.global_batch > (int64_t{1} << 40)) {
      return Refuse(
          absl::StrCat("segment ", j, ": global batch ", s.global_batch, " is outside [1, 2^40]"));
    }
    if (s.start_step < 0 || s.start_step >= kMaxMixturePosition ||
        s.start_position >= kMaxMixturePosition) {
      return Refuse(absl::StrCat("segment ", j, ": start outside [0, 2^62)"));
    }
    if (j == 0) continue;
    const MixtureSegment& prev = segments[j - 1];
    if (s.start_position <= prev.start_position) {
      return Refuse(absl::StrCat("segment ", j, ": start positions must increase"));
    }
    const int64_t prev_last =
        prev.start_step + (s.start_position - 1 - prev.start_position) / prev.global_batch;
    if (s.start_step <= prev_last) {
      return Refuse(absl::StrCat("segment ", j, ": start step ", s.start_step,
                                 " does not follow the previous segment's last step ", prev_last));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<MixturePlanner> MixturePlanner::Create(const MixtureSpec& spec) {
  if (absl::Status s = ValidateDatasets(spec); !s.ok()) return s;
  if (spec.schedule.empty()) return Refuse("the schedule has no point");
  if (absl::Status s = ValidateMixtureSegments(spec.segments); !s.ok()) return s;
  MixturePlanner planner;
  const size_t k = spec.datasets.size();
  std::vector<bool> ever_positive(k, false);
  uint64_t h = SeedOf({kTagMixtureSchedule, k});
  for (size_t p = 0; p < spec.schedule.size(); ++p) {
    const int64_t step = spec.schedule[p].step;
    if (step < 0 || step >= kMaxMixturePosition) {
      return Refuse(absl::StrCat("schedule point ", p, ": step ", step, " is outside [0, 2^62)"));
    }
    if (p > 0 && step <= spec.schedule[p - 1].step) {
      return Refuse(absl::StrCat("schedule point ", p, ": step ", step,
                                 " does not increase on the previous point's ",
                                 spec.schedule[p - 1].step));
    }
    absl::StatusOr<std::vector<double>> w = PointWeights(spec, p);
    if (!w.ok()) return w.status();
    absl::StatusOr<std::vector<uint64_t>> fixed =
        FixedPoint(*w, absl::StrCat("schedule point ", p, " (step ", step, ")"));
    if (!fixed.ok()) return fixed.status();
    h = SeedOf({h, static_cast<uint64_t>(step)});
    for (size_t i = 0; i < k; ++i) {
      ever_positive[i] = ever_positive[i] || (*fixed)[i] > 0;
      h = SeedOf({h, (*fixed)[i]});
    }
    planner.point_steps_.push_back(step);
    planner.point_weights_.push_back(*std::move(fixed));
  }
  for (size_t i = 0; i < k; ++i) {
    if (!ever_positive[i]) {
      return Refuse(absl::StrCat("dataset '", spec.datasets[i].name,
                                 "' has weight 0 at every point (it would never be read)"));
    }
    planner.sizes_.push_back(spec.datasets[i].samples);
  }
  planner.segments_ = spec.segments;
  planner.samples_per_epoch_ = spec.samples_per_epoch;
  planner.seed_ = spec.seed;
  planner.fingerprint_ = h;
  planner.scale_ = k >= 2 ? static_cast<i128>(2 * k - 2) : 1;
  return planner;
}

absl::StatusOr<int64_t> MixturePlanner::EpochStart(int64_t epoch) const {
  const u128 start = u128(static_cast<uint64_t>(epoch)) * samples_per_epoch_;
  if (epoch < 0 || start >= u128(kMaxMixturePosition)) {
    return absl::OutOfRangeError(absl::StrCat("mixture: epoch ", epoch, " of ", samples_per_epoch_,
                                              " samples starts beyond position 2^62"));
  }
  return static_cast<int64_t>(start);
}

size_t MixturePlanner::SegmentOf(int64_t position) const {
  size_t j = segments_.size() - 1;
  while (segments_[j].start_position > position) --j;  // few segments: linear is enough
  return j;
}

int64_t MixturePlanner::StepOf(int64_t position) const {
  const MixtureSegment& s = segments_[SegmentOf(position)];
  return s.start_step + (position - s.start_position) / s.global_batch;
}

int64_t MixturePlanner::FirstPositionOfStep(int64_t step) const {
  for (size_t j = 0; j < segments_.size(); ++j) {
    const MixtureSegment& s = segments_[j];
    if (step <= s.start_step) return s.start_position;
    const i128 pos = i128{s.start_position} + i128{step - s.start_step} * s.global_batch;
    const int64_t end =
        j + 1 < segments_.size() ? segments_[j + 1].start_position : kMaxMixturePosition;
    if (pos < end) return static_cast<int64_t>(pos);
  }
  return kMaxMixturePosition;
}

unsigned __int128 MixturePlanner::WeightAt(int i, int64_t step) const {
  const size_t after =
      std::upper_bound(point_steps_.begin(), point_steps_.end(), step) - point_steps_.begin();
  if (after == 0) return point_weights_[0][i] * kPointOne;
  if (after == point_steps_.size()) return point_weights_.back()[i] * kPointOne;
  const int64_t s0 = point_steps_[after - 1];
  const int64_t s1 = point_steps_[after];
  const u128 f = (u128(step - s0) << kPointBits) / u128(s1 - s0);
  return u128{point_weights_[after - 1][i]} * (kPointOne - f) + u128{point_weights_[after][i]} * f;
}

// The first position >= from at which lag + (weights from `from` on) exceeds 1 - 1/M,
// walking constant-weight pieces in one division and ramps one step at a time.
int64_t MixturePlanner::Deadline(const Cursor& c, int i, int64_t from) const {
  i128 remaining = kOne * (scale_ - 1) - c.state_.datasets[i].lag;
  if (remaining < 0) return from;
  int64_t p = from;
  while (p < kMaxMixturePosition) {
    const size_t j = SegmentOf(p);
    const MixtureSegment& seg = segments_[j];
    const int64_t seg_end =
        j + 1 < segments_.size() ? segments_[j + 1].start_position : kMaxMixturePosition;
    const int64_t step = seg.start_step + (p - seg.start_position) / seg.global_batch;
    const size_t after =
        std::upper_bound(point_steps_.begin(), point_steps_.end(), step) - point_steps_.begin();
    // The weight is constant until step `flat_until` (exclusive) when outside the
    // schedule's span or between two points that give dataset i the same weight.
    int64_t flat_until = -1;
    if (after == 0) {
      flat_until = point_steps_[0];
    } else if (after == point_steps_.size()) {
      flat_until = kMaxMixturePosition;
    } else if (point_weights_[after - 1][i] == point_weights_[after][i]) {
      flat_until = point_steps_[after];
    }
    int64_t piece_end;
    if (flat_until >= 0) {
      piece_end = std::min(seg_end, FirstPositionOfStep(flat_until));
    } else {
      const int64_t into = (p - seg.start_position) % seg.global_batch;
      piece_end = std::min(seg_end, p + (seg.global_batch - into));
    }
    const i128 w = static_cast<i128>(WeightAt(i, step)) * scale_;
    if (w > 0) {
      const i128 more = remaining / w;  // positions whose weights sum to <= remaining
      if (more < piece_end - p) return p + static_cast<int64_t>(more);
      remaining -= w * (piece_end - p);
    }
    p = piece_end;
  }
  return kNever;
}

MixturePlanner::Cursor MixturePlanner::Start() const {
  MixtureState state;
  state.schedule_fingerprint = fingerprint_;
  state.datasets.resize(sizes_.size());
  return *Resume(state);
}

absl::StatusOr<MixturePlanner::Cursor> MixturePlanner::Resume(const MixtureState& state) const {
  if (state.datasets.size() != sizes_.size()) {
    return Refuse(absl::StrCat("the state has ", state.datasets.size(),
                               " datasets; this mixture has ", sizes_.size()));
  }
  if (state.position < 0 || state.position >= kMaxMixturePosition) {
    return Refuse(absl::StrCat("the state's position ", state.position, " is outside [0, 2^62)"));
  }
  u128 draws = 0;
  i128 lags = 0;
  for (const MixtureDatasetState& d : state.datasets) {
    draws += d.draws;
    lags += d.lag;
  }
  if (draws != u128(state.position) || lags != 0) {
    return Refuse("the state is inconsistent (draws do not sum to its position, or lags to 0)");
  }
  Cursor c;
  c.state_ = state;
  if (state.schedule_fingerprint != fingerprint_) {
    // Another schedule: its targets start here (guarantee 4); passes continue.
    c.state_.schedule_fingerprint = fingerprint_;
    for (MixtureDatasetState& d : c.state_.datasets) d.lag = 0;
  }
  for (size_t i = 0; i < sizes_.size(); ++i) {
    const uint64_t pass = c.state_.datasets[i].draws / sizes_[i];
    c.perm_.emplace_back(sizes_[i], SeedOf({kTagMixturePass, seed_, i, pass}));
    c.perm_pass_.push_back(pass);
    c.deadline_.push_back(Deadline(c, static_cast<int>(i), state.position));
  }
  return c;
}

MixtureDraw MixturePlanner::Next(Cursor* c) const {
  const int64_t m = c->state_.position;
  const int64_t step = StepOf(m);
  const size_t k = sizes_.size();
  i128 w[kMaxMixtureDatasets];  // on the stack: no allocation per position
  int best = -1;
  bool best_tie_known = false;  // the tie hash is drawn only when deadlines tie
  uint64_t best_tie = 0;
  auto tie_of = [&](size_t i) {
    return Mix64(SeedOf({kTagMixtureTie, seed_, static_cast<uint64_t>(m), i}));
  };
  for (size_t i = 0; i < k; ++i) {
    w[i] = static_cast<i128>(WeightAt(static_cast<int>(i), step)) * scale_;
    if (c->state_.datasets[i].lag + w[i] < kOne) continue;  // not eligible
    const int64_t d = c->deadline_[i];
    if (best < 0 || d < c->deadline_[best]) {
      best = static_cast<int>(i);
      best_tie_known = false;
      continue;
    }
    if (d > c->deadline_[best]) continue;
    if (!best_tie_known) best_tie = tie_of(static_cast<size_t>(best));
    best_tie_known = true;
    const uint64_t tie = tie_of(i);
    if (tie < best_tie) {
      best = static_cast<int>(i);
      best_tie = tie;
    }
  }
  if (best < 0) {
    // Unreachable by Tijdeman's lemma (the lags plus weights sum to 1); the largest lag
    // keeps the sequence defined, and the property tests would see the bound broken.
    best = 0;
    for (size_t i = 1; i < k; ++i) {
      if (c->state_.datasets[i].lag + w[i] > c->state_.datasets[best].lag + w[best]) best = i;
    }
  }
  for (size_t i = 0; i < k; ++i) c->state_.datasets[i].lag += w[i];
  MixtureDatasetState& chosen = c->state_.datasets[best];
  chosen.lag -= kOne * scale_;
  const uint64_t pass = chosen.draws / sizes_[best];
  if (pass != c->perm_pass_[best]) {
    c->perm_[best] = FeistelPermutation(
        sizes_[best], SeedOf({kTagMixturePass, seed_, static_cast<uint64_t>(best), pass}));
    c->perm_pass_[best] = pass;
  }
  MixtureDraw draw{best, pass, c->perm_[best](chosen.draws % sizes_[best])};
  ++chosen.draws;
  c->state_.position = m + 1;
  c->deadline_[best] = Deadline(*c, best, m + 1);
  return draw;
}

void MixturePlanner::Advance(Cursor* cursor, int64_t n) const {
  for (int64_t j = 0; j < n; ++j) Next(cursor);
}

}  // namespace shardcast

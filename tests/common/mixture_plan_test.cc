// Proofs of the mixture planner: property tests over random mixtures, schedules and
// elastic segments against a slow reference (weights per position tabulated, deadlines
// by binary search on prefix sums), the prefix bound at every position, the pass rule,
// determinism, resume (same schedule, other schedule, elastic), and the refusals.
#include "common/plan/mixture_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/plan/epoch_plan_internal.h"
#include "gtest/gtest.h"

namespace shardcast {
namespace {

using i128 = __int128;
using u128 = unsigned __int128;
constexpr i128 kOne = i128{1} << 116;

// ---------------------------------------------------------------------------------------
// The reference: every quantity computed the obvious way, position by position.

struct Reference {
  MixtureSpec spec;
  int k = 0;
  std::vector<std::vector<u128>> point_w;  // fixed point, sum 2^58

  explicit Reference(const MixtureSpec& s) : spec(s), k(static_cast<int>(s.datasets.size())) {
    for (const MixturePoint& p : s.schedule) {
      std::vector<double> w(k);
      for (const auto& [name, x] : p.weights) {
        for (int i = 0; i < k; ++i) {
          if (s.datasets[i].name == name) w[i] = x;
        }
      }
      double sum = 0;
      for (double x : w) sum += x;
      std::vector<u128> fixed(k);
      u128 total = 0;
      int largest = 0;
      for (int i = 0; i < k; ++i) {
        fixed[i] = static_cast<u128>(std::floor(w[i] / sum * 0x1p58));
        total += fixed[i];
        if (fixed[i] > fixed[largest]) largest = i;
      }
      fixed[largest] = fixed[largest] + (u128{1} << 58) - total;
      point_w.push_back(fixed);
    }
  }
  int64_t Step(int64_t p) const {
    int64_t step = 0;
    for (const MixtureSegment& s : spec.segments) {
      if (s.start_position <= p) step = s.start_step + (p - s.start_position) / s.global_batch;
    }
    return step;
  }
  // Dataset i's weight at position p in units of 2^-116.
  i128 Weight(int i, int64_t p) const {
    const int64_t s = Step(p);
    const auto& steps = spec.schedule;
    if (s < steps[0].step) return static_cast<i128>(point_w[0][i] << 58);
    for (size_t j = 0; j + 1 < steps.size(); ++j) {
      if (s >= steps[j].step && s < steps[j + 1].step) {
        const u128 f = (u128(s - steps[j].step) << 58) / u128(steps[j + 1].step - steps[j].step);
        return static_cast<i128>(point_w[j][i] * ((u128{1} << 58) - f) + point_w[j + 1][i] * f);
      }
    }
    return static_cast<i128>(point_w.back()[i] << 58);
  }
  // Real-valued weight (no fixed point), for the bound against the schedule itself.
  double RealWeight(int i, int64_t p) const {
    auto at = [&](size_t j) {
      double sum = 0, mine = 0;
      for (const auto& [name, x] : spec.schedule[j].weights) {
        sum += x;
        if (name == spec.datasets[i].name) mine = x;
      }
      return mine / sum;
    };
    const int64_t s = Step(p);
    const auto& steps = spec.schedule;
    if (s < steps[0].step) return at(0);
    for (size_t j = 0; j + 1 < steps.size(); ++j) {
      if (s >= steps[j].step && s < steps[j + 1].step) {
        const double t = double(s - steps[j].step) / double(steps[j + 1].step - steps[j].step);
        return at(j) * (1 - t) + at(j + 1) * t;
      }
    }
    return at(steps.size() - 1);
  }
};

// A sum of weights over thousands of positions overflows __int128 in units of 2^-116:
// whole units and the fraction apart. Differences saturate at 64 (every threshold is < 2).
struct WideSum {
  int64_t whole = 0;
  i128 fraction = 0;  // [0, kOne)
  WideSum Plus(i128 w) const {
    WideSum s = *this;
    s.fraction += w;
    while (s.fraction >= kOne) {
      s.fraction -= kOne;
      ++s.whole;
    }
    return s;
  }
  i128 Minus(const WideSum& o) const {
    if (whole - o.whole >= 64) return kOne * 64;
    return i128{whole - o.whole} * kOne + (fraction - o.fraction);
  }
};

// Tijdeman's EDF from the definitions: lags from the start position, deadlines by binary
// search on a prefix-sum table (extended with the final constant weight past its end).
std::vector<int> ReferenceChoices(const Reference& ref, int64_t from, int64_t n,
                                  std::vector<i128> lag /* real lag * 2^116 */) {
  const int k = ref.k;
  const i128 m_scale = k >= 2 ? 2 * k - 2 : 1;
  const int64_t table_end = from + n + 20000;
  std::vector<std::vector<WideSum>> prefix(k, std::vector<WideSum>(table_end - from + 1));
  for (int i = 0; i < k; ++i) {
    for (int64_t p = from; p < table_end; ++p) {
      prefix[i][p - from + 1] = prefix[i][p - from].Plus(ref.Weight(i, p));
    }
  }
  std::vector<int> out;
  for (int64_t m = from; m < from + n; ++m) {
    int best = -1;
    int64_t best_deadline = 0;
    uint64_t best_tie = 0;
    for (int i = 0; i < k; ++i) {
      const i128 w = ref.Weight(i, m);
      if ((lag[i] + w) * m_scale < kOne) continue;
      // First m' >= m with lag + sum_{m..m'} w > 1 - 1/M, i.e. (..)*M > (M-1).
      auto over = [&](int64_t end) {  // sum over [m, end]
        return (lag[i] + prefix[i][end - from + 1].Minus(prefix[i][m - from])) * m_scale >
               kOne * (m_scale - 1);
      };
      int64_t deadline;
      if (over(table_end - 1)) {
        int64_t lo = m, hi = table_end - 1;
        while (lo < hi) {
          const int64_t mid = lo + (hi - lo) / 2;
          if (over(mid)) {
            hi = mid;
          } else {
            lo = mid + 1;
          }
        }
        deadline = lo;
      } else {
        const i128 tail = ref.Weight(i, table_end);  // constant from here on (by setup)
        const i128 have = lag[i] + prefix[i][table_end - from].Minus(prefix[i][m - from]);
        const i128 need = kOne * (m_scale - 1) - have * m_scale;
        deadline = tail == 0 ? std::numeric_limits<int64_t>::max()
                             : table_end + static_cast<int64_t>(need / (tail * m_scale));
      }
      const uint64_t tie = plan_internal::Mix64(
          plan_internal::SeedOf({0x6d69787469653031ULL, ref.spec.seed, static_cast<uint64_t>(m),
                                 static_cast<uint64_t>(i)}));
      if (best < 0 || deadline < best_deadline || (deadline == best_deadline && tie < best_tie)) {
        best = i;
        best_deadline = deadline;
        best_tie = tie;
      }
    }
    if (best < 0) ADD_FAILURE() << "reference: no eligible dataset at " << m;
    if (best < 0) best = 0;
    for (int i = 0; i < k; ++i) lag[i] += ref.Weight(i, m);
    lag[best] -= kOne;
    out.push_back(best);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Random mixtures.

struct Rand {
  std::mt19937_64 gen;
  explicit Rand(uint64_t seed) : gen(seed) {}
  int64_t Int(int64_t lo, int64_t hi) {  // [lo, hi]
    return lo + static_cast<int64_t>(gen() % static_cast<uint64_t>(hi - lo + 1));
  }
  double Unit() { return static_cast<double>(gen() >> 11) * 0x1p-53; }
};

std::vector<MixturePoint> RandomSchedule(Rand& r, const std::vector<MixtureDataset>& ds) {
  const int k = static_cast<int>(ds.size());
  const int points = static_cast<int>(r.Int(1, 4));
  std::vector<MixturePoint> out;
  int64_t step = r.Int(0, 20);
  std::vector<bool> positive(k, false);
  for (int p = 0; p < points; ++p) {
    MixturePoint point;
    point.step = step;
    step += r.Int(1, 60);
    double sum = 0;
    for (int i = 0; i < k; ++i) {
      // A third of the weights are 0: datasets entering and leaving the curriculum.
      double w = r.Int(0, 2) == 0 ? 0.0 : 0.05 + r.Unit();
      if (p == points - 1 && !positive[i]) w = 0.05 + r.Unit();
      if (p == points - 1 && i == k - 1 && sum == 0 && w == 0) w = 1;
      positive[i] = positive[i] || w > 0;
      sum += w;
      point.weights.emplace_back(ds[i].name, w);
    }
    if (sum == 0) point.weights[r.Int(0, k - 1)].second = 1.0;
    out.push_back(point);
  }
  return out;
}

MixtureSpec RandomSpec(Rand& r) {
  MixtureSpec spec;
  const int k = static_cast<int>(r.Int(1, 8));
  for (int i = 0; i < k; ++i) {
    // Log-uniform sizes in [1, 10^5]: tiny datasets run many passes, large ones none.
    const uint64_t size = static_cast<uint64_t>(std::pow(10.0, 5 * r.Unit()));
    spec.datasets.push_back({absl::StrCat("d", i), std::max<uint64_t>(1, size)});
  }
  spec.schedule = RandomSchedule(r, spec.datasets);
  spec.segments.push_back({0, 0, r.Int(1, 8) * r.Int(1, 8)});  // batch * world size
  spec.samples_per_epoch = static_cast<uint64_t>(r.Int(1, 5000));
  spec.seed = r.gen();
  return spec;
}

// Segments of `spec` up to `position` (a step boundary), then batch `global_batch` from
// the next step on: an elastic resume.
MixtureSpec WithElasticChange(const MixtureSpec& spec, const MixturePlanner& planner,
                              int64_t position, int64_t global_batch) {
  MixtureSpec out = spec;
  out.segments.push_back({position, planner.StepOf(position - 1) + 1, global_batch});
  return out;
}

struct Sequence {
  std::vector<MixtureDraw> draws;
  std::vector<MixtureState> states;  // state before each draw
};

Sequence Walk(const MixturePlanner& planner, MixturePlanner::Cursor c, int64_t n) {
  Sequence s;
  for (int64_t j = 0; j < n; ++j) {
    s.states.push_back(c.state());
    s.draws.push_back(planner.Next(&c));
  }
  return s;
}

double g_max_fixed_lag = 0;  // largest |count - T| seen, in units of 1, over all cases
double g_max_real_lag = 0;

// |count_i - T_i| <= 1 - 1/(2k-2) at every prefix from `from`, exactly (fixed point),
// and <= 1 against the real-valued schedule.
void ExpectPrefixBound(const Reference& ref, const std::vector<MixtureDraw>& draws, int64_t from,
                       const std::string& what) {
  const int k = ref.k;
  const i128 m_scale = k >= 2 ? 2 * k - 2 : 1;
  std::vector<i128> lag(k, 0);
  std::vector<double> real_lag(k, 0);
  for (size_t j = 0; j < draws.size(); ++j) {
    for (int i = 0; i < k; ++i) {
      lag[i] += ref.Weight(i, from + static_cast<int64_t>(j));
      real_lag[i] += ref.RealWeight(i, from + static_cast<int64_t>(j));
    }
    lag[draws[j].dataset] -= kOne;
    real_lag[draws[j].dataset] -= 1;
    for (int i = 0; i < k; ++i) {
      const i128 mag = lag[i] < 0 ? -lag[i] : lag[i];
      g_max_fixed_lag = std::max(g_max_fixed_lag, static_cast<double>(mag) * 0x1p-116);
      g_max_real_lag = std::max(g_max_real_lag, std::abs(real_lag[i]));
      // 1 - 1/(2k-2) for k >= 2; a single dataset is exactly on target.
      const i128 bound = k >= 2 ? kOne * (m_scale - 1) : 0;
      if (mag * m_scale > bound) {
        ADD_FAILURE() << what << ": dataset " << i << " lag "
                      << static_cast<double>(lag[i]) * 0x1p-116 << " after prefix " << j + 1
                      << " (k=" << k << ")";
        return;
      }
      ASSERT_LE(std::abs(real_lag[i]), 1.0 + 1e-9) << what << " dataset " << i;
    }
  }
}

// Pass rule: dataset i's c-th draw (counting from `first_draws`) is in pass c / N_i and
// no index repeats within a pass.
void ExpectPassRule(const MixtureSpec& spec, const std::vector<MixtureDraw>& draws,
                    std::vector<uint64_t> count, const std::string& what) {
  std::vector<std::set<uint64_t>> seen(spec.datasets.size());
  std::vector<uint64_t> seen_pass(spec.datasets.size(), UINT64_MAX);
  for (const MixtureDraw& d : draws) {
    const uint64_t n = spec.datasets[d.dataset].samples;
    const uint64_t c = count[d.dataset]++;
    ASSERT_EQ(d.pass, c / n) << what;
    ASSERT_LT(d.index, n) << what;
    if (seen_pass[d.dataset] != d.pass) {
      seen[d.dataset].clear();
      seen_pass[d.dataset] = d.pass;
    }
    ASSERT_TRUE(seen[d.dataset].insert(d.index).second)
        << what << ": dataset " << d.dataset << " index " << d.index << " twice in pass " << d.pass;
  }
}

// ---------------------------------------------------------------------------------------
// Property tests.

constexpr int kCases = 120;

TEST(MixturePlanTest, MatchesReferenceAndHoldsBoundAndPassRule) {
  Rand r(20261207);
  for (int t = 0; t < kCases; ++t) {
    const MixtureSpec spec = RandomSpec(r);
    const std::string what = absl::StrCat("case ", t, " k=", spec.datasets.size());
    absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(spec);
    ASSERT_TRUE(planner.ok()) << what << ": " << planner.status();
    const int64_t n = r.Int(200, 1500);
    const Sequence seq = Walk(*planner, planner->Start(), n);
    const Reference ref(spec);
    const std::vector<int> expected =
        ReferenceChoices(ref, 0, n, std::vector<i128>(spec.datasets.size(), 0));
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(seq.draws[j].dataset, expected[j]) << what << " position " << j;
    }
    ExpectPrefixBound(ref, seq.draws, 0, what);
    ExpectPassRule(spec, seq.draws, std::vector<uint64_t>(spec.datasets.size(), 0), what);
    // Determinism: another planner from the same spec, and WeightAt against the reference.
    absl::StatusOr<MixturePlanner> again = MixturePlanner::Create(spec);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(Walk(*again, again->Start(), n).draws, seq.draws) << what;
    for (int i = 0; i < ref.k; ++i) {
      const int64_t p = r.Int(0, n);
      EXPECT_TRUE(static_cast<i128>(planner->WeightAt(i, planner->StepOf(p))) == ref.Weight(i, p))
          << what;
    }
  }
  std::printf("max |count - target|: %.6f (fixed point), %.6f (real-valued schedule)\n",
              g_max_fixed_lag, g_max_real_lag);
}

// Weights that jump every step or two (many points, datasets switching between 0 and
// high weights, global batch 1 to 4): the hardest case for the bound.
TEST(MixturePlanTest, DenseSchedulesHoldTheBound) {
  Rand r(555);
  for (int t = 0; t < 40; ++t) {
    MixtureSpec spec = RandomSpec(r);
    std::vector<MixturePoint> dense;
    int64_t step = 0;
    for (int p = 0; p < 30; ++p) {
      std::vector<MixturePoint> one = RandomSchedule(r, spec.datasets);
      one.back().step = step;
      dense.push_back(one.back());
      step += r.Int(1, 3);
    }
    spec.schedule = dense;
    spec.segments = {{0, 0, r.Int(1, 4)}};
    absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(spec);
    ASSERT_TRUE(planner.ok()) << planner.status();
    const Sequence seq = Walk(*planner, planner->Start(), 1500);
    const Reference ref(spec);
    const std::string what = absl::StrCat("dense case ", t, " k=", spec.datasets.size());
    ExpectPrefixBound(ref, seq.draws, 0, what);
    const std::vector<int> expected =
        ReferenceChoices(ref, 0, 1500, std::vector<i128>(spec.datasets.size(), 0));
    for (size_t j = 0; j < expected.size(); ++j) {
      ASSERT_EQ(seq.draws[j].dataset, expected[j]) << what << " position " << j;
    }
  }
  std::printf("max |count - target| so far: %.6f\n", g_max_fixed_lag);
}

TEST(MixturePlanTest, PassesCoverEveryIndexOncePerPass) {
  // Small datasets at large weights: many whole passes, each a permutation.
  Rand r(7);
  for (int t = 0; t < 20; ++t) {
    MixtureSpec spec;
    spec.datasets = {{"tiny", static_cast<uint64_t>(r.Int(1, 7))},
                     {"small", static_cast<uint64_t>(r.Int(1, 40))}};
    spec.schedule = {{0, {{"tiny", 0.5}, {"small", 0.5}}}};
    spec.segments = {{0, 0, 4}};
    spec.samples_per_epoch = 100;
    spec.seed = r.gen();
    absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(spec);
    ASSERT_TRUE(planner.ok());
    const Sequence seq = Walk(*planner, planner->Start(), 800);
    std::vector<std::vector<std::set<uint64_t>>> per_pass(2);
    for (const MixtureDraw& d : seq.draws) {
      auto& passes = per_pass[d.dataset];
      if (passes.size() <= d.pass) passes.resize(d.pass + 1);
      passes[d.pass].insert(d.index);
    }
    for (int i = 0; i < 2; ++i) {
      // Every pass but the last is complete: all N indices.
      for (size_t p = 0; p + 1 < per_pass[i].size(); ++p) {
        EXPECT_EQ(per_pass[i][p].size(), spec.datasets[i].samples) << "pass " << p;
      }
    }
    // Two passes of a dataset of >= 20 samples are different shuffles (seeded per pass).
    if (spec.datasets[1].samples >= 20) {
      std::vector<uint64_t> first, second;
      uint64_t n = spec.datasets[1].samples;
      for (const MixtureDraw& d : seq.draws) {
        if (d.dataset == 1 && d.pass == 0) first.push_back(d.index);
        if (d.dataset == 1 && d.pass == 1) second.push_back(d.index);
      }
      ASSERT_EQ(first.size(), n);
      ASSERT_EQ(second.size(), n);
      EXPECT_NE(first, second);
    }
  }
}

TEST(MixturePlanTest, ResumeSameScheduleContinuesIdentically) {
  Rand r(99);
  for (int t = 0; t < kCases; ++t) {
    const MixtureSpec spec = RandomSpec(r);
    absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(spec);
    ASSERT_TRUE(planner.ok());
    const int64_t n = r.Int(100, 1000);
    const Sequence seq = Walk(*planner, planner->Start(), n);
    const int64_t at = r.Int(0, n - 1);
    absl::StatusOr<MixturePlanner::Cursor> resumed = planner->Resume(seq.states[at]);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    const Sequence rest = Walk(*planner, *resumed, n - at);
    ASSERT_TRUE(std::equal(rest.draws.begin(), rest.draws.end(), seq.draws.begin() + at))
        << "case " << t << " resumed at " << at;
    // Advance reaches the same state as walking.
    MixturePlanner::Cursor c = planner->Start();
    planner->Advance(&c, at);
    EXPECT_EQ(planner->Next(&c), seq.draws[at]);
  }
}

TEST(MixturePlanTest, ResumeOtherScheduleContinuesPassesAndBoundsFromResume) {
  Rand r(4242);
  for (int t = 0; t < kCases; ++t) {
    const MixtureSpec spec = RandomSpec(r);
    absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(spec);
    ASSERT_TRUE(planner.ok());
    const int64_t n = r.Int(100, 800);
    const Sequence seq = Walk(*planner, planner->Start(), n);
    const int64_t at = r.Int(1, n - 1);
    MixtureSpec other = spec;
    other.schedule = RandomSchedule(r, spec.datasets);
    absl::StatusOr<MixturePlanner> next = MixturePlanner::Create(other);
    ASSERT_TRUE(next.ok());
    if (next->schedule_fingerprint() == planner->schedule_fingerprint()) continue;
    absl::StatusOr<MixturePlanner::Cursor> resumed = next->Resume(seq.states[at]);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    const Sequence rest = Walk(*next, *resumed, 600);
    const std::string what = absl::StrCat("case ", t, " other schedule at ", at);
    // Passes continue: each dataset's draws pick up at its count, in the same pass.
    std::vector<MixtureDraw> joined(seq.draws.begin(), seq.draws.begin() + at);
    joined.insert(joined.end(), rest.draws.begin(), rest.draws.end());
    ExpectPassRule(spec, joined, std::vector<uint64_t>(spec.datasets.size(), 0), what);
    // The per-dataset order is the pass permutations' order whatever the weights: the
    // draws of each dataset after the resume equal the uninterrupted run's next draws.
    const Sequence full = Walk(*planner, planner->Start(), at + 600 + 2000);
    for (size_t i = 0; i < spec.datasets.size(); ++i) {
      std::vector<MixtureDraw> a, b;
      for (const MixtureDraw& d : joined) {
        if (d.dataset == static_cast<int>(i)) a.push_back(d);
      }
      for (const MixtureDraw& d : full.draws) {
        if (d.dataset == static_cast<int>(i)) b.push_back(d);
      }
      const size_t common = std::min(a.size(), b.size());
      ASSERT_TRUE(std::equal(a.begin(), a.begin() + common, b.begin())) << what << " ds " << i;
    }
    // The bound from the resume point against the new schedule, and the reference.
    const Reference ref(other);
    ExpectPrefixBound(ref, rest.draws, at, what);
    const std::vector<int> expected =
        ReferenceChoices(ref, at, 600, std::vector<i128>(spec.datasets.size(), 0));
    for (size_t j = 0; j < expected.size(); ++j) {
      ASSERT_EQ(rest.draws[j].dataset, expected[j]) << what << " +" << j;
    }
  }
}

TEST(MixturePlanTest, ElasticResumeKeepsBoundFromStartAndPasses) {
  Rand r(31337);
  for (int t = 0; t < kCases; ++t) {
    const MixtureSpec spec = RandomSpec(r);
    absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(spec);
    ASSERT_TRUE(planner.ok());
    const int64_t g = spec.segments[0].global_batch;
    const int64_t steps = r.Int(1, 40);
    const int64_t at = steps * g;  // a checkpoint at a step boundary
    const Sequence before = Walk(*planner, planner->Start(), at);
    MixturePlanner::Cursor c = planner->Start();
    planner->Advance(&c, at);
    const MixtureSpec elastic = WithElasticChange(spec, *planner, at, r.Int(1, 8) * r.Int(1, 8));
    absl::StatusOr<MixturePlanner> next = MixturePlanner::Create(elastic);
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_EQ(next->schedule_fingerprint(), planner->schedule_fingerprint());
    absl::StatusOr<MixturePlanner::Cursor> resumed = next->Resume(c.state());
    ASSERT_TRUE(resumed.ok());
    const Sequence rest = Walk(*next, *resumed, 800);
    std::vector<MixtureDraw> joined = before.draws;
    joined.insert(joined.end(), rest.draws.begin(), rest.draws.end());
    const std::string what = absl::StrCat("case ", t, " elastic at ", at);
    const Reference ref(elastic);
    ExpectPrefixBound(ref, joined, 0, what);
    ExpectPassRule(spec, joined, std::vector<uint64_t>(spec.datasets.size(), 0), what);
    // The same as the reference's continuation with the carried lags.
    std::vector<i128> lags;
    const i128 m_scale = spec.datasets.size() >= 2 ? 2 * spec.datasets.size() - 2 : 1;
    for (const MixtureDatasetState& d : c.state().datasets) lags.push_back(d.lag / m_scale);
    const std::vector<int> expected = ReferenceChoices(ref, at, 800, lags);
    for (size_t j = 0; j < expected.size(); ++j) {
      ASSERT_EQ(rest.draws[j].dataset, expected[j]) << what << " +" << j;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Refusals.

MixtureSpec Good() {
  MixtureSpec spec;
  spec.datasets = {{"a", 10}, {"b", 20}};
  spec.schedule = {{0, {{"a", 0.7}, {"b", 0.3}}}};
  spec.segments = {{0, 0, 8}};
  spec.samples_per_epoch = 30;
  return spec;
}

void ExpectRefused(const MixtureSpec& spec, const std::string& words) {
  absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(spec);
  ASSERT_FALSE(planner.ok()) << "accepted; expected a refusal with '" << words << "'";
  EXPECT_EQ(planner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(planner.status().message().find(words), std::string::npos) << planner.status();
}

TEST(MixturePlanTest, RefusesBadInput) {
  ASSERT_TRUE(MixturePlanner::Create(Good()).ok());
  MixtureSpec s = Good();
  s.datasets.clear();
  s.schedule = {{0, {}}};
  ExpectRefused(s, "names no dataset");
  s = Good();
  s.datasets.clear();
  s.schedule[0].weights.clear();
  for (int i = 0; i < 1000; ++i) {
    s.datasets.push_back({absl::StrCat("d", i), 1});
    s.schedule[0].weights.emplace_back(absl::StrCat("d", i), 1.0);
  }
  ExpectRefused(s, "at most 256");
  s = Good();
  s.schedule[0].weights[0].second = -1;
  ExpectRefused(s, "weight of 'a' is -1");
  s.schedule[0].weights[0].second = std::nan("");
  ExpectRefused(s, "weight of 'a' is nan");
  s.schedule[0].weights[0].second = HUGE_VAL;
  ExpectRefused(s, "weight of 'a' is inf");
  s = Good();
  s.schedule = {{0, {{"a", 1}, {"b", 0}}}, {10, {{"a", 0}, {"b", 0}}}};
  ExpectRefused(s, "sum to 0");
  s.schedule = {{0, {{"a", 1}, {"b", 0}}}, {10, {{"a", 1}, {"b", 0}}}};
  ExpectRefused(s, "'b' has weight 0 at every point");
  s.schedule = {{0, {{"a", 1}, {"b", 0}}}, {10, {{"a", 0}, {"b", 1}}}};
  EXPECT_TRUE(MixturePlanner::Create(s).ok()) << "0 at some points is allowed";
  s.schedule = {{10, {{"a", 1}, {"b", 1}}}, {10, {{"a", 1}, {"b", 1}}}};
  ExpectRefused(s, "does not increase");
  s.schedule = {{10, {{"a", 1}, {"b", 1}}}, {5, {{"a", 1}, {"b", 1}}}};
  ExpectRefused(s, "does not increase");
  s.schedule = {{0, {{"a", 1}, {"b", 1}}}, {5, {{"a", 1}, {"c", 1}}}};
  ExpectRefused(s, "'c', which is not in the mixture");
  s.schedule = {{0, {{"a", 1}}}};
  ExpectRefused(s, "does not name 'b'");
  s.schedule = {{0, {{"a", 1}, {"b", 1}, {"a", 2}}}};
  ExpectRefused(s, "'a' twice");
  s = Good();
  s.schedule.clear();
  ExpectRefused(s, "no point");
  s = Good();
  s.datasets[1].samples = 0;
  ExpectRefused(s, "'b' has no usable sample");
  s = Good();
  s.samples_per_epoch = 0;
  ExpectRefused(s, "samples_per_epoch 0");
  s.samples_per_epoch = uint64_t{1} << 63;
  ExpectRefused(s, "samples_per_epoch 9223372036854775808");
  s = Good();
  s.segments = {{0, 0, 8}, {16, 1, 4}};  // positions 8..15 are step 1 already
  ExpectRefused(s, "does not follow");
  s.segments = {{0, 0, 0}};
  ExpectRefused(s, "global batch 0");
  s.segments = {{4, 0, 8}};
  ExpectRefused(s, "position 0");
}

TEST(MixturePlanTest, EpochStartIsEpochTimesSamplesPerEpochBelowTheLimit) {
  absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(Good());
  ASSERT_TRUE(planner.ok());
  EXPECT_EQ(*planner->EpochStart(0), 0);
  EXPECT_EQ(*planner->EpochStart(3), 90);
  EXPECT_EQ(planner->EpochStart(-1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(planner->EpochStart(int64_t{1} << 58).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(MixturePlanTest, ResumeRefusesStatesOfOtherMixtures) {
  absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(Good());
  ASSERT_TRUE(planner.ok());
  MixturePlanner::Cursor c = planner->Start();
  planner->Advance(&c, 17);
  MixtureState bad = c.state();
  bad.datasets.pop_back();
  EXPECT_FALSE(planner->Resume(bad).ok());
  bad = c.state();
  bad.datasets[0].draws += 1;
  EXPECT_FALSE(planner->Resume(bad).ok());
  bad = c.state();
  bad.position = -1;
  EXPECT_FALSE(planner->Resume(bad).ok());
}

// Equal weights tie at every round: the seeded tie-break makes the order of each round
// differ between rounds and between seeds, instead of a fixed a,b,c,a,b,c.
TEST(MixturePlanTest, TiesAreBrokenBySeedNotByAFixedPattern) {
  std::vector<std::vector<int>> orders;
  for (uint64_t seed : {1, 2}) {
    MixtureSpec spec = Good();
    spec.datasets.push_back({"c", 7});
    spec.schedule = {{0, {{"a", 1}, {"b", 1}, {"c", 1}}}};
    spec.seed = seed;
    absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(spec);
    ASSERT_TRUE(planner.ok());
    const Sequence seq = Walk(*planner, planner->Start(), 300);
    std::vector<int> order;
    for (const MixtureDraw& d : seq.draws) order.push_back(d.dataset);
    bool periodic = true;
    for (size_t j = 3; j < order.size(); ++j) periodic = periodic && order[j] == order[j - 3];
    EXPECT_FALSE(periodic) << "seed " << seed;
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);
}

// Constant weights 0.5/0.3/0.2 over 10^5 positions: within 1 - 1/4 of w * n at every
// prefix, and exactly w * n where that is an integer.
TEST(MixturePlanTest, ConstantWeightsHoldInEveryPrefix) {
  MixtureSpec spec = Good();
  spec.datasets.push_back({"c", 5});
  spec.schedule = {{0, {{"a", 0.5}, {"b", 0.3}, {"c", 0.2}}}};
  absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(spec);
  ASSERT_TRUE(planner.ok());
  MixturePlanner::Cursor c = planner->Start();
  std::vector<int64_t> count(3, 0);
  const double w[3] = {0.5, 0.3, 0.2};
  for (int64_t n = 1; n <= 100000; ++n) {
    ++count[planner->Next(&c).dataset];
    for (int i = 0; i < 3; ++i) ASSERT_LE(std::abs(count[i] - w[i] * n), 0.75 + 1e-6) << n;
  }
  EXPECT_EQ(count[0], 50000);
  EXPECT_EQ(count[1], 30000);
  EXPECT_EQ(count[2], 20000);
}

}  // namespace
}  // namespace shardcast

// Proofs of the epoch planner: worked examples that pin the split-shard semantics (the
// seed's loader), property tests over random datasets against a straightforward
// materializing reference planner, resume, refusals and the fingerprint.
#include "common/plan/epoch_plan.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/plan/epoch_plan_internal.h"
#include "gtest/gtest.h"

namespace shardcast {
namespace {

using Batch = std::vector<std::pair<int32_t, int32_t>>;  // (shard, index) per entry
using RankPlan = std::vector<Batch>;

// ---------------------------------------------------------------------------------------
// Helpers.

std::vector<PlannedBatch> Drain(RankBatchIterator* it) {
  std::vector<PlannedBatch> out;
  PlannedBatch batch;
  while (it->Next(&batch)) out.push_back(batch);
  return out;
}

RankPlan Refs(const std::vector<PlannedBatch>& batches) {
  RankPlan out;
  for (const PlannedBatch& b : batches) {
    Batch refs;
    for (const SampleRef& s : b.samples) refs.emplace_back(s.shard, s.index);
    out.push_back(refs);
  }
  return out;
}

RankPlan PlanOfRank(const EpochPlan& plan, int32_t rank, int64_t start = 0) {
  auto it = plan.Iterate(rank, start);
  return Refs(Drain(it.get()));
}

// Samples first..last (inclusive) of `shard`.
Batch Samples(int32_t shard, int32_t first, int32_t last) {
  Batch out;
  for (int32_t i = first; i <= last; ++i) out.emplace_back(shard, i);
  return out;
}
Batch Cat(Batch a, const Batch& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string Show(const Batch& batch) {
  return absl::StrJoin(batch, ",", [](std::string* out, const std::pair<int32_t, int32_t>& r) {
    absl::StrAppend(out, r.first, ":", r.second);
  });
}
std::string Show(const RankPlan& plan) {
  return absl::StrJoin(plan, "\n",
                       [](std::string* out, const Batch& b) { absl::StrAppend(out, Show(b)); });
}

std::shared_ptr<const EpochPlan> MustCreate(const std::vector<uint32_t>& sizes,
                                            const PlanConfig& config, int64_t epoch) {
  auto plan = EpochPlan::Create(sizes, config, epoch);
  EXPECT_TRUE(plan.ok()) << plan.status() << " for " << PlanConfigString(config);
  return plan.ok() ? *plan : nullptr;
}

// ---------------------------------------------------------------------------------------
// The reference planner: materializes everything, written as the semantics read.

std::vector<Batch> ReferenceWorkerBatches(const std::vector<uint32_t>& sizes,
                                          const std::vector<int32_t>& shards, const PlanConfig& c,
                                          int64_t epoch, int32_t rank, int32_t worker) {
  Batch stream;
  for (int32_t shard : shards) {
    for (uint32_t i = 0; i < sizes[shard]; ++i) stream.emplace_back(shard, i);
  }
  if (c.shuffle_buffer > 1) {
    plan_internal::ShuffleBuffer buffer(
        c.shuffle_buffer, plan_internal::ShuffleBufferSeed(c.seed, epoch, rank, worker));
    Batch shuffled;
    for (size_t i = 0; i < stream.size(); ++i) {
      buffer.Push(i);
      if (buffer.full()) shuffled.push_back(stream[buffer.Pick()]);
    }
    while (!buffer.empty()) shuffled.push_back(stream[buffer.Pick()]);
    stream = shuffled;
  }
  std::vector<Batch> batches;
  for (size_t i = 0; i + c.batch_size <= stream.size(); i += c.batch_size) {
    batches.emplace_back(stream.begin() + i, stream.begin() + i + c.batch_size);
  }
  return batches;  // the partial tail is dropped
}

RankPlan ReferenceShardSplit(const std::vector<uint32_t>& sizes, const PlanConfig& c, int64_t epoch,
                             int32_t rank, int64_t n) {
  const std::vector<int32_t> order = plan_internal::EpochShardOrder(
      static_cast<int32_t>(sizes.size()), c.shuffle_shards, c.seed, epoch);
  std::vector<int32_t> mine;
  for (size_t p = rank; p < order.size(); p += c.world_size) mine.push_back(order[p]);
  std::vector<std::vector<Batch>> workers;
  for (int32_t w = 0; w < c.workers; ++w) {
    std::vector<int32_t> shards;
    for (size_t p = w; p < mine.size(); p += c.workers) shards.push_back(mine[p]);
    workers.push_back(ReferenceWorkerBatches(sizes, shards, c, epoch, rank, w));
  }
  RankPlan pass;  // DataLoader round-robin, skipping workers that ran dry
  for (size_t round = 0;; ++round) {
    bool any = false;
    for (const auto& w : workers) {
      if (round < w.size()) {
        pass.push_back(w[round]);
        any = true;
      }
    }
    if (!any) break;
  }
  RankPlan out;  // repeat + slice
  while (!pass.empty() && static_cast<int64_t>(out.size()) < n) {
    out.push_back(pass[out.size() % pass.size()]);
  }
  return out;
}

std::vector<std::pair<int32_t, int32_t>> ReferencePermutation(const std::vector<uint32_t>& sizes,
                                                              const PlanConfig& c, int64_t epoch) {
  const std::vector<int32_t> order =
      plan_internal::EpochShardOrder(static_cast<int32_t>(sizes.size()), true, c.seed, epoch);
  const size_t block = c.block_size > 0 ? c.block_size : sizes.size();
  std::vector<std::pair<int32_t, int32_t>> out;
  for (size_t first = 0, b = 0; first < order.size(); first += block, ++b) {
    Batch samples;
    for (size_t p = first; p < std::min(first + block, order.size()); ++p) {
      for (uint32_t i = 0; i < sizes[order[p]]; ++i) samples.emplace_back(order[p], i);
    }
    plan_internal::FeistelPermutation perm(samples.size(),
                                           plan_internal::BlockPermutationKey(c.seed, epoch, b));
    for (size_t o = 0; o < samples.size(); ++o) out.push_back(samples[perm(o)]);
  }
  return out;
}

RankPlan ReferenceSampleSplit(const std::vector<uint32_t>& sizes, const PlanConfig& c,
                              int64_t epoch, int32_t rank, int64_t n) {
  const auto perm = ReferencePermutation(sizes, c, epoch);
  RankPlan out;
  for (int64_t j = 0; j < n; ++j) {
    Batch batch;
    for (int64_t i = 0; i < c.batch_size; ++i) {
      const size_t pos = (j * c.world_size + rank) * c.batch_size + i;
      batch.push_back(pos < perm.size() ? perm[pos] : std::make_pair(-1, -1));
    }
    out.push_back(batch);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Worked examples: split shard, unshuffled, equals the seed's loader batch for batch.

TEST(EpochPlanShardSplit, SeedFiveShardsThreeRanksRankTwoRepeats) {
  // The seed's case: 5 shards, 3 ranks: rank 0 reads shards 0, 3; rank 1 reads 1, 4;
  // rank 2 reads shard 2 alone, runs dry after 2 batches and repeats it.
  const std::vector<uint32_t> sizes = {20, 20, 20, 20, 20};
  PlanConfig c;
  c.world_size = 3;
  c.batch_size = 7;
  auto plan = MustCreate(sizes, c, 0);
  ASSERT_NE(plan, nullptr);
  ASSERT_EQ(plan->batches_per_rank(), 4);  // 100 // 21
  EXPECT_EQ(plan->ShardsOfRank(0), (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(plan->ShardsOfRank(1), (std::vector<int32_t>{1, 4}));
  EXPECT_EQ(plan->ShardsOfRank(2), (std::vector<int32_t>{2}));
  EXPECT_EQ(Show(PlanOfRank(*plan, 0)),
            Show(RankPlan{Samples(0, 0, 6), Samples(0, 7, 13),
                          Cat(Samples(0, 14, 19), Samples(3, 0, 0)), Samples(3, 1, 7)}));
  EXPECT_EQ(Show(PlanOfRank(*plan, 1)),
            Show(RankPlan{Samples(1, 0, 6), Samples(1, 7, 13),
                          Cat(Samples(1, 14, 19), Samples(4, 0, 0)), Samples(4, 1, 7)}));
  // 20 samples: 2 full batches, 6 dropped, then the same pass again.
  EXPECT_EQ(Show(PlanOfRank(*plan, 2)), Show(RankPlan{Samples(2, 0, 6), Samples(2, 7, 13),
                                                      Samples(2, 0, 6), Samples(2, 7, 13)}));
}

TEST(EpochPlanShardSplit, TwelveShardsThreeRanksTwoWorkersAlternate) {
  // Rank 0 reads shards 0, 3, 6, 9: worker 0 reads 0, 6 and worker 1 reads 3, 9; the
  // batches alternate between the workers (0, 3, 0, 3, ...), each worker's stream
  // running on into its next shard, its partial tail dropped.
  const std::vector<uint32_t> sizes(12, 20);
  PlanConfig c;
  c.world_size = 3;
  c.batch_size = 7;
  c.workers = 2;
  auto plan = MustCreate(sizes, c, 0);
  ASSERT_NE(plan, nullptr);
  ASSERT_EQ(plan->batches_per_rank(), 11);  // 240 // 21
  EXPECT_EQ(plan->ShardsOfRank(0), (std::vector<int32_t>{0, 3, 6, 9}));
  // Each worker: 40 samples = 5 batches (5 dropped); a pass is 10 batches; batch 10 is
  // the pass again from its start.
  const RankPlan expected = {Samples(0, 0, 6),
                             Samples(3, 0, 6),  //
                             Samples(0, 7, 13),
                             Samples(3, 7, 13),  //
                             Cat(Samples(0, 14, 19), Samples(6, 0, 0)),
                             Cat(Samples(3, 14, 19), Samples(9, 0, 0)),  //
                             Samples(6, 1, 7),
                             Samples(9, 1, 7),  //
                             Samples(6, 8, 14),
                             Samples(9, 8, 14),  //
                             Samples(0, 0, 6)};
  EXPECT_EQ(Show(PlanOfRank(*plan, 0)), Show(expected));
  const RankPlan rank2 = PlanOfRank(*plan, 2);  // shards 2, 5, 8, 11
  ASSERT_EQ(rank2.size(), 11u);
  EXPECT_EQ(Show(rank2[0]), Show(Samples(2, 0, 6)));
  EXPECT_EQ(Show(rank2[1]), Show(Samples(5, 0, 6)));
  EXPECT_EQ(Show(rank2[9]), Show(Samples(11, 8, 14)));
}

TEST(EpochPlanShardSplit, WorkerThatRunsDryIsSkippedRoundRobin) {
  // W=1, K=3, B=2. Worker 0 reads shards 0, 3 (6 + 0 samples: 3 batches), worker 1
  // reads 1, 4 (2 + 0: 1 batch), worker 2 reads 2, 5 (6 + 1: 3 batches, 1 dropped).
  // After worker 1's only batch, the round-robin goes on over workers 0 and 2.
  const std::vector<uint32_t> sizes = {6, 2, 6, 0, 0, 1};
  PlanConfig c;
  c.batch_size = 2;
  c.workers = 3;
  auto plan = MustCreate(sizes, c, 0);
  ASSERT_NE(plan, nullptr);
  ASSERT_EQ(plan->batches_per_rank(), 7);  // 15 // 2
  EXPECT_EQ(Show(PlanOfRank(*plan, 0)),
            Show(RankPlan{Samples(0, 0, 1), Samples(1, 0, 1), Samples(2, 0, 1), Samples(0, 2, 3),
                          Samples(2, 2, 3), Samples(0, 4, 5), Samples(2, 4, 5)}));
}

TEST(EpochPlanShardSplit, UnevenWorkersRepeatThePassWithSkips) {
  // W=2, K=2, B=3: rank 0 reads shards 0, 2, 4, 6 -> worker 0: 0, 4 (3 + 4 = 7 samples,
  // 2 batches), worker 1: 2, 6 (3 + 0: 1 batch). Pass: w0, w1, w0; then repeat.
  const std::vector<uint32_t> sizes = {3, 9, 3, 9, 4, 9, 0, 9};
  PlanConfig c;
  c.world_size = 2;
  c.batch_size = 3;
  c.workers = 2;
  auto plan = MustCreate(sizes, c, 0);
  ASSERT_NE(plan, nullptr);
  ASSERT_EQ(plan->batches_per_rank(), 7);  // 46 // 6
  EXPECT_EQ(Show(PlanOfRank(*plan, 0)),
            Show(RankPlan{Samples(0, 0, 2), Samples(2, 0, 2), Samples(4, 0, 2),  //
                          Samples(0, 0, 2), Samples(2, 0, 2), Samples(4, 0, 2),  //
                          Samples(0, 0, 2)}));
  // Resuming in the middle of a repeated pass gives the same suffix.
  EXPECT_EQ(Show(PlanOfRank(*plan, 0, 4)),
            Show(RankPlan{Samples(2, 0, 2), Samples(4, 0, 2), Samples(0, 0, 2)}));
}

TEST(EpochPlanShardSplit, ShuffleBufferPermutesWithinWorkerOnly) {
  const std::vector<uint32_t> sizes = {50, 50, 50, 50};
  PlanConfig c;
  c.world_size = 2;
  c.batch_size = 10;
  c.shuffle_buffer = 16;
  c.seed = 7;
  auto plan = MustCreate(sizes, c, 3);
  ASSERT_NE(plan, nullptr);
  const RankPlan rank0 = PlanOfRank(*plan, 0);  // shards 0, 2: 100 samples, n = 10
  ASSERT_EQ(rank0.size(), 10u);
  std::multiset<std::pair<int32_t, int32_t>> seen;
  for (const Batch& b : rank0) seen.insert(b.begin(), b.end());
  EXPECT_EQ(seen.size(), 100u);
  using Ref = std::pair<int32_t, int32_t>;
  EXPECT_EQ(std::set<Ref>(seen.begin(), seen.end()).size(), 100u);
  for (const auto& [shard, index] : seen) EXPECT_TRUE(shard == 0 || shard == 2);
  // Shuffled, not the natural order; but a buffer of 16 only moves samples locally: the
  // first batch comes from the first 10 + 16 stream positions (all of shard 0).
  RankPlan natural;
  for (int i = 0; i < 5; ++i) natural.push_back(Samples(0, i * 10, i * 10 + 9));
  for (int i = 0; i < 5; ++i) natural.push_back(Samples(2, i * 10, i * 10 + 9));
  EXPECT_NE(Show(rank0), Show(natural));
  for (const auto& [shard, index] : rank0[0]) {
    EXPECT_EQ(shard, 0);
    EXPECT_LT(index, 26);
  }
}

TEST(EpochPlanShardSplit, ShuffledShardOrderChangesPerEpochAndIsSharedByRanks) {
  const std::vector<uint32_t> sizes(40, 10);
  PlanConfig c;
  c.world_size = 4;
  c.batch_size = 5;
  c.shuffle_shards = true;
  c.seed = 11;
  auto e0 = MustCreate(sizes, c, 0);
  auto e1 = MustCreate(sizes, c, 1);
  ASSERT_NE(e0, nullptr);
  ASSERT_NE(e1, nullptr);
  std::vector<int32_t> all0, all1;
  for (int32_t r = 0; r < 4; ++r) {
    auto s0 = e0->ShardsOfRank(r), s1 = e1->ShardsOfRank(r);
    all0.insert(all0.end(), s0.begin(), s0.end());
    all1.insert(all1.end(), s1.begin(), s1.end());
    EXPECT_EQ(s0.size(), 10u);
  }
  EXPECT_NE(all0, all1);
  std::sort(all0.begin(), all0.end());
  std::sort(all1.begin(), all1.end());
  std::vector<int32_t> every(40);
  std::iota(every.begin(), every.end(), 0);
  EXPECT_EQ(all0, every);  // the ranks partition the shards in every epoch
  EXPECT_EQ(all1, every);
}

// ---------------------------------------------------------------------------------------
// Split sample.

TEST(EpochPlanSampleSplit, DealsPositionsRoundRobinAndPadsExactlyOnce) {
  const std::vector<uint32_t> sizes = {5, 0, 7, 3};  // N = 15
  PlanConfig c;
  c.split = Split::kSample;
  c.remainder = Remainder::kPad;
  c.world_size = 2;
  c.batch_size = 4;
  c.seed = 3;
  auto plan = MustCreate(sizes, c, 0);
  ASSERT_NE(plan, nullptr);
  ASSERT_EQ(plan->batches_per_rank(), 2);  // ceil(15 / 8)
  const auto perm = ReferencePermutation(sizes, c, 0);
  ASSERT_EQ(perm.size(), 15u);
  const RankPlan r0 = PlanOfRank(*plan, 0), r1 = PlanOfRank(*plan, 1);
  // Batch j of rank r holds positions (j*W + r)*B .. +B.
  EXPECT_EQ(Show(r0[0]), Show(Batch(perm.begin(), perm.begin() + 4)));
  EXPECT_EQ(Show(r1[0]), Show(Batch(perm.begin() + 4, perm.begin() + 8)));
  EXPECT_EQ(Show(r0[1]), Show(Batch(perm.begin() + 8, perm.begin() + 12)));
  const Batch padded = Cat(Batch(perm.begin() + 12, perm.end()), Batch{{-1, -1}});
  EXPECT_EQ(Show(r1[1]), Show(padded));
  std::set<std::pair<int32_t, int32_t>> all(perm.begin(), perm.end());
  EXPECT_EQ(all.size(), 15u);
  auto it = plan->Iterate(1, 1);
  PlannedBatch last;
  ASSERT_TRUE(it->Next(&last));
  EXPECT_FALSE(last.samples[3].valid());
  EXPECT_EQ(last.samples[3].augment_seed, 0u);
  EXPECT_TRUE(last.samples[2].valid());
}

// Elastic resume: k batches per rank on (W, B), then the rest of the epoch dealt from
// G = k*W*B on (W', B'): together no sample twice, and with pad every sample once.
TEST(EpochPlanSampleSplit, ElasticResumeFromAnOffsetServesEachSampleAtMostOnce) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<uint32_t> sizes(1 + rng() % 6);
    uint64_t total = 0;
    for (uint32_t& size : sizes) total += size = 1 + rng() % 20;
    PlanConfig before;
    before.split = Split::kSample;
    before.remainder = rng() % 2 ? Remainder::kPad : Remainder::kDrop;
    before.world_size = 1 + rng() % 4;
    before.batch_size = 1 + rng() % 5;
    before.block_size = rng() % 3;
    before.seed = rng();
    const uint64_t per_step = uint64_t{1} * before.world_size * before.batch_size;
    if (total < per_step) continue;
    auto plan = MustCreate(sizes, before, /*epoch=*/round);
    ASSERT_NE(plan, nullptr);
    // Batches before the stop, never past the positions that exist.
    const int64_t k = rng() % (total / per_step + 1);
    const int64_t offset = static_cast<int64_t>(k * per_step);
    std::multiset<std::pair<int32_t, int32_t>> served;
    for (int32_t r = 0; r < before.world_size; ++r) {
      const RankPlan batches = PlanOfRank(*plan, r);
      for (int64_t j = 0; j < k; ++j) served.insert(batches[j].begin(), batches[j].end());
    }
    PlanConfig after = before;
    after.world_size = 1 + rng() % 4;
    after.batch_size = 1 + rng() % 5;
    // The job must serve its later, whole epochs too (n >= 1), as at registration.
    if (after.remainder == Remainder::kDrop &&
        total < uint64_t{1} * after.world_size * after.batch_size) {
      continue;
    }
    auto resumed = MustCreate(sizes, after, round);  // same permutation: W, B not in it
    ASSERT_NE(resumed, nullptr);
    absl::StatusOr<int64_t> n = BatchesFromOffset(static_cast<int64_t>(total), after, offset);
    ASSERT_TRUE(n.ok()) << n.status();
    for (int32_t r = 0; r < after.world_size; ++r) {
      auto it = resumed->IterateFrom(r, 0, offset);
      ASSERT_TRUE(it.ok()) << it.status();
      const RankPlan batches = Refs(Drain(it->get()));
      ASSERT_EQ(static_cast<int64_t>(batches.size()), *n) << "equal counts per rank";
      for (const Batch& b : batches) served.insert(b.begin(), b.end());
    }
    served.erase({-1, -1});  // padding
    const std::set<std::pair<int32_t, int32_t>> unique(served.begin(), served.end());
    ASSERT_EQ(unique.size(), served.size()) << "a sample twice, round " << round;
    if (after.remainder == Remainder::kPad) {
      ASSERT_EQ(served.size(), total) << round;
    }
  }
}

TEST(EpochPlanSampleSplit, ElasticResumeIsRefusedForSplitShardAndOutOfRange) {
  PlanConfig c;
  c.split = Split::kShard;
  c.world_size = 2;
  c.batch_size = 2;
  auto plan = MustCreate({8, 8, 8, 8}, c, 0);
  ASSERT_NE(plan, nullptr);
  auto it = plan->IterateFrom(0, 0, 4);
  EXPECT_EQ(it.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(it.status().message()).find("needs split sample"), std::string::npos);
  EXPECT_TRUE(plan->IterateFrom(0, 0, 0).ok());  // an epoch boundary is no offset
  c.split = Split::kSample;
  EXPECT_EQ(BatchesFromOffset(32, c, 33).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*BatchesFromOffset(32, c, 32), 0);
}

TEST(EpochPlanSampleSplit, BlocksKeepReadsLocal) {
  // Blocks of 3 shards of the epoch's order: each block's samples occupy one contiguous
  // run of positions, so a reader touches at most 3 shards per run.
  std::vector<uint32_t> sizes;
  for (int i = 0; i < 30; ++i) sizes.push_back(10 + (i * 7) % 13);
  PlanConfig c;
  c.split = Split::kSample;
  c.remainder = Remainder::kPad;
  c.block_size = 3;
  c.seed = 5;
  auto plan = MustCreate(sizes, c, 2);
  ASSERT_NE(plan, nullptr);
  const RankPlan seq = PlanOfRank(*plan, 0);  // W = B = 1: the permutation itself
  const std::vector<int32_t> order = plan_internal::EpochShardOrder(30, true, 5, 2);
  size_t pos = 0;
  for (size_t first = 0; first < 30; first += 3) {
    std::set<int32_t> block(order.begin() + first, order.begin() + first + 3);
    size_t count = sizes[order[first]] + sizes[order[first + 1]] + sizes[order[first + 2]];
    std::set<std::pair<int32_t, int32_t>> got;
    for (size_t i = 0; i < count; ++i, ++pos) {
      ASSERT_EQ(seq[pos].size(), 1u);
      EXPECT_TRUE(block.count(seq[pos][0].first)) << "position " << pos;
      got.insert(seq[pos][0]);
    }
    EXPECT_EQ(got.size(), count);
  }
  EXPECT_EQ(pos, seq.size());
}

TEST(EpochPlanSampleSplit, DroppedRemainderChangesPerEpoch) {
  const std::vector<uint32_t> sizes = {40, 40, 41};  // N = 121, B*W = 10: 1 dropped
  PlanConfig c;
  c.split = Split::kSample;
  c.world_size = 2;
  c.batch_size = 5;
  std::set<std::pair<int32_t, int32_t>> dropped;
  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    auto plan = MustCreate(sizes, c, epoch);
    ASSERT_NE(plan, nullptr);
    std::set<std::pair<int32_t, int32_t>> served;
    for (int32_t r = 0; r < 2; ++r) {
      for (const Batch& b : PlanOfRank(*plan, r)) served.insert(b.begin(), b.end());
    }
    ASSERT_EQ(served.size(), 120u);
    for (int32_t s = 0; s < 3; ++s) {
      for (int32_t i = 0; i < static_cast<int32_t>(sizes[s]); ++i) {
        if (!served.count({s, i})) dropped.insert({s, i});
      }
    }
  }
  EXPECT_GT(dropped.size(), 1u);  // not always the same sample
}

TEST(EpochPlanSampleSplit, FeistelPermutationIsABijection) {
  for (uint64_t size : {0, 1, 2, 3, 4, 5, 17, 64, 65, 1000, 4097}) {
    plan_internal::FeistelPermutation perm(size, 42 + size);
    std::vector<bool> hit(size, false);
    for (uint64_t x = 0; x < size; ++x) {
      const uint64_t y = perm(x);
      ASSERT_LT(y, size);
      ASSERT_FALSE(hit[y]) << "size " << size << " value " << y << " twice";
      hit[y] = true;
    }
  }
  // Not the identity, and keyed.
  plan_internal::FeistelPermutation a(1000, 1), b(1000, 2);
  int fixed = 0, same = 0;
  for (uint64_t x = 0; x < 1000; ++x) {
    fixed += a(x) == x;
    same += a(x) == b(x);
  }
  EXPECT_LT(fixed, 20);
  EXPECT_LT(same, 20);
}

TEST(EpochPlanSampleSplit, SlotLocatorFindsTheShardHoldingAPosition) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int slots = 1 + rng() % 300;
    std::vector<uint64_t> cum = {0};
    for (int i = 0; i < slots; ++i) {
      const uint64_t size = rng() % 4 == 0 ? 0 : rng() % (1 + rng() % 2000);
      cum.push_back(cum.back() + size);
    }
    if (cum.back() == 0) continue;
    plan_internal::SlotLocator locator(&cum);
    for (uint64_t pos = 0; pos < cum.back(); pos += 1 + rng() % 7) {
      const size_t want = std::upper_bound(cum.begin(), cum.end(), pos) - cum.begin() - 1;
      ASSERT_EQ(locator.Locate(pos), want) << "trial " << trial << " pos " << pos;
      ASSERT_LT(cum[want], cum[want + 1]);  // a non-empty shard
    }
  }
}

TEST(EpochPlanSampleSplit, AugmentSeedsAreDistinctAndKeyed) {
  std::set<uint64_t> seeds;
  for (int32_t shard = 0; shard < 50; ++shard) {
    for (int32_t index = 0; index < 200; ++index) seeds.insert(AugmentSeed(1, 2, shard, index));
  }
  EXPECT_EQ(seeds.size(), 10000u);
  EXPECT_NE(AugmentSeed(1, 2, 3, 4), AugmentSeed(1, 3, 3, 4));
  EXPECT_NE(AugmentSeed(1, 2, 3, 4), AugmentSeed(2, 2, 3, 4));
  EXPECT_NE(AugmentSeed(1, 2, 3, 4), AugmentSeed(1, 2, 4, 3));
}

// ---------------------------------------------------------------------------------------
// Refusals: each says why and what to change.

// A split or remainder that is no enumerator (a cast from outside the enum) is refused
// by name, not planned as whichever policy an if/else would have fallen into.
TEST(EpochPlanRefusals, ValuesOutsideTheEnumsAreRefused) {
  PlanConfig c;
  c.split = Split::kSample;
  c.remainder = static_cast<Remainder>(7);
  absl::StatusOr<int64_t> n = BatchesPerRank({10, 10}, c);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(), "unknown remainder 7");
  EXPECT_FALSE(BatchesFromOffset(20, c, 0).ok());

  c = PlanConfig{};
  c.split = static_cast<Split>(7);
  absl::StatusOr<std::shared_ptr<const EpochPlan>> plan = EpochPlan::Create({10, 10}, c, 0);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(), "unknown split 7");
}

TEST(EpochPlanRefusals, SayWhyAndWhatToChange) {
  PlanConfig c;
  c.world_size = 0;
  auto s = BatchesPerRank({10}, c);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  c = PlanConfig{};
  c.batch_size = 0;
  EXPECT_EQ(BatchesPerRank({10}, c).status().code(), absl::StatusCode::kInvalidArgument);
  c = PlanConfig{};
  c.workers = 0;
  EXPECT_EQ(BatchesPerRank({10}, c).status().code(), absl::StatusCode::kInvalidArgument);

  c = PlanConfig{};
  c.world_size = 4;
  c.batch_size = 8;
  s = BatchesPerRank({10, 10, 10}, c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("30 samples, fewer than batch size 8 x world size 4"),
            std::string::npos)
      << s.status();
  EXPECT_NE(s.status().message().find("lower the batch size"), std::string::npos);

  c = PlanConfig{};
  c.world_size = 4;
  s = BatchesPerRank({10, 10, 10}, c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("3 shards for world size 4"), std::string::npos);
  EXPECT_NE(s.status().message().find("use split sample"), std::string::npos);

  c = PlanConfig{};
  c.world_size = 2;
  c.workers = 3;
  s = BatchesPerRank({10, 10, 10, 10}, c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("use fewer workers (at most 2)"), std::string::npos)
      << s.status();

  c = PlanConfig{};  // rank 1 has shards 1, 3 with 2 + 2 samples: no batch of 5
  c.world_size = 2;
  c.batch_size = 5;
  s = BatchesPerRank({50, 2, 50, 2}, c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("rank 1"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("use split sample"), std::string::npos);
  c.split = Split::kSample;  // the remedy it names works
  EXPECT_EQ(*BatchesPerRank({50, 2, 50, 2}, c), 10);

  c = PlanConfig{};  // shuffled: some epoch could give a rank the two small shards
  c.world_size = 2;
  c.batch_size = 5;
  c.shuffle_shards = true;
  s = BatchesPerRank({50, 50, 2, 2}, c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("shuffled"), std::string::npos) << s.status();
  c.shuffle_shards = false;  // unshuffled, ranks read {50, 2} each: fine
  EXPECT_EQ(*BatchesPerRank({50, 50, 2, 2}, c), 10);

  c = PlanConfig{};
  c.remainder = Remainder::kPad;
  s = BatchesPerRank({10}, c);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("remainder pad requires split sample"), std::string::npos);

  EXPECT_FALSE(BatchesPerRank({}, PlanConfig{}).ok());
  EXPECT_FALSE(BatchesPerRank({0, 0}, PlanConfig{}).ok());
  EXPECT_FALSE(EpochPlan::Create({0, 0}, PlanConfig{}, 0).ok());
}

TEST(EpochPlanRefusals, ParseNames) {
  EXPECT_EQ(*ParseSplit("shard"), Split::kShard);
  EXPECT_EQ(*ParseSplit("sample"), Split::kSample);
  EXPECT_FALSE(ParseSplit("node").ok());
  EXPECT_EQ(*ParseRemainder("drop"), Remainder::kDrop);
  EXPECT_EQ(*ParseRemainder("pad"), Remainder::kPad);
  EXPECT_FALSE(ParseRemainder("").ok());
  EXPECT_STREQ(SplitName(Split::kSample), "sample");
  EXPECT_STREQ(RemainderName(Remainder::kPad), "pad");
}

// ---------------------------------------------------------------------------------------
// Fingerprint.

TEST(EpochPlanFingerprint, StableDistinctAndNormalized) {
  PlanConfig c;
  c.world_size = 8;
  c.batch_size = 256;
  const std::string fp = PlanFingerprint("abc", c);
  EXPECT_EQ(fp.size(), 32u);
  EXPECT_EQ(fp.find_first_not_of("0123456789abcdef"), std::string::npos);
  // Pinned: the digest must not change between builds or machines (ranks and server
  // replicas compare it); changing the planner means changing kPlannerVersion.
  EXPECT_EQ(fp, PlanFingerprint("abc", c));
  EXPECT_EQ(fp, "e8c6ace020544527f2eafba84dbfd13e");  // Digest128 (common/util/digest.h)
  EXPECT_NE(fp, PlanFingerprint("abd", c));
  std::set<std::string> seen = {fp};
  for (int field = 0; field < 8; ++field) {
    PlanConfig d = c;
    switch (field) {
      case 0:
        d.world_size = 4;
        break;
      case 1:
        d.batch_size = 128;
        break;
      case 2:
        d.split = Split::kSample;
        break;
      case 3:
        d.workers = 2;
        break;
      case 4:
        d.shuffle_shards = true;
        break;
      case 5:
        d.shuffle_buffer = 100;
        break;
      case 6:
        d.split = Split::kSample;
        d.remainder = Remainder::kPad;
        break;
      case 7:
        d.split = Split::kSample;
        d.block_size = 16;
        break;
    }
    EXPECT_TRUE(seen.insert(PlanFingerprint("abc", d)).second) << "field " << field;
  }
  // Fields that cannot change the plan do not change the fingerprint.
  PlanConfig d = c;
  d.seed = 99;           // unshuffled split shard: the seed is unused
  d.block_size = 4;      // split shard: blocks are a split-sample option
  d.shuffle_buffer = 1;  // a buffer of one yields in order
  EXPECT_EQ(PlanFingerprint("abc", d), fp);
  d.shuffle_shards = true;
  EXPECT_NE(PlanFingerprint("abc", d), PlanFingerprint("abc", [&] {
              PlanConfig e = d;
              e.seed = 98;
              return e;
            }()));
}

// ---------------------------------------------------------------------------------------
// Properties over random datasets and configs, against the reference.

struct Case {
  std::vector<uint32_t> sizes;
  PlanConfig config;
};

Case RandomCase(std::mt19937_64& rng) {
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Case t;
  const int64_t num_shards = uniform(0, 3) == 0 ? uniform(1, 8) : uniform(1, 200);
  const int64_t max_size = std::vector<int64_t>{3, 30, 120, 400}[uniform(0, 3)];
  const int64_t empty_pct = uniform(0, 30);
  for (int64_t i = 0; i < num_shards; ++i) {
    t.sizes.push_back(uniform(0, 99) < empty_pct ? 0 : uniform(0, max_size));
  }
  PlanConfig& c = t.config;
  c.world_size = uniform(1, 16);
  c.batch_size = uniform(1, 64);
  c.workers = uniform(1, 4);
  c.split = uniform(0, 1) ? Split::kShard : Split::kSample;
  c.remainder = uniform(0, 3) == 0 ? Remainder::kPad : Remainder::kDrop;
  c.seed = rng();
  c.shuffle_shards = uniform(0, 1);
  c.shuffle_buffer = uniform(0, 2) == 0 ? 0 : uniform(1, 300);
  c.block_size = uniform(0, 2) == 0 ? 0 : uniform(1, 20);
  return t;
}

// Whether the documented refusal rules refuse this case, computed independently.
bool ShouldRefuse(const Case& t) {
  const PlanConfig& c = t.config;
  if (c.split == Split::kShard && c.remainder == Remainder::kPad) return true;
  const int64_t total = std::accumulate(t.sizes.begin(), t.sizes.end(), int64_t{0});
  const int64_t step = int64_t{c.batch_size} * c.world_size;
  const int64_t n = c.remainder == Remainder::kDrop ? total / step : (total + step - 1) / step;
  if (n == 0) return true;
  if (c.split == Split::kSample) return false;
  const int64_t s = t.sizes.size();
  if (s < int64_t{c.world_size} * c.workers) return true;
  if (!c.shuffle_shards) {
    for (int32_t r = 0; r < c.world_size; ++r) {
      if (ReferenceShardSplit(t.sizes, c, 0, r, 1).empty()) return true;
    }
    return false;
  }
  // Worst case over shard orders: the floor(S/W) smallest shards on one rank; refused
  // when the fullest worker's lower bound is short of a batch.
  std::vector<uint32_t> sorted = t.sizes;
  std::sort(sorted.begin(), sorted.end());
  const int64_t share = s / c.world_size;
  const int64_t per_worker = (share + c.workers - 1) / c.workers;
  const int64_t share_sum = std::accumulate(sorted.begin(), sorted.begin() + share, int64_t{0});
  const int64_t worker_sum =
      std::accumulate(sorted.begin(), sorted.begin() + per_worker, int64_t{0});
  const int64_t bound = std::max(worker_sum, (share_sum + c.workers - 1) / c.workers);
  return bound < c.batch_size;
}

void CheckCase(const Case& t, std::mt19937_64& rng, int* accepted, int* refused) {
  const PlanConfig& c = t.config;
  const std::string what = PlanConfigString(c) + " sizes=" + absl::StrJoin(t.sizes, ",");
  const absl::StatusOr<int64_t> n = BatchesPerRank(t.sizes, c);
  const bool should_refuse = ShouldRefuse(t);
  ASSERT_EQ(!n.ok(), should_refuse) << n.status() << " for " << what;
  if (!n.ok()) {
    ++*refused;
    EXPECT_TRUE(n.status().code() == absl::StatusCode::kInvalidArgument ||
                n.status().code() == absl::StatusCode::kFailedPrecondition);
    EXPECT_FALSE(EpochPlan::Create(t.sizes, c, 0).ok());
    return;
  }
  ++*accepted;
  const int64_t total = std::accumulate(t.sizes.begin(), t.sizes.end(), int64_t{0});
  std::vector<std::string> epoch_plans;
  for (int64_t epoch : {int64_t{0}, int64_t{1}, int64_t{5}}) {
    auto plan = EpochPlan::Create(t.sizes, c, epoch);
    ASSERT_TRUE(plan.ok()) << plan.status() << " for " << what;
    auto again = EpochPlan::Create(t.sizes, c, epoch);
    ASSERT_TRUE(again.ok());
    ASSERT_EQ((*plan)->batches_per_rank(), *n);
    std::map<std::pair<int32_t, int32_t>, int> served;
    int64_t padding = 0;
    std::string whole;
    for (int32_t r = 0; r < c.world_size; ++r) {
      auto it = (*plan)->Iterate(r, 0);
      const std::vector<PlannedBatch> batches = Drain(it.get());
      ASSERT_EQ(static_cast<int64_t>(batches.size()), *n) << "rank " << r << " " << what;
      const std::vector<int32_t> shards_of_rank = (*plan)->ShardsOfRank(r);
      const std::set<int32_t> rank_shards(shards_of_rank.begin(), shards_of_rank.end());
      for (size_t j = 0; j < batches.size(); ++j) {
        const PlannedBatch& b = batches[j];
        ASSERT_EQ(b.epoch, epoch);
        ASSERT_EQ(b.rank, r);
        ASSERT_EQ(b.index, static_cast<int64_t>(j));
        ASSERT_EQ(static_cast<int32_t>(b.samples.size()), c.batch_size);
        for (const SampleRef& s : b.samples) {
          if (!s.valid()) {
            ASSERT_EQ(c.remainder, Remainder::kPad) << what;
            ASSERT_EQ(s.index, -1);
            ++padding;
            continue;
          }
          ASSERT_LT(s.shard, static_cast<int32_t>(t.sizes.size()));
          ASSERT_GE(s.index, 0);
          ASSERT_LT(s.index, static_cast<int32_t>(t.sizes[s.shard])) << what;
          ASSERT_EQ(s.augment_seed, AugmentSeed(c.seed, epoch, s.shard, s.index));
          if (c.split == Split::kShard) {
            ASSERT_TRUE(rank_shards.count(s.shard)) << what;
          }
          ++served[{s.shard, s.index}];
        }
      }
      // Lazy == reference, batch for batch.
      const RankPlan lazy = Refs(batches);
      const RankPlan reference = c.split == Split::kShard
                                     ? ReferenceShardSplit(t.sizes, c, epoch, r, *n)
                                     : ReferenceSampleSplit(t.sizes, c, epoch, r, *n);
      ASSERT_EQ(Show(lazy), Show(reference)) << "rank " << r << " " << what;
      // Determinism: a second plan of the same inputs.
      ASSERT_EQ(Show(PlanOfRank(**again, r)), Show(lazy));
      // Resume: the stream from k is the suffix from k.
      for (int trial = 0; trial < 2; ++trial) {
        const int64_t k = std::uniform_int_distribution<int64_t>(0, *n)(rng);
        auto resumed = (*plan)->Iterate(r, k);
        const std::vector<PlannedBatch> suffix = Drain(resumed.get());
        ASSERT_EQ(static_cast<int64_t>(suffix.size()), *n - k);
        for (size_t j = 0; j < suffix.size(); ++j) {
          ASSERT_EQ(suffix[j].index, k + static_cast<int64_t>(j));
          ASSERT_EQ(suffix[j].samples.size(), batches[k + j].samples.size());
          for (size_t i = 0; i < suffix[j].samples.size(); ++i) {
            const SampleRef &x = suffix[j].samples[i], &y = batches[k + j].samples[i];
            ASSERT_TRUE(x.shard == y.shard && x.index == y.index &&
                        x.augment_seed == y.augment_seed)
                << "rank " << r << " resume at " << k << " batch " << k + j << " " << what;
          }
        }
      }
      absl::StrAppend(&whole, Show(lazy), "|");
    }
    if (c.split == Split::kSample) {
      for (const auto& [ref, count] : served) ASSERT_EQ(count, 1) << "duplicate " << what;
      if (c.remainder == Remainder::kDrop) {
        ASSERT_EQ(static_cast<int64_t>(served.size()), *n * c.batch_size * c.world_size);
      } else {
        ASSERT_EQ(static_cast<int64_t>(served.size()), total);
        ASSERT_EQ(padding, *n * c.batch_size * c.world_size - total);
      }
    }
    epoch_plans.push_back(whole);
  }
  // Shuffling gives different orders in different epochs (when there is room to).
  const bool shuffles =
      c.split == Split::kSample ? total >= 8 : (c.shuffle_shards && t.sizes.size() >= 8);
  if (shuffles) {
    EXPECT_TRUE(epoch_plans[0] != epoch_plans[1] || epoch_plans[0] != epoch_plans[2]) << what;
  }
  if (c.split == Split::kShard && !c.shuffle_shards && c.shuffle_buffer <= 1) {
    EXPECT_EQ(epoch_plans[0], epoch_plans[1]) << "unshuffled plans are epoch-invariant";
  }
}

TEST(EpochPlanProperties, RandomDatasetsAndConfigs) {
  std::mt19937_64 rng(20261202);
  int accepted = 0, refused = 0;
  std::map<std::string, int> kinds;
  for (int i = 0; i < 800; ++i) {
    const Case t = RandomCase(rng);
    int before = accepted;
    ASSERT_NO_FATAL_FAILURE(CheckCase(t, rng, &accepted, &refused)) << "case " << i;
    if (accepted > before) {
      const bool shard = t.config.split == Split::kShard;
      ++kinds[absl::StrCat(SplitName(t.config.split), "/", RemainderName(t.config.remainder),
                           shard && t.config.shuffle_buffer > 1 ? "/buffer" : "",
                           shard && t.config.shuffle_shards ? "/shuffled" : "")];
    }
  }
  std::printf("accepted %d, refused %d;", accepted, refused);
  for (const auto& [kind, count] : kinds) std::printf(" %s %d", kind.c_str(), count);
  std::printf("\n");
  // The generator must exercise every kind of accepted plan, not only refusals.
  EXPECT_GT(accepted, 200);
  EXPECT_GT(refused, 50);
  for (const char* kind : {"shard/drop", "shard/drop/buffer", "shard/drop/shuffled",
                           "shard/drop/buffer/shuffled", "sample/drop", "sample/pad"}) {
    EXPECT_GT(kinds[kind], 5) << kind;
  }
}

TEST(EpochPlanProperties, OutOfRangeRankOrStartGivesNoBatches) {
  PlanConfig c;
  c.world_size = 2;
  c.batch_size = 2;
  auto plan = MustCreate({10, 10}, c, 0);
  ASSERT_NE(plan, nullptr);
  EXPECT_TRUE(PlanOfRank(*plan, 2).empty());
  EXPECT_TRUE(PlanOfRank(*plan, -1).empty());
  EXPECT_TRUE(PlanOfRank(*plan, 0, plan->batches_per_rank()).empty());
  EXPECT_TRUE(PlanOfRank(*plan, 0, 1000).empty());
  EXPECT_TRUE(plan->ShardsOfRank(5).empty());
}

TEST(EpochPlanProperties, IteratorKeepsPlanAlive) {
  PlanConfig c;
  c.split = Split::kSample;
  c.batch_size = 3;
  std::unique_ptr<RankBatchIterator> it;
  {
    auto plan = MustCreate({10, 10}, c, 0);
    ASSERT_NE(plan, nullptr);
    it = plan->Iterate(0, 0);
  }
  EXPECT_EQ(Drain(it.get()).size(), 6u);
}

}  // namespace
}  // namespace shardcast

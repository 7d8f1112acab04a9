// A job over several datasets (RegisterRequest.mix) through a real server on loopback,
// on real tars: the global sequence the ranks' batches make holds the weights at every
// prefix (within 1 sample), each dataset is read in whole passes, every sample says its
// dataset, and bad mixtures are refused before the first batch with the server up.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/status/metrics_text.h"
#include "server/status/status_page.h"
#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

using ::testing::HasSubstr;

// One served sample of the job's global sequence.
struct Drawn {
  std::string dataset;
  std::string key;
  bool valid = false;
};

v1::RegisterRequest MixRequest(
    const std::string& job, int rank, int world, int batch,
    const std::vector<std::pair<int64_t, std::map<std::string, double>>>& schedule,
    uint64_t samples_per_epoch) {
  v1::RegisterRequest request = MakeRegister(job, rank, world, batch);
  for (const auto& [step, weights] : schedule) {
    v1::MixPoint* point = request.add_mix();
    point->set_step(step);
    for (const auto& [name, weight] : weights) {
      v1::MixWeight* w = point->add_weights();
      w->set_dataset(name);
      w->set_weight(weight);
    }
  }
  request.set_samples_per_epoch(samples_per_epoch);
  return request;
}

class MixtureServingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Very different sizes: b is repeated in many passes, c is not finished in two epochs.
    MakeDataset(a_.path(), /*samples=*/40, /*per_shard=*/10, /*size=*/48);
    MakeDataset(b_.path(), /*samples=*/7, /*per_shard=*/4, /*size=*/48);
    MakeDataset(c_.path(), /*samples=*/300, /*per_shard=*/64, /*size=*/48);
    options_.datasets = {{"a", a_.path()}, {"b", b_.path()}, {"c", c_.path()}};
  }

  // Registers every rank and streams `epochs` epochs of each; returns the global
  // sequence (position e*S + (j*W + r)*B + k) and checks every batch's shape.
  std::vector<Drawn> Run(InProcessServer& server, const v1::RegisterRequest& rank0, int epochs,
                         v1::RegisterResponse* response) {
    const int world = rank0.world_size();
    for (int rank = 0; rank < world; ++rank) {
      v1::RegisterRequest request = rank0;
      request.set_rank(rank);
      grpc::Status registered = Register(server.stub(), request, response);
      EXPECT_TRUE(registered.ok()) << registered.error_message();
    }
    const int64_t n = response->batches_per_epoch();
    const int batch = response->batch_size();
    const int64_t S = static_cast<int64_t>(response->samples_per_epoch());
    std::vector<Drawn> sequence(static_cast<size_t>(epochs * S));
    for (int epoch = 0; epoch < epochs; ++epoch) {
      std::vector<StreamResult> streams(static_cast<size_t>(world));
      std::vector<std::thread> threads;
      for (int rank = 0; rank < world; ++rank) {
        threads.emplace_back([&, rank] {
          streams[rank] = StreamAll(server.stub(), rank0.job_id(), rank, epoch, 0);
        });
      }
      for (std::thread& t : threads) t.join();
      for (int rank = 0; rank < world; ++rank) {
        EXPECT_TRUE(streams[rank].status.ok()) << streams[rank].status.error_message();
        EXPECT_EQ(static_cast<int64_t>(streams[rank].batches.size()), n);
        for (const v1::Batch& b : streams[rank].batches) {
          for (int k = 0; k < b.samples_size(); ++k) {
            const int64_t o = (b.index() * world + rank) * batch + k;
            if (o >= S) continue;
            const v1::SampleInfo& info = b.samples(k);
            sequence[static_cast<size_t>(epoch * S + o)] = {info.dataset(), info.key(),
                                                            info.valid()};
          }
        }
      }
    }
    return sequence;
  }

  TempDir a_, b_, c_;
  server::ServerOptions options_;
};

// Linear interpolation between the schedule's points, held outside them.
double WeightAt(const std::vector<std::pair<int64_t, std::map<std::string, double>>>& schedule,
                const std::string& name, int64_t step) {
  auto normalised = [&](size_t p) {
    double sum = 0;
    for (const auto& [n, w] : schedule[p].second) sum += w;
    return schedule[p].second.at(name) / sum;
  };
  if (step <= schedule.front().first) return normalised(0);
  for (size_t p = 1; p < schedule.size(); ++p) {
    if (step < schedule[p].first) {
      const double f = static_cast<double>(step - schedule[p - 1].first) /
                       static_cast<double>(schedule[p].first - schedule[p - 1].first);
      return normalised(p - 1) * (1 - f) + normalised(p) * f;
    }
  }
  return normalised(schedule.size() - 1);
}

// The prefix bound at every prefix, against the scheduled weights (step = position / G),
// and the pass rule per dataset: each run of N_d draws of dataset d is all of d.
void CheckSequence(const std::vector<Drawn>& sequence,
                   const std::vector<std::pair<int64_t, std::map<std::string, double>>>& schedule,
                   int64_t global_batch, const std::map<std::string, int64_t>& sizes) {
  std::map<std::string, double> target;
  std::map<std::string, int64_t> count;
  std::map<std::string, std::vector<std::string>> drawn;
  double worst = 0;
  for (size_t p = 0; p < sequence.size(); ++p) {
    const Drawn& d = sequence[p];
    ASSERT_TRUE(d.valid) << "position " << p;
    ASSERT_EQ(sizes.count(d.dataset), 1u) << "position " << p << " dataset '" << d.dataset << "'";
    ++count[d.dataset];
    drawn[d.dataset].push_back(d.key);
    for (const auto& [name, size] : sizes) {
      target[name] += WeightAt(schedule, name, static_cast<int64_t>(p) / global_batch);
      const double off = std::abs(static_cast<double>(count[name]) - target[name]);
      worst = std::max(worst, off);
      ASSERT_LE(off, 1.0 + 1e-6) << "prefix " << p + 1 << " dataset " << name;
    }
  }
  for (const auto& [name, keys] : drawn) {
    const size_t n = static_cast<size_t>(sizes.at(name));
    for (size_t start = 0; start < keys.size(); start += n) {
      const size_t end = std::min(keys.size(), start + n);
      const std::set<std::string> pass(keys.begin() + start, keys.begin() + end);
      EXPECT_EQ(pass.size(), end - start) << name << ": a sample twice within a pass at " << start;
    }
  }
  ::testing::Test::RecordProperty("largest_prefix_deviation", std::to_string(worst));
  std::printf("largest |count - target| over every prefix and dataset: %.4f\n", worst);
}

TEST_F(MixtureServingTest, ConstantWeightsHoldAtEveryPrefixAndEachDatasetIsReadInPasses) {
  InProcessServer server(a_.path(), options_);  // --shards: "default", not in the mixture
  const std::vector<std::pair<int64_t, std::map<std::string, double>>> schedule = {
      {0, {{"a", 5}, {"b", 3}, {"c", 2}}}};
  v1::RegisterResponse response;
  const std::vector<Drawn> sequence =
      Run(server, MixRequest("mix", 0, 2, 4, schedule, 96), /*epochs=*/2, &response);
  EXPECT_EQ(response.dataset(), "");
  EXPECT_EQ(response.samples_per_epoch(), 96u);
  EXPECT_EQ(response.num_samples(), 96);
  EXPECT_EQ(response.batches_per_epoch(), 96 / 8);
  EXPECT_EQ(response.split(), v1::SPLIT_SAMPLE);
  ASSERT_EQ(response.mix_size(), 1);
  ASSERT_EQ(response.mix(0).weights_size(), 3);
  EXPECT_EQ(response.mix(0).weights(0).dataset(), "a");
  EXPECT_DOUBLE_EQ(response.mix(0).weights(0).weight(), 0.5);
  EXPECT_DOUBLE_EQ(response.mix(0).weights(1).weight(), 0.3);
  ASSERT_EQ(response.mix_datasets_size(), 3);
  EXPECT_EQ(response.mix_datasets(1).name(), "b");
  EXPECT_EQ(response.mix_datasets(1).num_samples(), 7);
  CheckSequence(sequence, schedule, 8, {{"a", 40}, {"b", 7}, {"c", 300}});
  // Exact counts over the two epochs: 192 positions at 0.5 / 0.3 / 0.2.
  std::map<std::string, int> count;
  for (const Drawn& d : sequence) ++count[d.dataset];
  EXPECT_NEAR(count["a"], 96, 1);
  EXPECT_NEAR(count["b"], 57.6, 1);
  EXPECT_NEAR(count["c"], 38.4, 1);

  // Status: at the ranks' position (the end of epoch 1), each dataset's draws are the
  // sequence's counts, its pass and place in it follow, and the weight is the schedule's.
  const v1::GetStatusResponse status = GetStatus(server.stub());
  ASSERT_EQ(status.jobs_size(), 1);
  const v1::JobStatus& job = status.jobs(0);
  EXPECT_EQ(job.dataset(), "");
  EXPECT_EQ(job.samples_per_epoch(), 96u);
  ASSERT_EQ(job.mix_size(), 3);
  const std::map<std::string, int64_t> sizes = {{"a", 40}, {"b", 7}, {"c", 300}};
  for (const v1::MixDatasetStatus& d : job.mix()) {
    EXPECT_EQ(d.samples_drawn(), count[d.name()]) << d.name();
    EXPECT_EQ(d.num_samples(), sizes.at(d.name()));
    EXPECT_EQ(d.pass(), count[d.name()] / sizes.at(d.name())) << d.name();
    EXPECT_EQ(d.pass_position(), count[d.name()] % sizes.at(d.name())) << d.name();
  }
  EXPECT_NEAR(job.mix(0).weight(), 0.5, 1e-12);
  EXPECT_NEAR(job.mix(2).weight(), 0.2, 1e-12);
  const std::string page = server::RenderStatusPage(status, {}, 600);
  EXPECT_THAT(page, HasSubstr("a mixture of 3 datasets, 96 samples per epoch"));
  EXPECT_THAT(page, HasSubstr(absl::StrCat("<tr><td>b</td><td>0.3000</td><td>", count["b"])));
  const std::string metrics = server::RenderPrometheusText(server.server().impl().Metrics());
  EXPECT_THAT(metrics, HasSubstr("shardcast_job_mix_weight{job=\"mix\",dataset=\"b\"} 0.3"));
  EXPECT_THAT(metrics,
              HasSubstr(absl::StrCat("shardcast_job_mix_samples_drawn{job=\"mix\",dataset=\"b\"} ",
                                     count["b"])));
}

TEST_F(MixtureServingTest, AScheduleMovesTheWeightsOverSteps) {
  InProcessServer server(a_.path(), options_);
  // Dataset c enters at step 4 and a leaves by step 12 (a weight of 0 at a point).
  const std::vector<std::pair<int64_t, std::map<std::string, double>>> schedule = {
      {4, {{"a", 0.8}, {"b", 0.2}, {"c", 0}}}, {12, {{"a", 0}, {"b", 0.5}, {"c", 0.5}}}};
  v1::RegisterResponse response;
  const std::vector<Drawn> sequence =
      Run(server, MixRequest("sched", 0, 2, 3, schedule, 60), /*epochs=*/2, &response);
  ASSERT_EQ(response.mix_size(), 2);
  EXPECT_EQ(response.mix(1).step(), 12);
  CheckSequence(sequence, schedule, 6, {{"a", 40}, {"b", 7}, {"c", 300}});
  // Before step 4 no sample of c; after step 12 none of a.
  for (size_t p = 0; p < 4 * 6; ++p) EXPECT_NE(sequence[p].dataset, "c") << p;
  for (size_t p = 13 * 6; p < sequence.size(); ++p) EXPECT_NE(sequence[p].dataset, "a") << p;
}

// Streams epoch `epoch` of every rank of registered job `job` from `offset` (with
// `resume`, when given) into `sequence` by global position.
void StreamEpoch(InProcessServer& server, const std::string& job, int world, int batch, int64_t spe,
                 int64_t epoch, int64_t offset, const v1::MixtureResume* resume,
                 std::map<int64_t, Drawn>* sequence) {
  for (int rank = 0; rank < world; ++rank) {
    v1::StreamBatchesRequest request;
    request.set_job_id(job);
    request.set_rank(rank);
    request.set_epoch(epoch);
    request.set_sample_offset(offset);
    if (resume != nullptr) *request.mutable_mix_resume() = *resume;
    StreamResult stream = StreamAll(server.stub(), request);
    ASSERT_TRUE(stream.status.ok()) << stream.status.error_message();
    for (const v1::Batch& b : stream.batches) {
      for (int k = 0; k < b.samples_size(); ++k) {
        const int64_t o = offset + (b.index() * world + rank) * batch + k;
        if (o >= spe) continue;
        const v1::SampleInfo& info = b.samples(k);
        (*sequence)[epoch * spe + o] = {info.dataset(), info.key(), info.valid()};
      }
    }
  }
}

void RegisterAll(InProcessServer& server, v1::RegisterRequest request) {
  for (int rank = 0; rank < request.world_size(); ++rank) {
    request.set_rank(rank);
    v1::RegisterResponse response;
    grpc::Status registered = Register(server.stub(), request, &response);
    ASSERT_TRUE(registered.ok()) << registered.error_message();
  }
}

std::vector<Drawn> InOrder(const std::map<int64_t, Drawn>& sequence) {
  std::vector<Drawn> out;
  for (const auto& [position, drawn] : sequence) {
    EXPECT_EQ(position, static_cast<int64_t>(out.size())) << "a position missing";
    out.push_back(drawn);
  }
  return out;
}

TEST_F(MixtureServingTest, AScheduleResumesElasticallyThroughSegments) {
  InProcessServer server(a_.path(), options_);
  const std::vector<std::pair<int64_t, std::map<std::string, double>>> schedule = {
      {0, {{"a", 1}, {"b", 1}, {"c", 0}}}, {6, {{"a", 0.2}, {"b", 0.3}, {"c", 0.5}}}};
  // The old run: 2 ranks of batch 4 take 5 steps (positions 0..39); the new one, 3 ranks
  // of batch 4, goes on from position 40 and takes the next epoch too.
  v1::RegisterRequest old_run = MixRequest("el-old", 0, 2, 4, schedule, 96);
  old_run.set_remainder(v1::REMAINDER_PAD);
  RegisterAll(server, old_run);
  std::map<int64_t, Drawn> old_sequence;
  StreamEpoch(server, "el-old", 2, 4, 96, 0, 0, nullptr, &old_sequence);
  v1::RegisterRequest new_run = MixRequest("el-new", 0, 3, 4, schedule, 96);
  new_run.set_remainder(v1::REMAINDER_PAD);
  RegisterAll(server, new_run);
  v1::MixtureResume resume;
  resume.set_position(40);
  v1::MixSegment* segment = resume.add_segments();
  segment->set_global_batch(8);
  std::map<int64_t, Drawn> sequence;
  for (int64_t p = 0; p < 40; ++p) sequence[p] = old_sequence[p];
  StreamEpoch(server, "el-new", 3, 4, 96, 0, 40, &resume, &sequence);
  StreamEpoch(server, "el-new", 3, 4, 96, 1, 0, &resume, &sequence);
  const std::vector<Drawn> whole = InOrder(sequence);
  ASSERT_EQ(whole.size(), 192u);
  // Steps: 8 positions each before position 40, 12 after (step 5 on).
  std::map<std::string, double> target;
  std::map<std::string, int64_t> count;
  for (size_t p = 0; p < whole.size(); ++p) {
    const int64_t step =
        p < 40 ? static_cast<int64_t>(p) / 8 : 5 + (static_cast<int64_t>(p) - 40) / 12;
    ++count[whole[p].dataset];
    for (const std::string name : {"a", "b", "c"}) {
      target[name] += WeightAt(schedule, name, step);
      ASSERT_LE(std::abs(count[name] - target[name]), 1.0 + 1e-6)
          << "prefix " << p + 1 << " " << name;
    }
  }
  // Passes go on across the change: no sample twice within its dataset's pass.
  const std::map<std::string, size_t> sizes = {{"a", 40}, {"b", 7}, {"c", 300}};
  std::map<std::string, std::vector<std::string>> keys;
  for (const Drawn& d : whole) keys[d.dataset].push_back(d.key);
  for (const auto& [name, drawn] : keys) {
    for (size_t start = 0; start < drawn.size(); start += sizes.at(name)) {
      const size_t end = std::min(drawn.size(), start + sizes.at(name));
      EXPECT_EQ(std::set<std::string>(drawn.begin() + start, drawn.begin() + end).size(),
                end - start)
          << name << " pass at " << start;
    }
  }
  // A stream of the resumed run that starts before its position is refused.
  v1::StreamBatchesRequest early;
  early.set_job_id("el-new");
  early.set_epoch(0);
  early.set_sample_offset(0);
  *early.mutable_mix_resume() = resume;
  StreamResult refused = StreamAll(server.stub(), early);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("continues the mixture from position 40"));
}

TEST_F(MixtureServingTest, NewWeightsContinueEveryPassAndHoldFromTheResumePoint) {
  InProcessServer server(a_.path(), options_);
  const std::vector<std::pair<int64_t, std::map<std::string, double>>> before = {
      {0, {{"a", 5}, {"b", 3}, {"c", 2}}}};
  const std::vector<std::pair<int64_t, std::map<std::string, double>>> after = {
      {0, {{"a", 1}, {"b", 1}, {"c", 8}}}};
  v1::RegisterRequest old_run = MixRequest("nw-old", 0, 2, 4, before, 96);
  RegisterAll(server, old_run);
  std::map<int64_t, Drawn> old_sequence;
  StreamEpoch(server, "nw-old", 2, 4, 96, 0, 0, nullptr, &old_sequence);
  v1::RegisterRequest new_run = MixRequest("nw-new", 0, 2, 4, after, 96);
  RegisterAll(server, new_run);
  v1::MixtureResume resume;
  resume.set_position(48);
  resume.add_segments()->set_global_batch(8);
  *resume.mutable_schedule() = old_run.mix();
  std::map<int64_t, Drawn> sequence;
  for (int64_t p = 0; p < 48; ++p) sequence[p] = old_sequence[p];
  StreamEpoch(server, "nw-new", 2, 4, 96, 0, 48, &resume, &sequence);
  StreamEpoch(server, "nw-new", 2, 4, 96, 1, 0, &resume, &sequence);
  const std::vector<Drawn> whole = InOrder(sequence);
  ASSERT_EQ(whole.size(), 192u);
  // The new weights hold from the resume point on, at every prefix.
  std::map<std::string, int64_t> count;
  const std::map<std::string, double> w = {{"a", 0.1}, {"b", 0.1}, {"c", 0.8}};
  for (size_t p = 48; p < whole.size(); ++p) {
    ++count[whole[p].dataset];
    for (const auto& [name, weight] : w) {
      ASSERT_LE(std::abs(count[name] - weight * static_cast<double>(p - 47)), 1.0 + 1e-6)
          << "prefix " << p + 1 << " " << name;
    }
  }
  // Each dataset's pass continued where the old run left it: over the whole sequence,
  // no sample twice within a pass (b, 7 samples, was mid-pass at the change).
  const std::map<std::string, size_t> sizes = {{"a", 40}, {"b", 7}, {"c", 300}};
  std::map<std::string, std::vector<std::string>> keys;
  for (const Drawn& d : whole) keys[d.dataset].push_back(d.key);
  for (const auto& [name, drawn] : keys) {
    for (size_t start = 0; start < drawn.size(); start += sizes.at(name)) {
      const size_t end = std::min(drawn.size(), start + sizes.at(name));
      EXPECT_EQ(std::set<std::string>(drawn.begin() + start, drawn.begin() + end).size(),
                end - start)
          << name << " pass at " << start;
    }
  }
}

TEST_F(MixtureServingTest, ABadSegmentScheduleIsRefusedNamingTheSegment) {
  InProcessServer server(a_.path(), options_);
  const std::vector<std::pair<int64_t, std::map<std::string, double>>> weights = {
      {0, {{"a", 1}, {"b", 1}, {"c", 1}}}};
  RegisterAll(server, MixRequest("bad-seg", 0, 1, 4, weights, 96));
  v1::StreamBatchesRequest request;
  request.set_job_id("bad-seg");
  request.set_sample_offset(60);
  v1::MixtureResume* resume = request.mutable_mix_resume();
  resume->set_position(60);
  resume->add_segments()->set_global_batch(8);
  v1::MixSegment* second = resume->add_segments();
  second->set_start_position(48);
  second->set_start_step(6);
  second->set_global_batch(4);
  v1::MixPoint* point = second->add_schedule();
  for (const char* name : {"a", "z", "c"}) {
    v1::MixWeight* w = point->add_weights();
    w->set_dataset(name);
    w->set_weight(1);
  }
  StreamResult stream = StreamAll(server.stub(), request);
  EXPECT_EQ(stream.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(stream.status.error_message(), HasSubstr("earlier segment 1"));
  EXPECT_THAT(stream.status.error_message(), HasSubstr("'z'"));
}

TEST_F(MixtureServingTest, RanksMustAgreeAndTheFingerprintCoversTheMixture) {
  InProcessServer server(a_.path(), options_);
  const std::vector<std::pair<int64_t, std::map<std::string, double>>> one = {
      {0, {{"a", 1}, {"b", 1}}}};
  const std::vector<std::pair<int64_t, std::map<std::string, double>>> other = {
      {0, {{"a", 1}, {"b", 2}}}};
  v1::RegisterResponse r0, r1, again, moved;
  ASSERT_TRUE(Register(server.stub(), MixRequest("agree", 0, 2, 2, one, 0), &r0).ok());
  grpc::Status disagree = Register(server.stub(), MixRequest("agree", 1, 2, 2, other, 0), &r1);
  EXPECT_EQ(disagree.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(disagree.error_message(), HasSubstr("mix: job 'agree'"));
  ASSERT_TRUE(Register(server.stub(), MixRequest("agree", 1, 2, 2, one, 0), &r1).ok());
  EXPECT_EQ(r0.job_fingerprint(), r1.job_fingerprint());
  // Default epoch length: the datasets' usable samples together.
  EXPECT_EQ(r0.samples_per_epoch(), 47u);
  ASSERT_TRUE(Register(server.stub(), MixRequest("same", 0, 1, 2, one, 0), &again).ok());
  ASSERT_TRUE(Register(server.stub(), MixRequest("moved", 0, 1, 2, other, 0), &moved).ok());
  EXPECT_EQ(again.job_fingerprint(), r0.job_fingerprint());
  EXPECT_NE(moved.job_fingerprint(), r0.job_fingerprint());
  // A single-dataset job on the same server: SampleInfo.dataset stays empty.
  v1::RegisterResponse single;
  v1::RegisterRequest one_dataset = MakeRegister("single", 0, 1, 2);
  one_dataset.set_dataset("b");
  ASSERT_TRUE(Register(server.stub(), one_dataset, &single).ok());
  StreamResult stream = StreamAll(server.stub(), "single", 0, 0, 0);
  ASSERT_TRUE(stream.status.ok()) << stream.status.error_message();
  ASSERT_FALSE(stream.batches.empty());
  EXPECT_EQ(stream.batches[0].samples(0).dataset(), "");
}

TEST_F(MixtureServingTest, BadMixturesAreRefusedNamingTheProblemAndTheServerStaysUp) {
  InProcessServer server(a_.path(), options_);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    std::string name;
    v1::RegisterRequest request;
    grpc::StatusCode code;
    std::string says;
  };
  std::vector<Case> cases;
  auto add = [&](std::string name,
                 std::vector<std::pair<int64_t, std::map<std::string, double>>> schedule,
                 grpc::StatusCode code, std::string says, uint64_t spe = 0) {
    cases.push_back({name, MixRequest("bad-" + name, 0, 1, 2, schedule, spe), code, says});
  };
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  add("unknown", {{0, {{"a", 1}, {"zz", 1}}}}, kInvalid, "zz");
  add("negative", {{0, {{"a", 1}, {"b", -1}}}}, kInvalid, "weights are finite numbers >= 0");
  add("nan", {{0, {{"a", 1}, {"b", nan}}}}, kInvalid, "weights are finite numbers >= 0");
  add("inf", {{0, {{"a", 1}, {"b", inf}}}}, kInvalid, "weights are finite numbers >= 0");
  add("all-zero", {{0, {{"a", 0}, {"b", 0}}}}, kInvalid, "sum to > 0");
  add("zero-everywhere", {{0, {{"a", 1}, {"b", 0}}}, {5, {{"a", 2}, {"b", 0}}}}, kInvalid,
      "weight 0 at every point");
  add("steps", {{5, {{"a", 1}, {"b", 1}}}, {5, {{"a", 2}, {"b", 1}}}}, kInvalid,
      "does not increase");
  add("names", {{0, {{"a", 1}, {"b", 1}}}, {5, {{"a", 1}, {"c", 1}}}}, kInvalid,
      "every point names the same datasets");
  add("epoch-zero-drop", {{0, {{"a", 1}}}}, grpc::StatusCode::FAILED_PRECONDITION, "no full step",
      1);
  add("epoch-huge", {{0, {{"a", 1}}}}, kInvalid, "samples_per_epoch", uint64_t{1} << 63);
  {
    std::map<std::string, double> many;
    for (int i = 0; i < 300; ++i) many["d" + std::to_string(i)] = 1;
    add("too-many", {{0, many}}, kInvalid, "at most 256");
  }
  {
    v1::RegisterRequest empty = MixRequest("bad-empty", 0, 1, 2, {{0, {}}}, 0);
    cases.push_back({"empty", empty, kInvalid, "names no dataset"});
    v1::RegisterRequest shard = MixRequest("bad-shard", 0, 1, 2, {{0, {{"a", 1}}}}, 0);
    shard.set_split(v1::SPLIT_SHARD);
    cases.push_back({"shard", shard, kInvalid, "split=\"shard\" cannot mix"});
    v1::RegisterRequest both = MixRequest("bad-both", 0, 1, 2, {{0, {{"a", 1}}}}, 0);
    both.set_dataset("a");
    cases.push_back({"both", both, kInvalid, "one dataset or a mixture"});
    v1::RegisterRequest fields = MixRequest("bad-fields", 0, 1, 2, {{0, {{"a", 1}}}}, 0);
    fields.add_fields("txt");
    cases.push_back({"fields", fields, grpc::StatusCode::FAILED_PRECONDITION, "dataset 'a'"});
  }
  for (const Case& c : cases) {
    v1::RegisterResponse response;
    grpc::Status status = Register(server.stub(), c.request, &response);
    EXPECT_EQ(status.error_code(), c.code) << c.name << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.says)) << c.name;
  }
  // The unknown name's refusal lists the served datasets.
  v1::RegisterResponse response;
  grpc::Status unknown = Register(server.stub(), cases[0].request, &response);
  EXPECT_THAT(unknown.error_message(), HasSubstr("default"));
  // Still serving: a good mixture registers and streams.
  ASSERT_TRUE(Register(server.stub(), MixRequest("good", 0, 1, 2, {{0, {{"a", 1}, {"b", 1}}}}, 8),
                       &response)
                  .ok());
  StreamResult stream = StreamAll(server.stub(), "good", 0, 0, 0);
  EXPECT_TRUE(stream.status.ok()) << stream.status.error_message();
  EXPECT_EQ(stream.batches.size(), 4u);
}

}  // namespace
}  // namespace shardcast::server_testing

// A mixed job's request and parts (see job_mixture.h).
#include "server/serving/job_mixture.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/plan/job_fingerprint.h"
#include "common/util/digest.h"
#include "common/util/utf8.h"
#include "proto/job_config_proto.h"

namespace shardcast::server {

namespace v1 = ::shardcast::v1;

absl::StatusOr<MixtureRequest> ParseMixture(const v1::RegisterRequest& request) {
  if (!request.dataset().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mix: the job names dataset '", EscapeToUtf8(request.dataset()),
        "' and a mixture; a job reads one dataset or a mixture (leave dataset empty)"));
  }
  MixtureRequest mixture;
  mixture.samples_per_epoch = request.samples_per_epoch();
  std::set<std::string> first;
  for (int p = 0; p < request.mix_size(); ++p) {
    const v1::MixPoint& point = request.mix(p);
    MixturePoint parsed;
    parsed.step = point.step();
    std::set<std::string> names;
    for (const v1::MixWeight& weight : point.weights()) {
      if (weight.dataset().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("mix: point ", p, " has a weight without a dataset name"));
      }
      if (weight.dataset().size() > kMaxDatasetNameLength) {
        return absl::InvalidArgumentError(absl::StrCat("mix: point ", p,
                                                       " names a dataset longer than ",
                                                       kMaxDatasetNameLength, " characters"));
      }
      if (!names.insert(weight.dataset()).second) {
        return absl::InvalidArgumentError(absl::StrCat("mix: point ", p, " names dataset '",
                                                       EscapeToUtf8(weight.dataset()), "' twice"));
      }
      if (names.size() > static_cast<size_t>(kMaxMixtureDatasets)) {
        return absl::InvalidArgumentError(absl::StrCat("mix: more than ", kMaxMixtureDatasets,
                                                       " datasets; at most ", kMaxMixtureDatasets,
                                                       " may be mixed"));
      }
      parsed.weights.emplace_back(weight.dataset(), weight.weight());
    }
    if (names.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("mix: point ", p, " names no dataset"));
    }
    if (p == 0) {
      first = names;
    } else if (names != first) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mix: point ", p, " names {", absl::StrJoin(names, ", "), "}, point 0 names {",
          absl::StrJoin(first, ", "),
          "}; every point names the same datasets (a weight of 0 leaves one out there)"));
    }
    mixture.schedule.push_back(std::move(parsed));
  }
  // The mixture's order, on every rank, replica and resume: by name.
  mixture.names.assign(first.begin(), first.end());
  return mixture;
}

std::string MixtureRequestString(const MixtureRequest& mixture) {
  std::string out = absl::StrCat("samples_per_epoch=", mixture.samples_per_epoch);
  for (const MixturePoint& point : mixture.schedule) {
    std::vector<std::pair<std::string, double>> weights = point.weights;
    std::sort(weights.begin(), weights.end());
    absl::StrAppend(&out, " step ", point.step, ":");
    for (const auto& [name, weight] : weights) {
      absl::StrAppend(&out, " ", EscapeToUtf8(name), "=", absl::StrFormat("%.17g", weight));
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<JobMixture>> BuildMixture(MixtureRequest asked,
                                                         std::vector<const NamedDataset*> datasets,
                                                         const JobConfig& config,
                                                         int64_t max_member_bytes) {
  auto mixture = std::make_unique<JobMixture>();
  MixtureSpec spec;
  std::vector<std::vector<uint32_t>> shard_sizes;
  std::vector<BatchAssembler::Source> sources;
  uint64_t total = 0;
  for (size_t d = 0; d < datasets.size(); ++d) {
    const NamedDataset& dataset = *datasets[d];
    absl::StatusOr<std::shared_ptr<const JobSamples>> samples =
        JobSamples::Select(dataset.data->index(), config, max_member_bytes);
    if (!samples.ok()) {
      return absl::Status(samples.status().code(),
                          absl::StrCat("mix: dataset '", dataset.name,
                                       "' of the mixture: ", samples.status().message()));
    }
    ServeSettings serve = dataset.serve;
    if ((*samples)->member_limit_reached()) serve.max_member_bytes = max_member_bytes;
    mixture->dataset_fingerprints.push_back(
        JobFingerprint(dataset.data->index().fingerprint, config, serve));
    mixture->largest_sample_member_bytes =
        std::max(mixture->largest_sample_member_bytes,
                 static_cast<int64_t>((*samples)->largest_sample_member_bytes()));
    const uint64_t n = static_cast<uint64_t>((*samples)->num_samples());
    total += n;
    spec.datasets.push_back(MixtureDataset{dataset.name, n});
    shard_sizes.push_back((*samples)->shard_sizes());
    sources.push_back(BatchAssembler::Source{dataset.name, dataset.data.get()});
    mixture->samples.push_back(*std::move(samples));
  }
  spec.schedule = asked.schedule;
  spec.samples_per_epoch = asked.samples_per_epoch == 0 ? total : asked.samples_per_epoch;
  spec.seed = config.plan.seed;
  absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> plan =
      MixtureJobPlan::Create(std::move(spec), std::move(shard_sizes), config.plan);
  if (!plan.ok()) return plan.status();
  mixture->plan = *std::move(plan);

  Digest128 digest;
  digest.AddString("shardcast-mixture-v1");
  for (size_t d = 0; d < datasets.size(); ++d) {
    digest.AddString(datasets[d]->name);
    digest.AddString(mixture->dataset_fingerprints[d]);
  }
  digest.AddU64(mixture->plan->planner().schedule_fingerprint());
  digest.AddU64(mixture->plan->spec().samples_per_epoch);
  mixture->job_fingerprint = digest.Hex();
  Digest128 data;
  data.AddString("shardcast-mixture-data-v1");
  for (size_t d = 0; d < datasets.size(); ++d) {
    data.AddString(datasets[d]->name);
    data.AddString(mixture->dataset_fingerprints[d]);
  }
  data.AddU64(mixture->plan->spec().samples_per_epoch);
  mixture->data_fingerprint = data.Hex();

  mixture->assembler = datasets[0]->assembler->ForMixture(std::move(sources));
  mixture->asked = std::move(asked);
  mixture->datasets = std::move(datasets);
  return mixture;
}

namespace {

// A schedule as RegisterResponse.mix carries it: in step order, each point's weights
// normalised to sum 1, in the mixture's order by name (the planner's fixed-point weights
// are these to 2^-53).
std::vector<MixturePoint> ResolvedSchedule(const MixtureSpec& spec) {
  std::vector<MixturePoint> out;
  for (const MixturePoint& point : spec.schedule) {
    double sum = 0;
    for (const auto& [name, weight] : point.weights) sum += weight;
    std::map<std::string, double> by_name(point.weights.begin(), point.weights.end());
    MixturePoint resolved{point.step, {}};
    for (const auto& [name, weight] : by_name) {
      resolved.weights.emplace_back(name, sum > 0 ? weight / sum : 0);
    }
    out.push_back(std::move(resolved));
  }
  return out;
}

bool SamePoints(const std::vector<MixturePoint>& a, const std::vector<MixturePoint>& b) {
  if (a.size() != b.size()) return false;
  for (size_t p = 0; p < a.size(); ++p) {
    if (a[p].step != b[p].step || a[p].weights != b[p].weights) return false;
  }
  return true;
}

// A schedule of the request; one equal to this job's resolved schedule stands for this
// job's own (re-normalising resolved weights may round them differently).
std::vector<MixturePoint> ParseSchedule(const google::protobuf::RepeatedPtrField<v1::MixPoint>& in,
                                        const MixtureSpec& spec) {
  std::vector<MixturePoint> out;
  for (const v1::MixPoint& point : in) {
    MixturePoint parsed;
    parsed.step = point.step();
    for (const v1::MixWeight& w : point.weights()) {
      parsed.weights.emplace_back(w.dataset(), w.weight());
    }
    std::sort(parsed.weights.begin(), parsed.weights.end());  // by name, as resolved
    out.push_back(std::move(parsed));
  }
  if (!out.empty() && SamePoints(out, ResolvedSchedule(spec))) return spec.schedule;
  return out;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> ResumedPlan(const JobMixture& mixture,
                                                                  const v1::MixtureResume& resume) {
  const MixtureSpec& spec = mixture.plan->spec();
  std::vector<MixtureRunSegment> segments;
  for (const v1::MixSegment& segment : resume.segments()) {
    segments.push_back(MixtureRunSegment{
        MixtureSegment{segment.start_position(), segment.start_step(), segment.global_batch()},
        ParseSchedule(segment.schedule(), spec)});
  }
  // The first segment without its own schedule: the request's (clients before per-segment
  // schedules send only that one); empty too: this job's.
  if (!segments.empty() && segments[0].schedule.empty()) {
    segments[0].schedule = ParseSchedule(resume.schedule(), spec);
  }
  return mixture.plan->Resumed(resume.position(), segments);
}

void SetMixtureResponse(const JobMixture& mixture, v1::RegisterResponse* response) {
  const MixtureSpec& spec = mixture.plan->spec();
  MixPointsToWire(ResolvedSchedule(spec), response->mutable_mix());
  response->set_samples_per_epoch(spec.samples_per_epoch);
  response->set_mix_data_fingerprint(mixture.data_fingerprint);
  response->set_num_samples(static_cast<int64_t>(spec.samples_per_epoch));
  int32_t num_classes = 0;
  bool same_classes = true;
  Digest128 indexes;
  for (size_t d = 0; d < mixture.datasets.size(); ++d) {
    const DatasetIndex& index = mixture.datasets[d]->data->index();
    v1::MixDataset* out = response->add_mix_datasets();
    out->set_name(mixture.datasets[d]->name);
    out->set_num_samples(mixture.samples[d]->num_samples());
    out->set_index_fingerprint(index.fingerprint);
    num_classes = std::max(num_classes, index.num_classes);
    same_classes =
        same_classes && index.class_names == mixture.datasets[0]->data->index().class_names;
    indexes.AddString(index.fingerprint);
    for (const LeftOut& out_reason : mixture.samples[d]->left_out()) {
      v1::ReasonCount* reason = response->add_left_out();
      reason->set_reason(EscapeToUtf8(
          absl::StrCat("dataset '", mixture.datasets[d]->name, "': ", out_reason.reason)));
      reason->set_count(out_reason.count);
    }
  }
  response->set_num_classes(num_classes);
  if (same_classes) {
    for (const std::string& name : mixture.datasets[0]->data->index().class_names) {
      response->add_class_names(EscapeToUtf8(name));
    }
  }
  response->set_index_fingerprint(indexes.Hex());
}

}  // namespace shardcast::server

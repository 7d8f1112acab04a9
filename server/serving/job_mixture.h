// A mixed job (RegisterRequest.mix): the request's mixture parsed and checked, and the
// parts a job over several datasets plans and assembles with (the mixture planner of
// common/plan/mixture_epoch.h, each dataset's selection, an assembler over them all).
#ifndef SHARDCAST_SERVER_SERVING_JOB_MIXTURE_H_
#define SHARDCAST_SERVER_SERVING_JOB_MIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/plan/job_config.h"
#include "common/plan/job_samples.h"
#include "common/plan/mixture_epoch.h"
#include "server/assembly/batch_assembler.h"
#include "server/serving/dataset_registry.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::server {

// The mixture a registration asks for, before any dataset is looked at.
struct MixtureRequest {
  std::vector<std::string> names;      // the datasets, by name (the mixture's order)
  std::vector<MixturePoint> schedule;  // as asked (checked by the planner)
  uint64_t samples_per_epoch = 0;      // 0: the datasets' usable samples together
};

// The request's mixture, or INVALID_ARGUMENT naming the problem: `dataset` set beside
// `mix`, an empty or repeated dataset name, more than kMaxMixtureDatasets datasets,
// points that name different datasets. Weights, steps and samples_per_epoch are the
// planner's to check (MixturePlanner::Create). REQUIRES: request.mix_size() > 0.
absl::StatusOr<MixtureRequest> ParseMixture(const shardcast::v1::RegisterRequest& request);

// The mixture as one line, the ranks' agreement check: equal when two ranks asked for
// the same mixture.
std::string MixtureRequestString(const MixtureRequest& mixture);

// What a mixed job plans and assembles with.
struct JobMixture {
  MixtureRequest asked;
  std::vector<const NamedDataset*> datasets;  // in the mixture's order
  std::vector<std::shared_ptr<const JobSamples>> samples;
  std::shared_ptr<const MixtureJobPlan> plan;
  std::unique_ptr<BatchAssembler> assembler;
  // Each dataset's job fingerprint (its data, the config, its server settings).
  std::vector<std::string> dataset_fingerprints;
  // The mixture's: every dataset's, the fixed-point schedule, the epoch length.
  std::string job_fingerprint;
  // All but the schedule (RegisterResponse.mix_data_fingerprint).
  std::string data_fingerprint;
  int64_t largest_sample_member_bytes = 0;
};

// Builds a new mixed job's parts: each dataset's selection (refusals name the dataset:
// a field it lacks, no usable sample), then the planner (its refusals: weights, steps,
// samples_per_epoch, the datasets' count). REQUIRES: `datasets` holds asked.names'
// datasets in that order.
absl::StatusOr<std::unique_ptr<JobMixture>> BuildMixture(MixtureRequest asked,
                                                         std::vector<const NamedDataset*> datasets,
                                                         const JobConfig& config,
                                                         int64_t max_member_bytes);

// The plan of `mixture` resumed as `resume` asks (StreamBatchesRequest.mix_resume): each
// segment replayed under its own schedule (MixSegment.schedule; none: the segment
// before's, the first's MixtureResume.schedule, then this job's). INVALID_ARGUMENT for
// segments or schedules the planner refuses (naming the segment).
absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> ResumedPlan(
    const JobMixture& mixture, const shardcast::v1::MixtureResume& resume);

// The response's mixture fields (mix, samples_per_epoch, mix_datasets, num_samples,
// classes, left_out, index_fingerprint).
void SetMixtureResponse(const JobMixture& mixture, shardcast::v1::RegisterResponse* response);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_SERVING_JOB_MIXTURE_H_

// The samples one job serves: of the dataset index, those that hold every required
// field of the job (RegisterRequest.fields) with no requested member over
// --max-member-bytes, per shard, and how many were left out for which reason. The
// planner deals positions among a shard's selected samples; the batches it plans are
// mapped back to the index's positions (MapToIndex) before anything is read, so the
// assembler, the read-ahead and SampleInfo.index_in_shard see the index's samples.
// A job without fields selects every sample: its plans and bytes are those of before
// fields existed.
#ifndef SHARDCAST_COMMON_PLAN_JOB_SAMPLES_H_
#define SHARDCAST_COMMON_PLAN_JOB_SAMPLES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/plan/epoch_plan.h"
#include "common/plan/field_spec.h"
#include "common/plan/job_config.h"
#include "common/plan/selected_positions.h"
#include "common/shards/dataset_index.h"

namespace shardcast {

// A sample's member for each field, in the fields' order: the index into
// SampleEntry::members of the first alternative (in the order asked) equal to a
// member's extension, or kNoFieldMember where the sample has none of them.
inline constexpr int32_t kNoFieldMember = -1;
std::vector<int32_t> FieldMembers(const SampleEntry& sample, const std::vector<FieldSpec>& fields);

// The bytes of `sample`'s members that a batch carries as stored: its `fields` and,
// with `encoded_image` (a job with encoded delivery), its image member, unless that is
// over `max_member_bytes` (0 = no limit): such an image is not read (the sample is
// substituted, sent without data).
uint64_t SentMemberBytes(const SampleEntry& sample, const std::vector<FieldSpec>& fields,
                         bool encoded_image, int64_t max_member_bytes);
// Whether `config`'s batches carry its images as stored (encoded delivery).
bool SendsEncodedImages(const JobConfig& config);

// How many samples of the dataset a job leaves out for one reason.
struct LeftOut {
  std::string reason;  // "missing required field 'txt'", "member 'txt' over ..."
  int64_t count = 0;
};

class JobSamples : public std::enable_shared_from_this<JobSamples> {
 public:
  // The selection of `config.fields` over `index` (`max_member_bytes` 0 = no limit).
  // Refusals, each saying what to ask for instead: FAILED_PRECONDITION for a job with
  // an image on a dataset none of whose samples has one; for a required field no
  // sample of the dataset has (naming it, with the extensions the dataset holds and
  // how many samples hold each); for a job that would leave every sample out (the
  // reasons counted).
  static absl::StatusOr<std::shared_ptr<const JobSamples>> Select(const DatasetIndex& index,
                                                                  const JobConfig& config,
                                                                  int64_t max_member_bytes);

  // Selected samples per shard, in shard order: what the planner takes.
  const std::vector<uint32_t>& shard_sizes() const { return shard_sizes_; }
  int64_t num_samples() const { return num_samples_; }
  // By count, most first (ties by reason); empty when every sample is served.
  const std::vector<LeftOut>& left_out() const { return left_out_; }
  // Whether a sample was left out for a member over --max-member-bytes: the limit
  // then decides what the job serves (its fingerprint carries it).
  bool member_limit_reached() const { return member_limit_reached_; }
  // The most bytes the members a batch carries of one selected sample take
  // (SentMemberBytes): with the pixels, what bounds a batch's message and its batch
  // memory.
  uint64_t largest_sample_member_bytes() const { return largest_sample_member_bytes_; }

  // The index's position of the `selected`-th selected sample of shard `shard`.
  int32_t IndexPosition(int32_t shard, int32_t selected) const;
  // `planned` with every valid SampleRef's index mapped by IndexPosition (the augment
  // seed stays the plan's).
  void MapToIndex(PlannedBatch* planned) const;
  // `batches`, each mapped by MapToIndex; `batches` itself when the job selects every
  // sample.
  std::unique_ptr<RankBatchIterator> MapToIndex(std::unique_ptr<RankBatchIterator> batches) const;

 private:
  JobSamples() = default;

  std::vector<uint32_t> shard_sizes_;
  // Per shard, the index positions of its selected samples; selecting nothing when the
  // shard's every sample is selected (then a position is its own).
  std::vector<SelectedPositions> positions_;
  bool selects_all_ = true;
  int64_t num_samples_ = 0;
  std::vector<LeftOut> left_out_;
  bool member_limit_reached_ = false;
  uint64_t largest_sample_member_bytes_ = 0;
};

// A mixed job's `batches` (SampleRef::dataset set, mixture_epoch.h), each sample mapped
// to its dataset's index by that dataset's selection, `samples[dataset]`.
std::unique_ptr<RankBatchIterator> MapMixtureToIndex(
    std::vector<std::shared_ptr<const JobSamples>> samples,
    std::unique_ptr<RankBatchIterator> batches);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_PLAN_JOB_SAMPLES_H_

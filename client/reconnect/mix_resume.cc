// A mixed job's resume across runs (see mix_resume.h).
#include "client/reconnect/mix_resume.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardcast::client {
namespace {

// The global position `saved` continues from: the next epoch's start when its epoch was
// finished, else the samples all ranks consumed in it.
int64_t GlobalPosition(const SavedMix& saved, int64_t samples_per_epoch) {
  const SavedPosition& p = saved.position;
  if (saved.batches_in_epoch > 0 && p.next_batch >= saved.batches_in_epoch) {
    return (p.epoch + 1) * samples_per_epoch;
  }
  return p.epoch * samples_per_epoch + p.SamplesConsumed();
}

// The schedule each of the saved run's segments drew under: as kept, or (a checkpoint
// from before they were kept) its schedule for every segment, this job's when it kept
// none (a checkpoint of this job without the run's facts).
std::vector<std::vector<MixturePoint>> SegmentSchedules(const SavedMix& saved, size_t n,
                                                        const MixJob& job) {
  if (saved.run.segment_schedules.size() == n) return saved.run.segment_schedules;
  return std::vector<std::vector<MixturePoint>>(
      n, saved.run.schedule.empty() ? job.schedule : saved.run.schedule);
}

}  // namespace

MixtureSegment NextMixSegment(const std::vector<MixtureSegment>& segments, int64_t position,
                              int64_t global_batch) {
  MixtureSegment last;
  for (const MixtureSegment& s : segments) {
    if (s.start_position < position) last = s;
  }
  return MixtureSegment{
      position, last.start_step + (position - 1 - last.start_position) / last.global_batch + 1,
      global_batch};
}

absl::StatusOr<std::optional<MixResumeAt>> MixResumedFrom(const SavedMix& saved,
                                                          const MixJob& job) {
  if (job.schedule.empty()) return std::nullopt;
  const bool same_weights = saved.job_fingerprint == job.job_fingerprint;
  const bool has_run = !saved.run.segments.empty();
  // A checkpoint without the run's facts is of this mixture only when it is of this job.
  if (!has_run && !same_weights) return std::nullopt;
  std::vector<MixtureSegment> segments = saved.run.segments;
  if (!has_run) {
    segments = {MixtureSegment{0, 0, saved.position.world_size * saved.position.batch_size}};
  }
  // Segments come from a checkpoint file: checked as the planner checks them before any
  // arithmetic here divides by a global batch.
  if (absl::Status valid = ValidateMixtureSegments(segments); !valid.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the checkpoint's mixture segments: ", valid.message()));
  }
  if (same_weights &&
      segments == std::vector<MixtureSegment>{MixtureSegment{0, 0, job.global_batch}}) {
    return std::nullopt;  // the same run: the ordinary resume
  }
  if (!same_weights && saved.run.data_fingerprint != job.data_fingerprint) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the checkpoint is of a mixture with other datasets, settings or epoch length "
        "(mix_data_fingerprint '%s', this job's '%s'); other weights may resume a mixture, "
        "nothing else",
        saved.run.data_fingerprint, job.data_fingerprint));
  }
  const int64_t position = GlobalPosition(saved, job.samples_per_epoch);
  if (position < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the checkpoint's position is negative (", position, ")"));
  }
  MixResumeAt at;
  at.epoch = position / job.samples_per_epoch;
  at.sample_offset = position % job.samples_per_epoch;
  if (position == 0) {  // nothing drawn yet: this run starts the sequence
    at.segments = {MixtureSegment{0, 0, job.global_batch}};
    at.segment_schedules = {job.schedule};
    return at;
  }
  at.resume.position = position;
  at.resume.segments = segments;
  at.resume.segment_schedules = SegmentSchedules(saved, segments.size(), job);
  if (!same_weights) at.resume.schedule = saved.run.schedule;
  for (size_t i = 0; i < segments.size() && segments[i].start_position < position; ++i) {
    at.segments.push_back(segments[i]);
    at.segment_schedules.push_back(at.resume.segment_schedules[i]);
  }
  at.segments.push_back(NextMixSegment(segments, position, job.global_batch));
  at.segment_schedules.push_back(job.schedule);
  return at;
}

}  // namespace shardcast::client

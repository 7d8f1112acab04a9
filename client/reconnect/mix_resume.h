// A mixed job's resume across runs (docs/training.md, "Mixtures"), the rule Python's
// Loader applies too (python/shardcast/mix_resume.py): what a run keeps of how it drew
// its sequence (its segments of global batch, its schedule), and the
// StreamBatchesRequest.mix_resume a later run sends so that the server replays that and
// deals on from the same position: an elastic resume of a schedule, or new weights that
// continue every dataset's pass. Resumes chain: each segment keeps the schedule its run
// drew under, and the server replays each segment under its own. Torch-free and
// gRPC-free: plain values in and out (the stream room turns MixResume into the wire's
// MixtureResume).
#ifndef SHARDCAST_CLIENT_RECONNECT_MIX_RESUME_H_
#define SHARDCAST_CLIENT_RECONNECT_MIX_RESUME_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/reconnect/run_rules.h"
#include "common/plan/mixture_plan.h"

namespace shardcast::client {

// How a mixed run drew its sequence: what a checkpoint (a Loader state) keeps of it.
struct MixRun {
  // (start position, start step, global batch) from position 0 on; empty: not a
  // mixture, or a checkpoint written before runs kept these.
  std::vector<MixtureSegment> segments;
  std::vector<MixturePoint> schedule;  // as the server resolved it (RegisterResponse.mix)
  // The schedule each segment drew under, parallel to `segments`; empty (a checkpoint
  // written before these were kept): `schedule`, for every segment.
  std::vector<std::vector<MixturePoint>> segment_schedules;
  std::string data_fingerprint;  // RegisterResponse.mix_data_fingerprint
  int64_t samples_per_epoch = 0;
};

// This run's mixed job as registered.
struct MixJob {
  std::string job_fingerprint;
  std::string data_fingerprint;
  int64_t samples_per_epoch = 0;
  int64_t global_batch = 0;            // world size x batch size
  std::vector<MixturePoint> schedule;  // empty: not a mixture
};

// A saved position of a run of some job.
struct SavedMix {
  SavedPosition position;
  int64_t batches_in_epoch = 0;  // of position.epoch; 0: unknown (the epoch not finished)
  std::string job_fingerprint;
  MixRun run;
};

// StreamBatchesRequest.mix_resume as plain values; position 0: none.
struct MixResume {
  int64_t position = 0;
  std::vector<MixtureSegment> segments;
  std::vector<MixturePoint> schedule;  // the earlier run's; empty: this job's
  // Each segment's schedule, parallel to `segments` (MixSegment.schedule): what the
  // server replays each under. `schedule` is kept for servers that predate them.
  std::vector<std::vector<MixturePoint>> segment_schedules;
};

// Where a resumed mixed run starts: batch 0 of `epoch` dealt from `sample_offset`,
// sending `resume` with every stream; `segments` are this run's and `segment_schedules`
// the schedule each drew under (for its checkpoints; the last is this job's).
struct MixResumeAt {
  int64_t epoch = 0;
  int64_t sample_offset = 0;
  MixResume resume;
  std::vector<MixtureSegment> segments;
  std::vector<std::vector<MixturePoint>> segment_schedules;
};

// The segment a run resumed at `position` adds: from the step after the earlier run's
// last one (the server's rule: MixtureJobPlan::Resumed). REQUIRES: a segment of
// `segments` starts before `position`.
MixtureSegment NextMixSegment(const std::vector<MixtureSegment>& segments, int64_t position,
                              int64_t global_batch);

// The run `job` starts from `saved` when it is of another run of this mixture (another
// global batch, an earlier resume, other weights); nullopt when the ordinary resume
// applies (no mixture on one side, or the same run going on: same weights, one segment
// at this global batch). A checkpoint without segments counts as one segment at its own
// global batch, of this job when the job fingerprints match. FAILED_PRECONDITION naming
// both fingerprints when the mixture's data, settings or epoch length differ
// (mix_data_fingerprint). Nothing drawn yet (position 0): this run starts the sequence,
// with no resume to send.
absl::StatusOr<std::optional<MixResumeAt>> MixResumedFrom(const SavedMix& saved, const MixJob& job);

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_RECONNECT_MIX_RESUME_H_

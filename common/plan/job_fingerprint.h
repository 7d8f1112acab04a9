// The job fingerprint: what every rank and replica of a job must agree on, above both
// the job config and the plan fingerprint (it digests the plan's), so that job_config
// includes neither the planner's normalization nor this: job_config.h <-
// plan_fingerprint.h <- job_fingerprint.h.
#ifndef SHARDCAST_COMMON_PLAN_JOB_FINGERPRINT_H_
#define SHARDCAST_COMMON_PLAN_JOB_FINGERPRINT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "common/plan/job_config.h"

namespace shardcast {

// Stable hex digest (32 digits) of the data (the content fingerprint of the index)
// and every setting that decides which samples a batch holds and which bytes each
// image becomes: split, remainder, workers, seed, shuffles, block size, transform
// (unless the job has no image), whether there is an image, the fields asked for,
// the delivery (encoded; server delivery digests nothing, as before it existed),
// and the server's byte-changing settings (`serve`, with kSubstitutionVersion).
// World size and batch size are NOT in it: they are compared on their own, so that
// a later elastic resume can relax them. Settings that cannot change the batches
// are normalized away first (as PlanFingerprint does), so equal digests mean equal
// batches (for equal world and batch size) for every epoch.
std::string JobFingerprint(absl::string_view index_fingerprint, const JobConfig& config,
                           const ServeSettings& serve = {});

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_PLAN_JOB_FINGERPRINT_H_

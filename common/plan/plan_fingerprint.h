// The plan's identity: the config as the planner sees it (what cannot change the plan
// normalized away), its one-line spelling, and its digest. Below the planner
// (epoch_plan.h includes it) so that the job fingerprint (job_config.cc) takes the
// plan's without including the planner: headers include downward only.
#ifndef SHARDCAST_COMMON_PLAN_PLAN_FINGERPRINT_H_
#define SHARDCAST_COMMON_PLAN_PLAN_FINGERPRINT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "common/plan/job_config.h"

namespace shardcast {

// The planner algorithm's version, part of every plan fingerprint: bump it when the
// planner (epoch_plan.cc) deals other samples for the same data and config, so that
// no rank resumes onto another plan.
inline constexpr char kPlannerVersion[] = "shardcast-plan-v1";

// Stable hex digest (32 hex digits) of (index fingerprint, config) that ranks/servers
// compare. Fields that cannot change the plan are normalized away first (e.g. workers
// for kSample, the seed for an unshuffled kShard plan), so equal fingerprints mean
// equal plans for every epoch; a planner algorithm version is part of the digest.
std::string PlanFingerprint(absl::string_view index_fingerprint, const PlanConfig& config);

// One line describing the config, e.g. for logs and refusals.
std::string PlanConfigString(const PlanConfig& config);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_PLAN_PLAN_FINGERPRINT_H_

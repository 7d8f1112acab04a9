// The one mapping between the wire's job fields (RegisterRequest, RegisterResponse)
// and common/plan/job_config.h, used by the server and by every client.
#ifndef SHARDCAST_PROTO_JOB_CONFIG_PROTO_H_
#define SHARDCAST_PROTO_JOB_CONFIG_PROTO_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/plan/job_config.h"
#include "common/plan/mixture_plan.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast {

shardcast::v1::Split ToProto(Split split);
shardcast::v1::Remainder ToProto(Remainder remainder);
shardcast::v1::TransformMode ToProto(TransformMode mode);
shardcast::v1::ImageDelivery ToProto(ImageDelivery delivery);

// The request's settings, unset/zero fields left unset. INVALID_ARGUMENT for an
// enum value this build does not know or a negative number (naming the field).
absl::StatusOr<JobOverrides> OverridesFromRequest(const shardcast::v1::RegisterRequest& request);
// Sets the request's job fields from `overrides` (unset ones stay unset: the
// server's defaults apply). Leaves job_id, rank and world_size alone.
void SetRequestOverrides(const JobOverrides& overrides, shardcast::v1::RegisterRequest* request);

// The config a request asks for: its overrides on the server's `defaults`, world
// size from the request, then Validate(limits).
absl::StatusOr<JobConfig> EffectiveJobConfig(const shardcast::v1::RegisterRequest& request,
                                             const JobConfig& defaults, const JobLimits& limits);

// The effective config in a RegisterResponse: written by the server, read by clients.
void SetResponseConfig(const JobConfig& config, shardcast::v1::RegisterResponse* response);
absl::StatusOr<JobConfig> ResponseConfig(const shardcast::v1::RegisterResponse& response);

// A schedule on the wire (RegisterRequest.mix, RegisterResponse.mix, MixtureResume's):
// appended to `out`, weights by dataset name in the points' order.
void MixPointsToWire(const std::vector<MixturePoint>& points,
                     google::protobuf::RepeatedPtrField<shardcast::v1::MixPoint>* out);

// A mixture (RegisterRequest.mix, samples_per_epoch): `points` empty sets nothing.
void SetRequestMixture(const std::vector<MixturePoint>& points, uint64_t samples_per_epoch,
                       shardcast::v1::RegisterRequest* request);
// A response's resolved mixture (empty for a job of one dataset).
std::vector<MixturePoint> ResponseMixture(const shardcast::v1::RegisterResponse& response);

}  // namespace shardcast

#endif  // SHARDCAST_PROTO_JOB_CONFIG_PROTO_H_

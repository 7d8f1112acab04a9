// The job fingerprint (see job_fingerprint.h).
#include "common/plan/job_fingerprint.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/plan/plan_fingerprint.h"
#include "common/util/digest.h"

namespace shardcast {

std::string JobFingerprint(absl::string_view index_fingerprint, const JobConfig& config,
                           const ServeSettings& serve) {
  // World and batch size fixed to 1: the plan digest then covers the data, the
  // planner version and every other (normalized) plan setting, and nothing else.
  PlanConfig plan = config.plan;
  plan.world_size = 1;
  plan.batch_size = 1;
  const TransformSpec& t = config.transform;
  Digest128 digest;
  digest.AddString("shardcast-job-v2");
  digest.AddString(PlanFingerprint(index_fingerprint, plan));
  digest.AddU64(kTransformVersion);
  // A job without images never reads the transform: jobs that differ only there are
  // the same.
  const bool center = config.image && t.mode == TransformMode::kCenter;
  digest.AddString(config.image ? TransformModeName(t.mode) : "no-image");
  digest.AddU64(config.image ? static_cast<uint64_t>(t.crop) : 0);
  // Random mode never reads resize: two random jobs that differ only there are the same.
  digest.AddU64(center ? static_cast<uint64_t>(t.resize) : 0);
  digest.AddU64(config.image && t.dct_scaling ? 1 : 0);
  // Which members each sample carries, and which samples a required one leaves out.
  // Jobs without fields digest nothing more, so their fingerprints are those of
  // before fields existed.
  if (!config.fields.empty())
    digest.AddString(absl::StrCat("fields:", FieldSpecsString(config.fields)));
  // Encoded delivery sends other bytes (the members as stored, with their crops), so a
  // stream must not resume across a change of it. Server delivery digests nothing, so
  // those fingerprints are those of before delivery modes existed.
  if (config.image && config.delivery == ImageDelivery::kEncoded)
    digest.AddString("delivery:encoded");
  digest.AddU64(kSubstitutionVersion);
  digest.AddU64(static_cast<uint64_t>(serve.max_member_bytes));
  digest.AddU64(static_cast<uint64_t>(serve.max_decode_bytes));
  digest.AddU64(static_cast<uint64_t>(serve.max_pixels));
  digest.AddU64(serve.resend_first_batch ? 1 : 0);
  return digest.Hex();
}

}  // namespace shardcast

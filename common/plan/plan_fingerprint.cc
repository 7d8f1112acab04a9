// The plan fingerprint and config string (see plan_fingerprint.h).
#include "common/plan/plan_fingerprint.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/digest.h"

namespace shardcast {
namespace {

// Config as the plan sees it: fields that cannot change the plan are reset.
PlanConfig Normalized(PlanConfig c) {
  if (c.shuffle_buffer <= 1) c.shuffle_buffer = 0;
  switch (c.split) {
    case Split::kSample:
      c.workers = 1;
      c.shuffle_shards = false;
      c.shuffle_buffer = 0;
      break;
    case Split::kShard:
      c.block_size = 0;
      if (!c.shuffle_shards && c.shuffle_buffer == 0) c.seed = 0;
      break;
  }
  return c;
}

}  // namespace

std::string PlanConfigString(const PlanConfig& c) {
  return absl::StrFormat(
      "world_size=%d batch_size=%d split=%s remainder=%s workers=%d seed=%d "
      "shuffle_shards=%d shuffle_buffer=%d block_size=%d",
      c.world_size, c.batch_size, SplitName(c.split), RemainderName(c.remainder), c.workers, c.seed,
      c.shuffle_shards ? 1 : 0, c.shuffle_buffer, c.block_size);
}

std::string PlanFingerprint(absl::string_view index_fingerprint, const PlanConfig& config) {
  const PlanConfig c = Normalized(config);
  const std::string canonical = absl::StrCat(kPlannerVersion, "\n", index_fingerprint.size(), ":",
                                             index_fingerprint, "\n", PlanConfigString(c));
  Digest128 digest;
  digest.AddString(canonical);
  return digest.Hex();
}

}  // namespace shardcast

// Checks of what a RankStream's caller asks (see request_checks.h).
#include "client/checks/request_checks.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/plan/epoch_plan.h"
#include "common/plan/job_config.h"
#include "proto/job_config_proto.h"

namespace shardcast::client {
namespace {

// Batches of `epoch` dealt from `sample_offset` (0: all of them).
absl::StatusOr<int64_t> BatchesOfEpoch(const shardcast::v1::RegisterResponse& registration,
                                       const shardcast::v1::RegisterRequest& job, int64_t epoch,
                                       int64_t sample_offset) {
  if (sample_offset == 0) return registration.batches_per_epoch();
  absl::StatusOr<JobConfig> config = ResponseConfig(registration);
  if (!config.ok()) return config.status();
  config->plan.world_size = job.world_size();
  absl::StatusOr<int64_t> left =
      BatchesFromOffset(registration.num_samples(), config->plan, sample_offset);
  if (!left.ok()) {
    return absl::Status(left.status().code(), absl::StrFormat("job '%s' epoch %d: %s", job.job_id(),
                                                              epoch, left.status().message()));
  }
  return *left;
}

}  // namespace

absl::Status CheckStreamSettings(const StreamSettings& settings) {
  if (settings.prefetch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefetch must be >= 1, got ", settings.prefetch));
  }
  if (!(settings.stream_timeout_seconds >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream timeout must be >= 0 seconds, got ", settings.stream_timeout_seconds));
  }
  if (settings.decode_threads < 0 || settings.decode_threads > kMaxDecodeThreads) {
    return absl::InvalidArgumentError(absl::StrCat("decode threads must be in [0, ",
                                                   kMaxDecodeThreads, "] (0: the default), got ",
                                                   settings.decode_threads));
  }
  if (settings.max_decode_memory_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the decode memory limit must be > 0 bytes, got ", settings.max_decode_memory_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> EpochBatches(const shardcast::v1::RegisterResponse& registration,
                                     const shardcast::v1::RegisterRequest& job, int64_t epoch,
                                     int64_t start_batch, int64_t sample_offset) {
  absl::StatusOr<int64_t> n = BatchesOfEpoch(registration, job, epoch, sample_offset);
  if (!n.ok()) return n.status();
  if (epoch < 0 || start_batch < 0 || start_batch > *n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "StartEpoch(epoch=%d, start_batch=%d): need epoch >= 0 and 0 <= start_batch <= %d "
        "(batches of this epoch of job '%s')",
        epoch, start_batch, *n, job.job_id()));
  }
  return *n;
}

}  // namespace shardcast::client

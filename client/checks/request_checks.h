// The checks of what a RankStream's caller asks, before anything goes on the wire: the
// stream settings (Connect), and the batches a StartEpoch asks for, counted from an
// elastic resume's sample offset. Pure: tests call them on made-up messages.
#ifndef SHARDCAST_CLIENT_CHECKS_REQUEST_CHECKS_H_
#define SHARDCAST_CLIENT_CHECKS_REQUEST_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/base/stream_settings.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::client {

// INVALID_ARGUMENT naming the setting: prefetch below 1, a negative stream timeout or
// decode thread count, a decode memory limit of 0.
absl::Status CheckStreamSettings(const StreamSettings& settings);

// The batch count of `epoch` of `job` as registered: batches_per_epoch(), or, from a
// `sample_offset` > 0, the batches left when the epoch is dealt from that global sample
// position over the job's world size. INVALID_ARGUMENT unless epoch >= 0 and
// 0 <= start_batch <= that count; the planner's error for an offset it cannot deal
// from (naming job and epoch).
absl::StatusOr<int64_t> EpochBatches(const shardcast::v1::RegisterResponse& registration,
                                     const shardcast::v1::RegisterRequest& job, int64_t epoch,
                                     int64_t start_batch, int64_t sample_offset);

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_CHECKS_REQUEST_CHECKS_H_

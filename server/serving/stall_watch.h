// The DDP-hang early warning (--stall-warn), as a pure function of the ranks'
// progress: in DDP the healthy ranks block in all-reduce while one rank is stuck, so a
// stuck rank shows as a rank that has taken no batch for a while with another rank of
// its job ahead of it. No clock of its own, no I/O.
#ifndef SHARDCAST_SERVER_SERVING_STALL_WATCH_H_
#define SHARDCAST_SERVER_SERVING_STALL_WATCH_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"

namespace shardcast::server {

// What the stall check needs to know of one rank.
struct RankActivity {
  int64_t position = 0;   // epoch * batches_per_epoch + next batch (the job's global order)
  absl::Time last_batch;  // when the rank last took a batch (or opened its stream)
};

// For each rank of one job, whether it is stalled at `now`: it has taken no batch for
// at least `stall_warn` and another rank of the job is strictly ahead of it. Ranks
// that all stopped at the same position (a whole job paused, say for a checkpoint)
// are not stalled: nobody waits on one of them. `stall_warn` <= 0: none is.
std::vector<bool> StalledRanks(const std::vector<RankActivity>& ranks, absl::Duration stall_warn,
                               absl::Time now);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_SERVING_STALL_WATCH_H_

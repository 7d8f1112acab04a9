// The DDP-hang early warning's rule (see stall_watch.h).
#include "server/serving/stall_watch.h"

#include <algorithm>

namespace shardcast::server {

std::vector<bool> StalledRanks(const std::vector<RankActivity>& ranks, absl::Duration stall_warn,
                               absl::Time now) {
  std::vector<bool> stalled(ranks.size(), false);
  if (stall_warn <= absl::ZeroDuration() || ranks.size() < 2) return stalled;
  int64_t most_advanced = ranks.front().position;
  for (const RankActivity& rank : ranks) most_advanced = std::max(most_advanced, rank.position);
  for (size_t i = 0; i < ranks.size(); ++i) {
    stalled[i] = ranks[i].position < most_advanced && now - ranks[i].last_batch >= stall_warn;
  }
  return stalled;
}

}  // namespace shardcast::server

// --nproc-per-node: start K local ranks of this program, as torchrun's standalone mode
// does (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT set).
#ifndef SHARDCAST_CLIENT_TRAIN_LAUNCHER_H_
#define SHARDCAST_CLIENT_TRAIN_LAUNCHER_H_

#include <string>
#include <vector>

namespace shardcast::train {

struct LaunchSpec {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                 // 0: a free port is picked (single node only)
  std::vector<std::string> rank_args;  // argv[1..] for each rank (launcher flags removed)
};

// Runs the ranks and waits. SIGINT/SIGTERM/SIGHUP are forwarded to them. When a rank
// fails (non-zero exit or a signal), the others get SIGTERM, then SIGKILL after a grace
// period. Returns the process exit status: 0 when every rank succeeded, else the first
// failure's exit code (128 + signal for a killed rank).
int LaunchLocalRanks(const LaunchSpec& spec);

}  // namespace shardcast::train

#endif  // SHARDCAST_CLIENT_TRAIN_LAUNCHER_H_

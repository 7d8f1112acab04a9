// Raising RLIMIT_NOFILE (see descriptor_limit.h).
#include "server/net/descriptor_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardcast::server {

namespace {

// A positive number from a /proc/sys file, else `fallback`.
uint64_t ReadProcNumber(const char* path, uint64_t fallback) {
  std::ifstream file(path);
  uint64_t value = 0;
  if (file >> value && value > 0) return value;
  return fallback;
}

// The kernel's ceiling on a descriptor limit (setrlimit refuses more with EPERM).
uint64_t KernelDescriptorCeiling() { return ReadProcNumber("/proc/sys/fs/nr_open", 1 << 20); }

}  // namespace

absl::StatusOr<DescriptorLimit> RaiseDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(absl::StrCat("getrlimit(RLIMIT_NOFILE): ", std::strerror(errno)));
  }
  DescriptorLimit result;
  result.soft_before = limit.rlim_cur;
  result.hard = limit.rlim_max == RLIM_INFINITY ? KernelDescriptorCeiling() : limit.rlim_max;
  const rlim_t target = static_cast<rlim_t>(result.hard);
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= target) {
    result.soft = std::min<uint64_t>(limit.rlim_cur, result.hard);
    return result;
  }
  limit.rlim_cur = target;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(
        absl::StrCat("setrlimit(RLIMIT_NOFILE, ", target, "): ", std::strerror(errno)));
  }
  result.soft = target;
  return result;
}

int64_t AcceptQueueLimit() {
  return static_cast<int64_t>(ReadProcNumber("/proc/sys/net/core/somaxconn", 4096));
}

DescriptorShares DescriptorBudget(uint64_t limit, int64_t accept_queue_limit) {
  const int64_t total = static_cast<int64_t>(std::min<uint64_t>(limit, uint64_t{INT64_MAX} / 4));
  DescriptorShares shares;
  shares.reserve = std::min(kDescriptorReserve, total / 2);
  const int64_t shared = total - shares.reserve;
  shares.metrics_connections = std::clamp<int64_t>(shared / 8, 1, kMaxMetricsConnections);
  const int64_t connections = shared - shares.metrics_connections;
  shares.accept_backlog =
      std::clamp<int64_t>(connections / 4, 1, std::max<int64_t>(1, accept_queue_limit));
  // One more than the backlog: Linux queues backlog + 1 connections.
  shares.max_connections = std::max<int64_t>(1, connections - shares.accept_backlog - 1);
  return shares;
}

int64_t DefaultMaxConnectionsPerPeer(int64_t max_connections) {
  if (max_connections <= 0) return 0;
  return std::min(max_connections, std::max<int64_t>(16, max_connections / 4));
}

}  // namespace shardcast::server

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

int64_t AcceptBacklog(uint64_t soft_limit, int64_t accept_queue_limit) {
  const int64_t soft = static_cast<int64_t>(std::min<uint64_t>(soft_limit, INT64_MAX / 4));
  return std::max<int64_t>(std::min<int64_t>(64, accept_queue_limit),
                           std::min(soft / 4, accept_queue_limit));
}

int64_t DefaultMaxConnections(uint64_t soft_limit, int64_t backlog) {
  const int64_t soft = static_cast<int64_t>(std::min<uint64_t>(soft_limit, INT64_MAX / 4));
  return std::max(kMinConnections, soft - backlog - kDescriptorReserve);
}

int64_t DefaultMaxConnectionsPerPeer(int64_t max_connections) {
  if (max_connections <= 0) return 0;
  return std::max<int64_t>(16, max_connections / 4);
}

}  // namespace shardcast::server

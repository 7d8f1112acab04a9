// What the memory benchmarks read from a running shardcast-server child process: its
// memory figures from /proc and its GetStatus reply.
#ifndef SHARDCAST_BENCH_SERVER_PROBE_H_
#define SHARDCAST_BENCH_SERVER_PROBE_H_

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "shardcast/v1/shardcast.grpc.pb.h"

namespace shardcast::bench {

// From /proc/PID/status, in bytes: `field` "VmRSS:" (now) or "VmHWM:" (peak); 0 if absent.
inline int64_t ProcMemoryBytes(pid_t pid, const char* field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) {
      long kb = 0;
      std::sscanf(line.c_str() + std::strlen(field), "%ld", &kb);
      return int64_t{kb} * 1024;
    }
  }
  return 0;
}

// The server's status, or an empty reply if it did not answer within `seconds`.
inline shardcast::v1::GetStatusResponse ServerStatus(shardcast::v1::Shardcast::Stub* stub,
                                                     int seconds) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  shardcast::v1::GetStatusResponse status;
  (void)stub->GetStatus(&context, shardcast::v1::GetStatusRequest(), &status);
  return status;
}

}  // namespace shardcast::bench

#endif  // SHARDCAST_BENCH_SERVER_PROBE_H_

// The rules of a training run (see run_rules.h).
#include "client/reconnect/run_rules.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "absl/strings/str_format.h"

namespace shardcast::client {

std::string NewRunJobId() {
  char host[64] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "host");
  std::random_device entropy;
  return absl::StrFormat("run-%s-%d-%08x", host, ::getpid(), entropy());
}

ResumePosition ResumeAt(const SavedPosition& saved, int64_t world_size, int64_t batch_size,
                        int64_t num_samples) {
  ResumePosition at;
  at.epoch = saved.epoch;
  if (saved.world_size == world_size && saved.batch_size == batch_size) {
    at.batch = saved.next_batch;
    at.sample_offset = saved.sample_offset;
    return at;
  }
  // A checkpoint at an epoch boundary needs no offset at all.
  at.sample_offset = std::min(saved.SamplesConsumed(), num_samples);
  at.elastic = at.sample_offset > 0;
  return at;
}

}  // namespace shardcast::client

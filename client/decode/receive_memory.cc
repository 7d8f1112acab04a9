// glibc malloc tuning for batch receive buffers (see receive_memory.h).
#include "client/decode/receive_memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace shardcast::client {

bool KeepReceiveBuffersWarm() {
#if defined(__GLIBC__)
  // A function-local static: thread-safe and once per process. Setting M_MMAP_THRESHOLD
  // also stops glibc from adjusting both thresholds on its own.
  static const bool applied = mallopt(M_MMAP_THRESHOLD, kHeapBlockLimitBytes) == 1 &&
                              mallopt(M_TRIM_THRESHOLD, kHeapTrimThresholdBytes) == 1;
  return applied;
#else
  return false;
#endif
}

}  // namespace shardcast::client

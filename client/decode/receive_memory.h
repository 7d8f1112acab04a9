// Keeps the memory that received batches arrive in warm between batches.
//
// gRPC reads a batch (B*3*C*C bytes, ~5 MB) into slices it mallocs, up to a few MB each,
// and frees them once the batch is consumed. With glibc's default tuning those blocks
// are mmap'ed, or carved from the top of a heap that is trimmed again as soon as more
// than a few MB at its top are free, so every batch lands in freshly faulted pages. On
// the VMs this project runs on a page fault costs as much as copying the page several
// times: the receive spent half its CPU faulting (docs/BENCHMARKS.md, "Receive buffers
// kept warm"). Raising glibc's mmap and trim thresholds keeps freed blocks in the heap,
// where the next batch reuses them.
#ifndef SHARDCAST_CLIENT_DECODE_RECEIVE_MEMORY_H_
#define SHARDCAST_CLIENT_DECODE_RECEIVE_MEMORY_H_

#include <cstddef>

namespace shardcast::client {

// Blocks below this are carved from malloc's heaps, never mmap'ed on their own (glibc's
// largest allowed mmap threshold on 64-bit).
inline constexpr size_t kHeapBlockLimitBytes = size_t{32} << 20;
// A heap gives memory back to the system only when this much at its top is free: a
// few batches' worth, so a steady stream reuses what the last batches freed, while a
// process that once held much more still returns the excess.
inline constexpr size_t kHeapTrimThresholdBytes = size_t{128} << 20;

// Sets glibc malloc's mmap and trim thresholds to the values above, once per process
// (later calls do nothing). A process-wide setting: every client that receives batches
// calls it (WireBatchStub's constructor does), so a program that receives batches any
// other way should call it itself. Without glibc (another libc, or an allocator such as
// jemalloc preloaded, which ignores glibc's mallopt) it changes nothing. Returns whether
// glibc took both settings.
bool KeepReceiveBuffersWarm();

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_DECODE_RECEIVE_MEMORY_H_

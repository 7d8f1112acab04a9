// A client's bound on the memory its image decodes take (encoded delivery): what the
// server's --max-decode-memory is to its decode pool, for the threads of one client.
#ifndef SHARDCAST_CLIENT_DECODE_CLIENT_DECODE_MEMORY_H_
#define SHARDCAST_CLIENT_DECODE_CLIENT_DECODE_MEMORY_H_

#include <cstdint>
#include <string>

#include "common/memory/memory_budget.h"

namespace shardcast::client {

// The decode buffers of every thread together held within `limit` (> 0) bytes: a
// MemoryBudget, admitted from each image's header before its buffers are allocated
// (DecodeWithCrop asks). Its refusal of an image over the whole limit,
// RESOURCE_EXHAUSTED, names `limit_name` (what the user set: "max_decode_memory").
MemoryBudget::Options ClientDecodeMemoryOptions(int64_t limit, std::string limit_name);

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_DECODE_CLIENT_DECODE_MEMORY_H_

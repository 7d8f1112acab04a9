// The server-wide decode memory budget (--max-decode-memory): bytes of decode buffers in
// flight across all decode threads, admitted from each image's header before its buffers
// are allocated. It is a MemoryBudget (common/memory); this names its refusal.
#ifndef SHARDCAST_SERVER_ASSEMBLY_DECODE_BUDGET_H_
#define SHARDCAST_SERVER_ASSEMBLY_DECODE_BUDGET_H_

#include <cstdint>

#include "common/memory/memory_budget.h"

namespace shardcast::server {

// The budget of `limit_bytes` (> 0) whose refusal of an image alone over it names
// --max-decode-memory (the caller substitutes that image).
MemoryBudget::Options DecodeBudgetOptions(int64_t limit_bytes);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_ASSEMBLY_DECODE_BUDGET_H_

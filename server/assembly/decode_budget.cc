// The server's decode memory budget, named for its flag (see decode_budget.h).
#include "server/assembly/decode_budget.h"

#include "absl/strings/str_cat.h"
#include "common/flags/flags.h"

namespace shardcast::server {

MemoryBudget::Options DecodeBudgetOptions(int64_t limit_bytes) {
  MemoryBudget::Options options;
  options.limit = limit_bytes;
  options.refusal = [limit_bytes](int64_t bytes) {
    return absl::StrCat("decoding needs ", FormatFlagSize(bytes),
                        ", more than the whole decode budget (--max-decode-memory ",
                        FormatFlagSize(limit_bytes), ")");
  };
  return options;
}

}  // namespace shardcast::server

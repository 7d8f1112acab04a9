// A client's decode memory, named for its setting (see client_decode_memory.h).
#include "client/decode/client_decode_memory.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "common/flags/flags.h"

namespace shardcast::client {

MemoryBudget::Options ClientDecodeMemoryOptions(int64_t limit, std::string limit_name) {
  MemoryBudget::Options options;
  options.limit = limit;
  options.refusal = [limit, limit_name = std::move(limit_name)](int64_t bytes) {
    return absl::StrFormat("decoding needs %s, more than %s (%s)", FormatFlagSize(bytes),
                           limit_name, FormatFlagSize(limit));
  };
  return options;
}

}  // namespace shardcast::client

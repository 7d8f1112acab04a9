// Splitting HOST:PORT (see host_port.h).
#include "server/host_port.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/log.h"

namespace shardcast::server {

absl::StatusOr<HostPort> SplitHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected HOST:PORT, got '", LogSafe(address), "'"));
  }
  absl::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "*") host = "";
  return HostPort{std::string(host), std::string(address.substr(colon + 1))};
}

}  // namespace shardcast::server

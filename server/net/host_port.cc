// Splitting HOST:PORT (see host_port.h).
#include "server/net/host_port.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/base/log.h"

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
  const absl::string_view port = address.substr(colon + 1);
  int number = 0;
  if (port.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(port, &number) || number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected HOST:PORT with a port from 0 to 65535, got '", LogSafe(address), "'"));
  }
  return HostPort{std::string(host), std::string(port)};
}

}  // namespace shardcast::server

// HOST:PORT as the server's listen flags take it (--listen, --metrics-listen).
#ifndef SHARDCAST_SERVER_NET_HOST_PORT_H_
#define SHARDCAST_SERVER_NET_HOST_PORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardcast::server {

struct HostPort {
  std::string host;  // brackets of an IPv6 host removed; empty (or "*" given) = every address
  std::string port;
};

// HOST:PORT or [V6]:PORT -> its parts. INVALID_ARGUMENT (the address log-safe) when
// there is no ':', or the port is not a number from 0 to 65535 (the resolver would take
// 99999 as 34463, modulo 2^16: a server on a port nobody asked for).
absl::StatusOr<HostPort> SplitHostPort(absl::string_view address);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_NET_HOST_PORT_H_

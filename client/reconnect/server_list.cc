// Replica lists and their order per rank (see server_list.h).
#include "client/reconnect/server_list.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shardcast::client {
namespace {

struct HostAndPort {
  std::string host;  // without an IPv6 address's brackets
  std::string port;
};

// "dns:///" is gRPC's explicit form of a plain name; other schemes (unix:, ipv4:,
// xds:...) are targets this module leaves to gRPC.
std::optional<HostAndPort> SplitTarget(absl::string_view target) {
  absl::ConsumePrefix(&target, "dns:///");
  if (absl::StrContains(target, "://") || absl::StartsWith(target, "unix")) return std::nullopt;
  const size_t colon = target.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == target.size()) return std::nullopt;
  absl::string_view host = target.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (absl::StrContains(host, ':')) {
    return std::nullopt;  // an IPv6 address without brackets: not HOST:PORT
  }
  return HostAndPort{std::string(host), std::string(target.substr(colon + 1))};
}

bool IsIpLiteral(const std::string& host) {
  in6_addr v6{};
  in_addr v4{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

// The numeric form of a socket address ("10.0.0.5", "fd00::5").
std::optional<std::string> NumericHost(const sockaddr* address) {
  if (address == nullptr) return std::nullopt;
  const socklen_t length = address->sa_family == AF_INET6  ? sizeof(sockaddr_in6)
                           : address->sa_family == AF_INET ? sizeof(sockaddr_in)
                                                           : 0;
  if (length == 0) return std::nullopt;
  char host[NI_MAXHOST];
  if (::getnameinfo(address, length, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) {
    return std::nullopt;
  }
  return std::string(host);
}

// The addresses `host` resolves to, in the resolver's order, without duplicates.
std::vector<std::string> Resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* results = nullptr;
  std::vector<std::string> addresses;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &results) != 0) return addresses;
  for (const addrinfo* ai = results; ai != nullptr; ai = ai->ai_next) {
    std::optional<std::string> numeric = NumericHost(ai->ai_addr);
    if (numeric.has_value() &&
        std::find(addresses.begin(), addresses.end(), *numeric) == addresses.end()) {
      addresses.push_back(*numeric);
    }
  }
  ::freeaddrinfo(results);
  return addresses;
}

std::string JoinHostPort(const std::string& host, const std::string& port) {
  return absl::StrContains(host, ':') ? absl::StrCat("[", host, "]:", port)
                                      : absl::StrCat(host, ":", port);
}

bool IsLoopback(const std::string& host) {
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] == 127;
  }
  return false;
}

// The addresses of this host's interfaces (numeric; IPv6 link-local ones with their
// "%interface" suffix, as getnameinfo writes them).
absl::flat_hash_set<std::string> InterfaceAddresses() {
  absl::flat_hash_set<std::string> addresses;
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) != 0) return addresses;
  for (const ifaddrs* i = interfaces; i != nullptr; i = i->ifa_next) {
    if (std::optional<std::string> numeric = NumericHost(i->ifa_addr)) {
      addresses.insert(*numeric);
    }
  }
  ::freeifaddrs(interfaces);
  return addresses;
}

// The default port of shardcast-server's --listen, for the hint of an address without one.
constexpr absl::string_view kDefaultPort = "50051";

absl::Status BadTarget(absl::string_view entry, absl::string_view why, absl::string_view hint) {
  return absl::InvalidArgumentError(
      absl::StrCat("server address '", entry, "': ", why, "; write ", hint,
                   " (or unix:PATH for a local socket; several replicas comma-separated)"));
}

}  // namespace

absl::Status CheckServerTarget(absl::string_view entry) {
  // gRPC reads a target as a C string: a NUL would cut it short and name another host.
  if (absl::c_any_of(entry, [](char c) { return absl::ascii_iscntrl(c) || c == ' '; })) {
    return BadTarget(absl::CHexEscape(entry), "a control character or a space in it", "HOST:PORT");
  }
  for (absl::string_view local : {"unix:", "unix-abstract:"}) {
    if (absl::StartsWith(entry, local)) {
      absl::string_view path = entry.substr(local.size());
      absl::ConsumePrefix(&path, "//");
      if (path.empty()) return BadTarget(entry, "no socket path", "unix:/path/to/socket");
      return absl::OkStatus();
    }
  }
  // gRPC's own target syntaxes beyond the DNS one are passed on as written.
  for (absl::string_view scheme : {"ipv4:", "ipv6:", "xds:"}) {
    if (absl::StartsWith(entry, scheme)) return absl::OkStatus();
  }
  absl::string_view address = entry;
  if (absl::ConsumePrefix(&address, "dns:")) {
    // dns:HOST:PORT, dns:///HOST:PORT or dns://RESOLVER/HOST:PORT
    if (absl::ConsumePrefix(&address, "//")) {
      const size_t slash = address.find('/');
      address = slash == absl::string_view::npos ? absl::string_view() : address.substr(slash + 1);
    }
  } else if (const size_t scheme_end = address.find("://"); scheme_end != absl::string_view::npos) {
    const absl::string_view rest = address.substr(scheme_end + 3);
    return BadTarget(
        entry, absl::StrCat("a gRPC address has no ", address.substr(0, scheme_end), ":// scheme"),
        absl::StrCat("HOST:PORT, e.g. '", absl::StripSuffix(rest, "/"), "'"));
  }
  if (address.empty()) return BadTarget(entry, "no host", "HOST:PORT");
  const size_t colon = address.rfind(':');
  const bool bracketed = absl::StartsWith(address, "[");
  if (colon == absl::string_view::npos ||
      (bracketed && !absl::EndsWith(address.substr(0, colon), "]"))) {
    return BadTarget(entry, "no port",
                     absl::StrCat("HOST:PORT, e.g. '", address, ":", kDefaultPort,
                                  "' (shardcast-server's default port)"));
  }
  const absl::string_view host = address.substr(0, colon);
  const absl::string_view port = address.substr(colon + 1);
  if (!bracketed && absl::StrContains(host, ':')) {
    return BadTarget(entry, "an IPv6 address needs brackets", "[ADDRESS]:PORT, e.g. '[::1]:50051'");
  }
  if (host.empty() || host == "[]") return BadTarget(entry, "no host", "HOST:PORT");
  int port_number = 0;
  if (port.empty() || !absl::c_all_of(port, absl::ascii_isdigit) || port.size() > 5 ||
      !absl::SimpleAtoi(port, &port_number) || port_number < 1 || port_number > 65535) {
    return BadTarget(entry, absl::StrCat("port '", port, "' is not a number from 1 to 65535"),
                     "HOST:PORT");
  }
  return absl::OkStatus();
}

absl::Status CheckServerList(absl::string_view servers) {
  for (absl::string_view entry : absl::StrSplit(servers, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server list '", servers, "': an empty entry (write HOST:PORT[,HOST:PORT...])"));
    }
    if (absl::Status valid = CheckServerTarget(entry); !valid.ok()) return valid;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ExpandServerList(absl::string_view servers) {
  if (absl::Status valid = CheckServerList(servers); !valid.ok()) return valid;
  std::vector<std::string> targets;
  auto add = [&targets](std::string target) {
    if (std::find(targets.begin(), targets.end(), target) == targets.end()) {
      targets.push_back(std::move(target));
    }
  };
  for (absl::string_view entry : absl::StrSplit(servers, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    std::optional<HostAndPort> parts = SplitTarget(entry);
    if (!parts.has_value() || IsIpLiteral(parts->host)) {
      add(std::string(entry));
      continue;
    }
    const std::vector<std::string> addresses = Resolve(parts->host);
    if (addresses.size() < 2) {
      add(std::string(entry));  // gRPC resolves it again at every reconnect
      continue;
    }
    for (const std::string& address : addresses) add(JoinHostPort(address, parts->port));
  }
  return targets;
}

bool IsLocalTarget(absl::string_view target) {
  if (absl::StartsWith(target, "unix:") || absl::StartsWith(target, "unix-abstract:")) {
    return true;
  }
  std::optional<HostAndPort> parts = SplitTarget(target);
  if (!parts.has_value()) return false;
  const std::string host = absl::AsciiStrToLower(parts->host);
  if (host == "localhost") return true;
  if (!IsIpLiteral(host)) {
    char name[256] = {};
    return ::gethostname(name, sizeof(name) - 1) == 0 && host == absl::AsciiStrToLower(name);
  }
  return IsLoopback(host) || InterfaceAddresses().contains(host);
}

std::vector<std::string> OrderForRank(const std::vector<std::string>& targets, int rank) {
  std::vector<std::string> local, remote;
  for (const std::string& target : targets) {
    (IsLocalTarget(target) ? local : remote).push_back(target);
  }
  auto rotate = [rank](std::vector<std::string>* group) {
    if (group->empty()) return;
    const size_t start = static_cast<size_t>(std::max(rank, 0)) % group->size();
    std::rotate(group->begin(), group->begin() + static_cast<std::ptrdiff_t>(start), group->end());
  };
  rotate(&local);
  rotate(&remote);
  local.insert(local.end(), remote.begin(), remote.end());
  return local;
}

}  // namespace shardcast::client

// Listening on a Unix domain socket (--listen unix:PATH): for trainers on the server's
// own host. gRPC binds the path itself; what it leaves to us is what an operator
// expects of a socket file: a clear refusal when the path is taken by a live server or
// by something that is not a socket (gRPC would unlink a live server's socket and
// take it over), a stale socket of a crashed server replaced, and access given by file
// permissions: the socket is made 0660, so its owner and group may connect (a Unix
// socket needs write permission to connect), and nobody else.
#ifndef SHARDCAST_SERVER_NET_UNIX_SOCKET_H_
#define SHARDCAST_SERVER_NET_UNIX_SOCKET_H_

#include <sys/stat.h>
#include <sys/un.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardcast::server {

// The longest path a socket address holds (sun_path less its terminating NUL).
inline constexpr size_t kMaxUnixSocketPathBytes = sizeof(sockaddr_un::sun_path) - 1;

// The mode the socket file gets once the server listens on it.
inline constexpr mode_t kUnixSocketMode = 0660;

// The file path of a gRPC unix address ("unix:PATH", "unix:///ABSOLUTE"); nullopt for
// any other address (host:port, "unix-abstract:", ...).
std::optional<std::string> UnixSocketPath(absl::string_view listen_address);

// Before binding `path`: OK when nothing is there or a stale socket was removed;
// FAILED_PRECONDITION when a server accepts connections on it or it is not a socket;
// INVALID_ARGUMENT when the path is empty or longer than a socket address holds.
absl::Status PrepareUnixSocket(const std::string& path);

// After binding: the socket file gets kUnixSocketMode.
absl::Status RestrictUnixSocket(const std::string& path);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_NET_UNIX_SOCKET_H_

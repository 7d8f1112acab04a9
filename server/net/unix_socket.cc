// Unix domain socket files for --listen unix:PATH (see unix_socket.h).
#include "server/net/unix_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/base/log.h"

namespace shardcast::server {

std::optional<std::string> UnixSocketPath(absl::string_view listen_address) {
  if (absl::ConsumePrefix(&listen_address, "unix://")) return std::string(listen_address);
  if (absl::ConsumePrefix(&listen_address, "unix:")) return std::string(listen_address);
  return std::nullopt;
}

namespace {

// A path for a message: escaped as every untrusted string is (LogSafe), but whole up
// to the longest path a socket takes, so that an operator sees which file is meant.
std::string Quoted(const std::string& path) { return LogSafe(path, kMaxUnixSocketPathBytes); }

// What a connect() to the socket at `path` says of it. Only ECONNREFUSED proves that
// nobody listens (the socket of a server that died); any other failure (EACCES: a
// socket we may not use, EAGAIN: a live server's full backlog) may hide a live
// server, whose socket must not be unlinked.
enum class SocketState { kLive, kStale, kUnknown };

SocketState ProbeSocket(const std::string& path, int* error) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = errno;
    return SocketState::kUnknown;
  }
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  const int connected = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  *error = errno;
  close(fd);
  if (connected == 0) return SocketState::kLive;
  return *error == ECONNREFUSED ? SocketState::kStale : SocketState::kUnknown;
}

}  // namespace

absl::Status PrepareUnixSocket(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("unix: address without a path");
  if (path.size() > kMaxUnixSocketPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat("unix socket path '", Quoted(path), "' is ",
                                                   path.size(), " bytes; at most ",
                                                   kMaxUnixSocketPathBytes, " fit"));
  }
  struct stat info;
  if (lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot inspect '", Quoted(path), "': ", std::strerror(errno)));
  }
  if (!S_ISSOCK(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", Quoted(path), "' exists and is not a socket; not replacing it"));
  }
  int error = 0;
  switch (ProbeSocket(path, &error)) {
    case SocketState::kLive:
      return absl::FailedPreconditionError(
          absl::StrCat("another server is listening on '", Quoted(path), "'"));
    case SocketState::kUnknown:
      return absl::FailedPreconditionError(
          absl::StrCat("cannot tell whether a server listens on '", Quoted(path),
                       "' (connect: ", std::strerror(error), "); not replacing it"));
    case SocketState::kStale:
      break;
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::FailedPreconditionError(absl::StrCat("cannot remove the stale socket '",
                                                      Quoted(path), "': ", std::strerror(errno)));
  }
  LogInfo("server",
          absl::StrCat("removed the stale socket '", Quoted(path), "' (no server on it)"));
  return absl::OkStatus();
}

absl::Status RestrictUnixSocket(const std::string& path) {
  if (chmod(path.c_str(), kUnixSocketMode) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot chmod the socket '", Quoted(path), "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace shardcast::server

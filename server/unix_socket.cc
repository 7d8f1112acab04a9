// Unix domain socket files for --listen unix:PATH (see unix_socket.h).
#include "server/unix_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "server/log.h"

namespace shardcast::server {

std::optional<std::string> UnixSocketPath(absl::string_view listen_address) {
  if (absl::ConsumePrefix(&listen_address, "unix://")) return std::string(listen_address);
  if (absl::ConsumePrefix(&listen_address, "unix:")) return std::string(listen_address);
  return std::nullopt;
}

namespace {

// Whether a server accepts connections on the socket at `path`.
bool SomeoneListens(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  const bool connected = connect(fd, reinterpret_cast<const sockaddr*>(&address),
                                 sizeof(address)) == 0;
  close(fd);
  return connected;
}

}  // namespace

absl::Status PrepareUnixSocket(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("unix: address without a path");
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("unix socket path '", path, "' is ",
                                                   path.size(), " bytes; at most ",
                                                   sizeof(sockaddr_un::sun_path) - 1, " fit"));
  }
  struct stat info;
  if (lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot inspect '", path, "': ", std::strerror(errno)));
  }
  if (!S_ISSOCK(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' exists and is not a socket; not replacing it"));
  }
  if (SomeoneListens(path)) {
    return absl::FailedPreconditionError(
        absl::StrCat("another server is listening on '", path, "'"));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot remove the stale socket '", path, "': ", std::strerror(errno)));
  }
  LogInfo("server", absl::StrCat("removed the stale socket '", path, "' (no server on it)"));
  return absl::OkStatus();
}

absl::Status RestrictUnixSocket(const std::string& path) {
  if (chmod(path.c_str(), kUnixSocketMode) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot chmod the socket '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace shardcast::server

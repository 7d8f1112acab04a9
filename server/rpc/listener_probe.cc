// The listener self-check (see listener_probe.h).
#include "server/rpc/listener_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/base/log.h"
#include "server/net/host_port.h"
#include "server/net/unix_socket.h"

namespace shardcast::server {

namespace {

// An unspecified address (what "listen on every interface" binds) becomes loopback.
void UnspecifiedToLoopback(sockaddr_storage* address) {
  if (address->ss_family == AF_INET) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(address);
    if (v4->sin_addr.s_addr == htonl(INADDR_ANY)) v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else if (address->ss_family == AF_INET6) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(address);
    if (IN6_IS_ADDR_UNSPECIFIED(&v6->sin6_addr)) v6->sin6_addr = in6addr_loopback;
  }
}

// Closes a descriptor when it goes out of scope.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<ProbeTarget> ProbeTargetFor(const std::string& listen_address, int port) {
  ProbeTarget target;
  target.text = listen_address;
  if (const std::optional<std::string> path = UnixSocketPath(listen_address)) {
    auto* un = reinterpret_cast<sockaddr_un*>(&target.address);
    if (path->size() >= sizeof(un->sun_path)) {
      return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", LogSafe(*path)));
    }
    un->sun_family = AF_UNIX;
    std::memcpy(un->sun_path, path->data(), path->size());
    target.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path->size() + 1);
    return target;
  }
  absl::StatusOr<HostPort> host_port = SplitHostPort(listen_address);
  if (!host_port.ok()) return host_port.status();
  const std::string& host = host_port->host;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  const int resolved =
      ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (resolved != 0 || found == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", LogSafe(host), "': ", gai_strerror(resolved)));
  }
  std::memcpy(&target.address, found->ai_addr, found->ai_addrlen);
  target.length = found->ai_addrlen;
  ::freeaddrinfo(found);
  UnspecifiedToLoopback(&target.address);
  char text[INET6_ADDRSTRLEN] = "";
  const void* raw =
      target.address.ss_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&target.address)->sin6_addr)
          : &reinterpret_cast<sockaddr_in*>(&target.address)->sin_addr;
  ::inet_ntop(target.address.ss_family, raw, text, sizeof(text));
  target.text = target.address.ss_family == AF_INET6 ? absl::StrCat("[", text, "]:", port)
                                                     : absl::StrCat(text, ":", port);
  return target;
}

ListenerProbe::ListenerProbe(ProbeTarget target, std::shared_ptr<AcceptWatch> watch,
                             absl::Duration interval,
                             std::function<void(const absl::Status&)> on_change)
    : target_(std::move(target)),
      watch_(std::move(watch)),
      interval_(interval),
      on_change_(std::move(on_change)) {}

ListenerProbe::~ListenerProbe() { Stop(); }

void ListenerProbe::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void ListenerProbe::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status ListenerProbe::ProbeOnce(absl::Duration timeout) {
  // Real time: the deadline bounds a real connect and poll, which no fake clock moves.
  const absl::Time deadline = absl::Now() + timeout;
  ScopedFd fd(::socket(target_.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  const int64_t seen = watch_->accepted();
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&target_.address), target_.length) !=
          0 &&
      errno != EINPROGRESS) {
    return absl::UnavailableError(absl::StrCat("connect: ", std::strerror(errno)));
  }
  // A connect completes once the kernel queued it, accepted or not: only AcceptWatch
  // tells whether the listener took it.
  pollfd writable = {fd.get(), POLLOUT, 0};
  const int ready =
      ::poll(&writable, 1, static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now())));
  int error = 0;
  socklen_t length = sizeof(error);
  ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
  if (ready <= 0) return absl::DeadlineExceededError("connect timed out (listen queue full?)");
  if (error != 0) return absl::UnavailableError(absl::StrCat("connect: ", std::strerror(error)));
  if (!watch_->AwaitAcceptedBeyond(seen, deadline - absl::Now())) {
    return absl::DeadlineExceededError(
        absl::StrFormat("connected, but not accepted within %s", absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

void ListenerProbe::Loop() {
  int failures = 0;
  bool accepting = true;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval_)) return;
    }
    const absl::Status probe = ProbeOnce(std::min(interval_, absl::Seconds(5)));
    failures = probe.ok() ? 0 : failures + 1;
    if (!probe.ok() && accepting) {
      LogWarning("server", absl::StrCat("listener probe of ", target_.text, " failed (", failures,
                                        " in a row): ", probe.message()));
    }
    if (accepting && failures >= kFailuresBeforeDown) {
      accepting = false;
      LogError("server", absl::StrCat("the listener on ", target_.text,
                                      " accepts no connections (gRPC stops a listener after a "
                                      "failed accept, e.g. out of descriptors): health "
                                      "NOT_SERVING"));
      on_change_(absl::UnavailableError(
          absl::StrCat("the listener on ", target_.text, " accepts no connections: ", failures,
                       " probes in a row failed, the last: ", probe.message())));
    } else if (!accepting && probe.ok()) {
      accepting = true;
      LogInfo("server", absl::StrCat("the listener on ", target_.text, " accepts again"));
      on_change_(absl::OkStatus());
    }
  }
}

}  // namespace shardcast::server

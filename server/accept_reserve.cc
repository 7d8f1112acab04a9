#include "server/accept_reserve.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "absl/strings/str_format.h"
#include "server/base/log.h"

namespace {

using Accept4Fn = int (*)(int, sockaddr*, socklen_t*, int);

// -1 until ReserveAcceptDescriptor, and while one thread has it freed.
std::atomic<int> spare_fd{-1};
std::atomic<bool> installed{false};
std::atomic<int64_t> refused{0};
std::atomic<int64_t> last_log_ns{0};

Accept4Fn LibcAccept4() {
  static const Accept4Fn libc = reinterpret_cast<Accept4Fn>(dlsym(RTLD_NEXT, "accept4"));
  return libc;
}

int64_t MonotonicNs() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

void LogRefusals(int64_t count) {
  const int64_t now = MonotonicNs();
  int64_t last = last_log_ns.load();
  if (now - last < 1'000'000'000 || !last_log_ns.compare_exchange_strong(last, now)) return;
  shardcast::server::LogWarning(
      "server", absl::StrFormat("refusing connections: out of descriptors at accept, each "
                                "taken with the spare and closed; the listener is kept "
                                "(%d refused so far; raise the descriptor limit or lower "
                                "--max-connections)",
                                count));
}

// Takes and closes every connection queued on `listener` using the spare descriptor's
// number; returns how many. The spare is ours while this runs (spare_fd is -1).
int64_t RefuseQueued(int listener, int spare) {
  ::close(spare);
  int64_t count = 0;
  for (;;) {
    const int fd = LibcAccept4()(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      break;  // EAGAIN: the queue is empty; EMFILE: another thread took the number
    }
    ::close(fd);
    ++count;
  }
  return count;
}

}  // namespace

namespace shardcast::server {

bool ReserveAcceptDescriptor() {
  if (LibcAccept4() == nullptr) return false;
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  spare_fd.store(fd);
  installed.store(true);
  return true;
}

int64_t ConnectionsRefusedOutOfDescriptors() { return refused.load(); }

}  // namespace shardcast::server

// The executable's accept4, which gRPC's calls bind to: libc's, but for running out of
// descriptors (above).
extern "C" int accept4(int listener, sockaddr* address, socklen_t* length, int flags) {
  const int fd = LibcAccept4()(listener, address, length, flags);
  if (fd >= 0 || (errno != EMFILE && errno != ENFILE) || !installed.load()) return fd;
  const int spare = spare_fd.exchange(-1);
  if (spare >= 0) {
    const int64_t count = RefuseQueued(listener, spare);
    // Taken back at once; if another thread took the number meanwhile, the next
    // shortage finds no spare and only answers EAGAIN, until this open succeeds again.
    spare_fd.store(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (count > 0) LogRefusals(refused.fetch_add(count) + count);
  }
  // "Nothing to accept now": gRPC keeps the port armed and accepts at the next arrival.
  errno = EAGAIN;
  return -1;
}

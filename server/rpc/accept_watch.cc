// Counting and limiting accepted connections (see accept_watch.h).
#include "server/rpc/accept_watch.h"

#include <arpa/inet.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/support/channel_arguments.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/base/log.h"
#include "server/rpc/grpc_socket_mutator_abi.h"

namespace shardcast::server {

namespace {

// gRPC's mutator object: the base struct first, so gRPC's grpc_socket_mutator* is ours.
struct WatchMutator {
  grpc_socket_mutator base;
  std::shared_ptr<AcceptWatch> watch;
};

bool MutateFd(const grpc_mutate_socket_info* info, grpc_socket_mutator* mutator) {
  AcceptWatch& watch = *reinterpret_cast<WatchMutator*>(mutator)->watch;
  if (info->usage == GRPC_FD_SERVER_CONNECTION_USAGE) watch.OnAccepted(info->fd);
  if (info->usage == GRPC_FD_SERVER_LISTENER_USAGE) watch.OnListening(info->fd);
  return true;  // false would close gRPC's listener (see grpc_socket_mutator_abi.h)
}

bool MutateFdLegacy(int /*fd*/, grpc_socket_mutator* /*mutator*/) { return true; }

int CompareMutators(grpc_socket_mutator* a, grpc_socket_mutator* b) {
  return a < b ? -1 : (a > b ? 1 : 0);
}

void DestroyMutator(grpc_socket_mutator* mutator) {
  delete reinterpret_cast<WatchMutator*>(mutator);
}

constexpr grpc_socket_mutator_vtable kWatchVtable = {MutateFdLegacy, CompareMutators,
                                                     DestroyMutator, MutateFd};

class WatchOption final : public grpc::ServerBuilderOption {
 public:
  explicit WatchOption(std::shared_ptr<AcceptWatch> watch) : watch_(std::move(watch)) {}
  void UpdateArguments(grpc::ChannelArguments* args) override {
    auto* mutator = new WatchMutator{{}, watch_};
    grpc_socket_mutator_init(&mutator->base, &kWatchVtable);
    args->SetSocketMutator(&mutator->base);  // takes our one reference
  }
  void UpdatePlugins(
      std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* /*plugins*/) override {}

 private:
  std::shared_ptr<AcceptWatch> watch_;
};

// The socket's inode; 0 when `fd` is not an open socket.
ino_t SocketInode(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  return st.st_ino;
}

constexpr absl::Duration kRefusalLogInterval = absl::Seconds(10);

}  // namespace

std::string PeerOf(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "unknown";
  char text[INET6_ADDRSTRLEN] = "";
  if (address.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&address)->sin_addr, text, sizeof(text));
    return absl::StrCat("ipv4:", text);
  }
  if (address.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<sockaddr_in6*>(&address)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {
      ::inet_ntop(AF_INET, &v6.s6_addr[12], text, sizeof(text));
      return absl::StrCat("ipv4:", text);
    }
    ::inet_ntop(AF_INET6, &v6, text, sizeof(text));
    return absl::StrCat("ipv6:", text);
  }
  if (address.ss_family == AF_UNIX) return "unix";
  return "unknown";
}

AcceptWatch::AcceptWatch(int64_t max_connections, int64_t max_per_peer, ServerStats* stats,
                         const Clock* clock)
    : max_connections_(max_connections),
      max_per_peer_(max_per_peer),
      stats_(stats),
      clock_(clock) {}

std::unique_ptr<grpc::ServerBuilderOption> AcceptWatch::BuilderOption() {
  return std::make_unique<WatchOption>(shared_from_this());
}

std::string AcceptWatch::RefusalReason(const std::string& peer) {
  auto of_peer = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = per_peer_.find(peer);
    return it == per_peer_.end() ? int64_t{0} : it->second;
  };
  auto over = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (max_connections_ > 0 && static_cast<int64_t>(open_.size()) >= max_connections_) ||
           (max_per_peer_ > 0 && of_peer() >= max_per_peer_);
  };
  if (over()) DropClosed();  // only then: it stats every counted descriptor
  if (max_connections_ > 0 && static_cast<int64_t>(open_.size()) >= max_connections_) {
    return absl::StrFormat("%d open, --max-connections %d", open_.size(), max_connections_);
  }
  if (max_per_peer_ > 0 && of_peer() >= max_per_peer_) {
    return absl::StrFormat("%d open from %s, --max-connections-per-peer %d", of_peer(), peer,
                           max_per_peer_);
  }
  return "";
}

void AcceptWatch::OnAccepted(int fd) {
  std::string peer = PeerOf(fd);
  absl::MutexLock lock(&mu_);
  ++accepted_;
  if (const std::string reason = RefusalReason(peer); !reason.empty()) {
    // Shut down, not closed: the descriptor stays gRPC's, which closes it when its
    // handshake reads the end of the connection a moment later.
    ::shutdown(fd, SHUT_RDWR);
    stats_->connections_refused.fetch_add(1);
    const absl::Time now = clock_->Now();
    if (now - last_refusal_log_ >= kRefusalLogInterval) {
      last_refusal_log_ = now;
      LogWarning("server", absl::StrFormat("refusing connections: %s (%d refused so far)", reason,
                                           stats_->connections_refused.load()));
    }
    return;
  }
  // A connection counted under this number before was closed since (the kernel hands
  // out the lowest free number): it stops counting for its peer.
  if (auto before = open_.find(fd); before != open_.end()) Uncount(before->second.peer);
  ++per_peer_[peer];
  open_[fd] = Counted{SocketInode(fd), std::move(peer)};
  stats_->connections_open.store(static_cast<int64_t>(open_.size()));
}

void AcceptWatch::Uncount(const std::string& peer) {
  auto it = per_peer_.find(peer);
  if (it != per_peer_.end() && --it->second == 0) per_peer_.erase(it);
}

void AcceptWatch::DropClosed() {
  absl::erase_if(open_, [this](const std::pair<const int, Counted>& connection) {
    if (SocketInode(connection.first) == connection.second.inode) return false;
    Uncount(connection.second.peer);
    return true;
  });
  stats_->connections_open.store(static_cast<int64_t>(open_.size()));
}

void AcceptWatch::OnListening(int fd) {
  absl::MutexLock lock(&mu_);
  listeners_.push_back(fd);
}

absl::Status AcceptWatch::SetAcceptBacklog(int backlog) {
  absl::MutexLock lock(&mu_);
  for (int fd : listeners_) {
    if (::listen(fd, backlog) != 0) {
      return absl::InternalError(absl::StrCat("listen(", fd, ", ", backlog,
                                              ") on gRPC's listener: ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

int64_t AcceptWatch::listeners() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(listeners_.size());
}

int64_t AcceptWatch::CountOpen() {
  absl::MutexLock lock(&mu_);
  DropClosed();
  return static_cast<int64_t>(open_.size());
}

int64_t AcceptWatch::accepted() const {
  absl::MutexLock lock(&mu_);
  return accepted_;
}

bool AcceptWatch::AwaitAcceptedBeyond(int64_t seen, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto beyond = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return accepted_ > seen; };
  return mu_.AwaitWithTimeout(absl::Condition(&beyond), timeout);
}

}  // namespace shardcast::server

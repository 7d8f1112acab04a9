// Counting and limiting accepted connections (see accept_watch.h).
#include "server/accept_watch.h"

#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/support/channel_arguments.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/grpc_socket_mutator_abi.h"
#include "server/log.h"

namespace shardcast::server {

namespace {

// gRPC's mutator object: the base struct first, so gRPC's grpc_socket_mutator* is ours.
struct WatchMutator {
  grpc_socket_mutator base;
  std::shared_ptr<AcceptWatch> watch;
};

bool MutateFd(const grpc_mutate_socket_info* info, grpc_socket_mutator* mutator) {
  if (info->usage == GRPC_FD_SERVER_CONNECTION_USAGE) {
    reinterpret_cast<WatchMutator*>(mutator)->watch->OnAccepted(info->fd);
  }
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

AcceptWatch::AcceptWatch(int64_t max_connections, ServerStats* stats)
    : max_connections_(max_connections), stats_(stats) {}

std::unique_ptr<grpc::ServerBuilderOption> AcceptWatch::BuilderOption() {
  return std::make_unique<WatchOption>(shared_from_this());
}

void AcceptWatch::OnAccepted(int fd) {
  absl::MutexLock lock(&mu_);
  ++accepted_;
  if (max_connections_ > 0 && static_cast<int64_t>(open_.size()) >= max_connections_) {
    DropClosed();
  }
  if (max_connections_ > 0 && static_cast<int64_t>(open_.size()) >= max_connections_) {
    // Shut down, not closed: the descriptor stays gRPC's, which closes it when its
    // handshake reads the end of the connection a moment later.
    ::shutdown(fd, SHUT_RDWR);
    stats_->connections_refused.fetch_add(1);
    const absl::Time now = absl::Now();
    if (now - last_refusal_log_ >= kRefusalLogInterval) {
      last_refusal_log_ = now;
      LogWarning("server", absl::StrFormat("refusing connections: %d open, --max-connections %d "
                                           "(%d refused so far)",
                                           open_.size(), max_connections_,
                                           stats_->connections_refused.load()));
    }
    return;
  }
  open_[fd] = SocketInode(fd);
  stats_->connections_open.store(static_cast<int64_t>(open_.size()));
}

void AcceptWatch::DropClosed() {
  absl::erase_if(open_, [](const std::pair<const int, ino_t>& connection) {
    return SocketInode(connection.first) != connection.second;
  });
  stats_->connections_open.store(static_cast<int64_t>(open_.size()));
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

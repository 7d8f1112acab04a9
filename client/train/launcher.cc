// Local multi-rank launcher (fork + exec of /proc/self/exe per rank).
#include "client/train/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace shardcast::train {
namespace {

constexpr int kMaxRanks = 1024;
pid_t g_children[kMaxRanks];
std::atomic<int> g_num_children{0};
// Set once we were signalled: ranks are stopping cleanly (rank 0 checkpoints), so one
// rank's exit must not make us terminate the others.
std::atomic<bool> g_stop_requested{false};

void ForwardSignal(int sig) {
  const int n = g_num_children.load();
  for (int i = 0; i < n; ++i) {
    if (g_children[i] > 0) ::kill(g_children[i], sig);
  }
}

// Signals sent by a process (kill, systemd, a batch scheduler) are forwarded. Ctrl-C at
// a terminal is not: the kernel already sent it to the whole foreground process group,
// ranks included, and a second copy would cut their clean stop short.
void OnSignal(int sig, siginfo_t* info, void*) {
  g_stop_requested.store(true);
  if (info == nullptr || info->si_code <= 0) ForwardSignal(sig);
}

// Binds port 0 on loopback and returns the port the kernel chose (torchrun standalone
// does the same). The socket is closed before rank 0 binds it; the window is tiny.
int PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

int ExitCodeOf(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

std::string Describe(int wstatus) {
  if (WIFEXITED(wstatus)) return "exited with status " + std::to_string(WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus))
    return std::string("was killed by signal ") + strsignal(WTERMSIG(wstatus));
  return "stopped";
}

}  // namespace

int LaunchLocalRanks(const LaunchSpec& spec) {
  const int k = spec.nproc_per_node;
  if (k < 1 || k > kMaxRanks) {
    std::fprintf(stderr, "shardcast-train: --nproc-per-node must be in [1, %d]\n", kMaxRanks);
    return 2;
  }
  int port = spec.master_port;
  if (port == 0) {
    if (spec.nnodes > 1) {
      std::fprintf(stderr,
                   "shardcast-train: --nnodes > 1 needs --master-port (or MASTER_PORT) and "
                   "--master-addr of node 0\n");
      return 2;
    }
    port = PickFreePort();
  }
  const int world = k * spec.nnodes;

  struct sigaction forward {};
  forward.sa_sigaction = OnSignal;
  forward.sa_flags = SA_SIGINFO;
  sigemptyset(&forward.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &forward, nullptr);

  for (int local = 0; local < k; ++local) {
    const int rank = spec.node_rank * k + local;
    pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "shardcast-train: fork for rank %d: %s\n", rank, std::strerror(errno));
      ForwardSignal(SIGTERM);
      return 1;
    }
    if (pid == 0) {
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(k).c_str(), 1);
      ::setenv("MASTER_ADDR", spec.master_addr.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      std::vector<std::string> args = {"shardcast-train"};
      args.reserve(1 + spec.rank_args.size());
      // (Option parsing refuses --rank/--world-size/--local-rank with --nproc-per-node,
      // so these arguments cannot override the variables set above.)
      for (const auto& a : spec.rank_args) args.push_back(a);
      std::vector<char*> cargv;
      cargv.reserve(args.size() + 1);
      for (auto& a : args) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      ::execv("/proc/self/exe", cargv.data());
      std::fprintf(stderr, "shardcast-train: exec for rank %d: %s\n", rank, std::strerror(errno));
      ::_exit(127);
    }
    g_children[local] = pid;
    g_num_children.store(local + 1);
  }

  int result = 0;
  int alive = k;
  bool stopping = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  while (alive > 0) {
    int wstatus = 0;
    pid_t pid = ::waitpid(-1, &wstatus, WNOHANG);
    if (pid < 0 && errno != EINTR) break;
    if (pid <= 0) {
      if (stopping && std::chrono::steady_clock::now() > stop_deadline) {
        ForwardSignal(SIGKILL);
        stop_deadline = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    int local = -1;
    for (int i = 0; i < k; ++i) {
      if (g_children[i] == pid) local = i;
    }
    if (local < 0) continue;
    g_children[local] = 0;
    --alive;
    const int code = ExitCodeOf(wstatus);
    if (code != 0) {
      if (!stopping && !g_stop_requested.load()) {
        std::fprintf(stderr, "shardcast-train: rank %d %s; stopping the other ranks\n",
                     spec.node_rank * k + local, Describe(wstatus).c_str());
      }
      if (result == 0) result = code;
      if (!stopping && !g_stop_requested.load()) {
        stopping = true;
        ForwardSignal(SIGTERM);
        stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      }
    }
  }
  return result;
}

}  // namespace shardcast::train

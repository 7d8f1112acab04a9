// A free TCP port on loopback, for a process that must be told its port up front
// (e.g. shardcast-train's --master-port). No gtest dependency.
#ifndef SHARDCAST_TESTS_SUPPORT_FREE_PORT_H_
#define SHARDCAST_TESTS_SUPPORT_FREE_PORT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace shardcast::testing_util {

// A port the kernel picked as free just now (it may be taken again before it is used,
// which loopback tests accept).
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_SUPPORT_FREE_PORT_H_

// gRPC's socket mutator, declared here because gRPC installs only its opaque name.
//
// A socket mutator (GRPC_ARG_SOCKET_MUTATOR) is the one hook gRPC's C++ API (1.51 as
// Debian 12 ships it) gives into its listener: it is called with every accepted
// connection's descriptor before gRPC uses it. AcceptWatch (accept_watch.h) needs that
// hook to count connections and to see its own probe connections accepted. These
// declarations mirror src/core/lib/iomgr/socket_mutator.h, unchanged in layout from
// gRPC 1.34 (which added mutate_fd_2) through 1.51 and later; the build refuses older
// gRPC rather than guess.
#ifndef SHARDCAST_SERVER_GRPC_SOCKET_MUTATOR_ABI_H_
#define SHARDCAST_SERVER_GRPC_SOCKET_MUTATOR_ABI_H_

#include <grpc/impl/codegen/grpc_types.h>
#include <grpc/support/sync.h>
#include <grpcpp/version_info.h>

#if GRPC_CPP_VERSION_MAJOR < 1 || (GRPC_CPP_VERSION_MAJOR == 1 && GRPC_CPP_VERSION_MINOR < 34)
#error "server/grpc_socket_mutator_abi.h mirrors gRPC >= 1.34's socket mutator"
#endif

typedef enum {
  GRPC_FD_CLIENT_CONNECTION_USAGE,
  GRPC_FD_SERVER_LISTENER_USAGE,
  GRPC_FD_SERVER_CONNECTION_USAGE,
} grpc_fd_usage;

typedef struct {
  int fd;
  grpc_fd_usage usage;
} grpc_mutate_socket_info;

struct grpc_socket_mutator_vtable {
  bool (*mutate_fd)(int fd, grpc_socket_mutator* mutator);  // client sockets, listeners
  int (*compare)(grpc_socket_mutator* a, grpc_socket_mutator* b);
  void (*destroy)(grpc_socket_mutator* mutator);
  // When set, called for every usage instead of mutate_fd (accepted connections too).
  // Returning false on an accepted connection makes gRPC 1.51 close the listener.
  bool (*mutate_fd_2)(const grpc_mutate_socket_info* info, grpc_socket_mutator* mutator);
};

struct grpc_socket_mutator {
  const grpc_socket_mutator_vtable* vtable;
  gpr_refcount refcount;
};

// Exported by libgrpc (C++ linkage): sets the vtable and a reference count of one.
void grpc_socket_mutator_init(grpc_socket_mutator* mutator,
                              const grpc_socket_mutator_vtable* vtable);

#endif  // SHARDCAST_SERVER_GRPC_SOCKET_MUTATOR_ABI_H_

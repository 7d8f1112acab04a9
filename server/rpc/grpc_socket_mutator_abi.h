// gRPC's socket mutator, declared here because gRPC installs only its opaque name.
//
// A socket mutator (GRPC_ARG_SOCKET_MUTATOR) is the one hook gRPC's C++ API (1.51 as
// Debian 12 ships it) gives into its listener: it is called with every accepted
// connection's descriptor before gRPC uses it. AcceptWatch (accept_watch.h) needs that
// hook to count connections and to see its own probe connections accepted. These
// declarations mirror gRPC's src/core/lib/iomgr/socket_mutator.h, which no installed
// header declares: nothing but the checks below tells whether the gRPC built against
// has this layout, and a wrong one is a call through the wrong vtable slot.
//
// So the build takes only the gRPC releases these declarations were verified against
// (the range below; cmake/GrpcSocketMutatorAbi.cmake reads it and fails the configure
// step first, with the same message), and tests/server/accept_watch_test.cc fails when
// a real gRPC server's accepts do not reach the mutator. At run time the server's
// first listener probe (daemon.cc) refuses to start without them.
//
// To add a gRPC release X.Y: in gRPC's source at vX.Y.0, check
//   1. src/core/lib/iomgr/socket_mutator.h: grpc_fd_usage's enumerators in this order,
//      grpc_mutate_socket_info {int fd; grpc_fd_usage usage;}, the vtable's four
//      members in this order with these signatures, grpc_socket_mutator {vtable;
//      gpr_refcount refcount;}, and grpc_socket_mutator_init's signature (it is
//      exported with C++ linkage: a renamed type fails the link, a moved field does not);
//   2. that every accepted connection goes through grpc_set_socket_with_mutator with
//      GRPC_FD_SERVER_CONNECTION_USAGE (src/core/lib/iomgr/tcp_server_posix.cc, and
//      the EventEngine listener, src/core/lib/event_engine/posix_engine/, where it
//      serves servers) and what a false return does there (1.51 closes the listener);
//   3. that listening sockets pass through it with GRPC_FD_SERVER_LISTENER_USAGE
//      before gRPC's listen() (AcceptWatch::SetAcceptBacklog relies on it);
// then raise SHARDCAST_GRPC_ABI_MAX_MINOR and run accept_watch_test and
// host_faults_test built against it. To try a gRPC outside the range before that,
// configure with -DSHARDCAST_GRPC_ABI_UNCHECKED=ON (a loud warning; docs/server.md).
#ifndef SHARDCAST_SERVER_RPC_GRPC_SOCKET_MUTATOR_ABI_H_
#define SHARDCAST_SERVER_RPC_GRPC_SOCKET_MUTATOR_ABI_H_

#include <grpc/impl/codegen/grpc_types.h>
#include <grpc/support/sync.h>
#include <grpcpp/version_info.h>

// The verified range: gRPC 1.SHARDCAST_GRPC_ABI_MIN_MINOR.x to 1.MAX_MINOR.x, both
// included (Debian 12's 1.51.1).
#define SHARDCAST_GRPC_ABI_MIN_MINOR 51
#define SHARDCAST_GRPC_ABI_MAX_MINOR 51

#if !defined(SHARDCAST_GRPC_ABI_UNCHECKED) &&                                                \
    (GRPC_CPP_VERSION_MAJOR != 1 || GRPC_CPP_VERSION_MINOR < SHARDCAST_GRPC_ABI_MIN_MINOR || \
     GRPC_CPP_VERSION_MINOR > SHARDCAST_GRPC_ABI_MAX_MINOR)
// See the comment at the top for what to check before adding this gRPC to the range.
#error "gRPC outside the range server/rpc/grpc_socket_mutator_abi.h was verified against"
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

#endif  // SHARDCAST_SERVER_RPC_GRPC_SOCKET_MUTATOR_ABI_H_

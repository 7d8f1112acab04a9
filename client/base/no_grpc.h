// Forced in first (-include) when a core room of the client compiles
// (client/CMakeLists.txt, shardcast_client_room CORE): base, checks, decode and reconnect
// link no gRPC, so they must not see its headers either. Poisoning identifiers every
// gRPC header uses (the C API's export macro, the core's and the C++ API's inner
// namespaces) turns an #include of <grpcpp/...>, <grpc/...> or a *.grpc.pb.h there into
// a build error at that include: "attempt to use poisoned", under the chain of includes
// that reached it. Unlike server/base/no_grpc.h it leaves the namespace name `grpc`
// itself alone: stream_settings.h declares grpc::ChannelCredentials, carried as an
// opaque pointer to the edge that makes the channel. cmake/ClientRooms.cmake refuses a
// core room's `#include <grpc...>` by its text as well. Code that needs gRPC belongs in
// rpc/ (or stream/).
#ifndef SHARDCAST_CLIENT_BASE_NO_GRPC_H_
#define SHARDCAST_CLIENT_BASE_NO_GRPC_H_

#pragma GCC system_header
#pragma GCC poison grpc_impl grpc_core GRPCAPI GRPCXX_DLL

#endif  // SHARDCAST_CLIENT_BASE_NO_GRPC_H_

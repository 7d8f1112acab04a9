// Forced in first (-include) when a core room compiles (server/CMakeLists.txt,
// shardcast_server_room CORE): base, net, assembly, status and serving link no gRPC, so
// they must not see its headers either. Poisoning the identifiers every gRPC header
// uses (the C++ API's namespace, the C API's export macro) turns an #include of
// <grpcpp/...>, <grpc/...> or a *.grpc.pb.h there into a build error at that include:
// "attempt to use poisoned", under the chain of includes that reached it. The code
// that needs gRPC belongs in rpc/ (or the daemon's own files).
#ifndef SHARDCAST_SERVER_BASE_NO_GRPC_H_
#define SHARDCAST_SERVER_BASE_NO_GRPC_H_

#pragma GCC system_header
#pragma GCC poison grpc grpc_impl grpc_core GRPCAPI GRPCXX_DLL

#endif  // SHARDCAST_SERVER_BASE_NO_GRPC_H_

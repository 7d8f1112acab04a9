// The gRPC face of the serving core: the callback API with one reactor per
// stream, raw (ByteBuffer) StreamBatches for zero-copy pixels, and absl::Status
// converted to grpc::Status here and nowhere else.
#ifndef SHARDCAST_SERVER_RPC_GRPC_ADAPTER_H_
#define SHARDCAST_SERVER_RPC_GRPC_ADAPTER_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/net/token_authenticator.h"
#include "server/serving/service_core.h"
#include "shardcast/v1/shardcast.grpc.pb.h"

namespace shardcast::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

// The host of a gRPC peer (ServerContext::peer()) without its port, which a client
// chooses anew for every connection: "ipv4:10.0.0.5:41234" -> "ipv4:10.0.0.5",
// "ipv6:[::1]:41234" (or "ipv6:%5B::1%5D:41234") -> "ipv6:[::1]". Every unix-socket
// client is the one local peer "unix" (their addresses are usually empty). Anything
// else is returned as it is.
std::string PeerHost(absl::string_view peer);

// The service's gRPC methods, each registered by Serve(), which puts the bearer-token
// check (when `tokens` is given) in front of its handler: the check sits at one place
// and no method can be served without it. A method of the proto that is not served
// answers UNIMPLEMENTED, before any data is touched. Health and reflection are other
// services and stay open, so probes need no token.
//
// Why here and not in gRPC's own hooks (gRPC 1.51, as Debian 12 ships it): a server
// interceptor (grpc::experimental::Interceptor) cannot end a call, since Hijack() is for
// clients only and the handler always runs after the interceptors (grpc/grpc#24017);
// it could only rewrite the status after Register had already run. A
// grpc::AuthMetadataProcessor runs on TLS listeners only, and tokens must work on
// plaintext listeners too (docs/server.md, "Security").
//
// REQUIRES: `impl` and `tokens` outlive the service (and the grpc::Server it is
// registered with).
class GrpcAdapter final : public shardcast::v1::Shardcast::Service {
 public:
  explicit GrpcAdapter(ServiceCore* impl, const TokenAuthenticator* tokens = nullptr);

 private:
  template <typename Request, typename Response>
  using UnaryHandler = grpc::ServerUnaryReactor* (GrpcAdapter::*)(grpc::CallbackServerContext*,
                                                                  const Request*, Response*);
  template <typename Request, typename Response>
  using ServerStreamingHandler = grpc::ServerWriteReactor<Response>* (
      GrpcAdapter::*)(grpc::CallbackServerContext*, const Request*);

  // Serves `method` of shardcast.v1.Shardcast with `handler` behind the token check:
  // refused calls never reach it.
  template <typename Request, typename Response>
  void Serve(const char* method, UnaryHandler<Request, Response> handler);
  template <typename Request, typename Response>
  void Serve(const char* method, ServerStreamingHandler<Request, Response> handler);

  // Makes `handler` the callback handler of `method` (raw for grpc::ByteBuffer requests).
  template <typename Request>
  void Install(const char* method, grpc::internal::MethodHandler* handler);

  // OK without a token file; else the token check of the call's metadata.
  absl::Status Authorize(const grpc::CallbackServerContext& context) const;

  // The handlers, called for authorized calls only.
  grpc::ServerUnaryReactor* HandleRegister(grpc::CallbackServerContext* context,
                                           const shardcast::v1::RegisterRequest* request,
                                           shardcast::v1::RegisterResponse* response);
  grpc::ServerWriteReactor<grpc::ByteBuffer>* HandleStreamBatches(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request);
  grpc::ServerUnaryReactor* HandleGetStatus(grpc::CallbackServerContext* context,
                                            const shardcast::v1::GetStatusRequest* request,
                                            shardcast::v1::GetStatusResponse* response);

  ServiceCore* const impl_;
  const TokenAuthenticator* const tokens_;  // null: no token required
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_RPC_GRPC_ADAPTER_H_

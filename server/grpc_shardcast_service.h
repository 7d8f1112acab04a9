// The gRPC face of the serving core: the callback API with one reactor per
// stream, raw (ByteBuffer) StreamBatches for zero-copy pixels, and absl::Status
// converted to grpc::Status here and nowhere else.
#ifndef SHARDCAST_SERVER_GRPC_SHARDCAST_SERVICE_H_
#define SHARDCAST_SERVER_GRPC_SHARDCAST_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/security.h"
#include "server/shardcast_service_impl.h"
#include "shardcast/v1/shardcast.grpc.pb.h"

namespace shardcast::server {

grpc::Status ToGrpcStatus(const absl::Status& status);

// The host of a gRPC peer (ServerContext::peer()) without its port, which a client
// chooses anew for every connection: "ipv4:10.0.0.5:41234" -> "ipv4:10.0.0.5",
// "ipv6:[::1]:41234" (or "ipv6:%5B::1%5D:41234") -> "ipv6:[::1]". Every unix-socket
// client is the one local peer "unix" (their addresses are usually empty). Anything
// else is returned as it is.
std::string PeerHost(absl::string_view peer);

using ShardcastCallbackBase = shardcast::v1::Shardcast::WithCallbackMethod_Register<
    shardcast::v1::Shardcast::WithRawCallbackMethod_StreamBatches<
        shardcast::v1::Shardcast::WithCallbackMethod_GetStatus<shardcast::v1::Shardcast::Service>>>;

// Every method checks the bearer token first when `tokens` is given (health and
// reflection are other services and stay open, so probes need no token).
// REQUIRES: `impl` and `tokens` outlive the service (and the grpc::Server it is
// registered with).
class GrpcShardcastService final : public ShardcastCallbackBase {
 public:
  explicit GrpcShardcastService(ShardcastServiceImpl* impl,
                                const TokenAuthenticator* tokens = nullptr)
      : impl_(impl), tokens_(tokens) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const shardcast::v1::RegisterRequest* request,
                                     shardcast::v1::RegisterResponse* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* StreamBatches(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const shardcast::v1::GetStatusRequest* request,
                                      shardcast::v1::GetStatusResponse* response) override;

 private:
  // OK without a token file; else the token check of the call's metadata.
  absl::Status Authorize(const grpc::CallbackServerContext& context) const;

  ShardcastServiceImpl* const impl_;
  const TokenAuthenticator* const tokens_;  // null: no token required
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_GRPC_SHARDCAST_SERVICE_H_

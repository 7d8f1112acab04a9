// Who may connect to the daemon's gRPC listener: plaintext, TLS, or mTLS with client
// certificates verified against a CA. Standard gRPC/OpenSSL pieces only. The bearer
// tokens that every method checks are net/token_authenticator.h's.
#ifndef SHARDCAST_SERVER_RPC_SERVER_CREDENTIALS_H_
#define SHARDCAST_SERVER_RPC_SERVER_CREDENTIALS_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>

#include "absl/status/statusor.h"
#include "server/serving/server_options.h"

namespace shardcast::server {

// The listener's credentials for `options`: plaintext without --tls-cert; TLS with
// --tls-cert/--tls-key; with --tls-client-ca as well, clients must present a
// certificate signed by that CA (the handshake fails otherwise). Errors name the flag
// and the file (unreadable, or a key without a certificate and so on).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions& options);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_RPC_SERVER_CREDENTIALS_H_

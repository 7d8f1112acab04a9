// The security flags every shardcast client takes (shardcast-train, shardcast-ctl, the
// benchmarks) and what they turn into: the channel's TLS credentials and the bearer
// token that client::MakeChannel attaches to every call (channel.h).
#ifndef SHARDCAST_CLIENT_PROTOCOL_CLIENT_SECURITY_H_
#define SHARDCAST_CLIENT_PROTOCOL_CLIENT_SECURITY_H_

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/flags/flags.h"

namespace shardcast::client {

// The environment variable a token is taken from when no --auth-token-file is given.
inline constexpr char kTokenEnvVar[] = "SHARDCAST_TOKEN";

struct ClientSecurityFlags {
  std::string tls_ca;           // --tls-ca FILE: PEM CA that signed the server's certificate
  std::string tls_cert;         // --tls-cert FILE: this client's certificate (mTLS)
  std::string tls_key;          // --tls-key FILE: its private key
  std::string auth_token_file;  // --auth-token-file FILE: the first token is sent
};

// Adds --tls-ca, --tls-cert, --tls-key and --auth-token-file to `flags`.
// REQUIRES: `dst` outlives flags->Parse().
void AddClientSecurityFlags(FlagSet* flags, ClientSecurityFlags* dst);

struct ClientSecurity {
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // nullptr = plaintext
  std::string bearer_token;                               // empty = none
};

// Reads the files the flags name (and SHARDCAST_TOKEN when --auth-token-file is not
// given): TLS when --tls-ca or --tls-cert is given (--tls-ca empty = the system's
// roots), a client certificate when --tls-cert/--tls-key are given. Errors name the
// flag and the file; a token never appears in one.
absl::StatusOr<ClientSecurity> LoadClientSecurity(const ClientSecurityFlags& flags);

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_PROTOCOL_CLIENT_SECURITY_H_

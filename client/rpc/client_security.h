// The security settings every shardcast client takes (the flags of shardcast-train,
// shardcast-ctl and the benchmarks; the keywords of Python's Loader, through _native) and
// what they turn into: the channel's TLS credentials and the bearer token that
// client::MakeChannel attaches to every call (channel.h). One rule for all of them:
// LoadClientSecurity.
#ifndef SHARDCAST_CLIENT_RPC_CLIENT_SECURITY_H_
#define SHARDCAST_CLIENT_RPC_CLIENT_SECURITY_H_

#include <grpcpp/security/credentials.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/flags/flags.h"

namespace shardcast::client {

// The environment variable a token is taken from when no --auth-token-file is given.
inline constexpr char kTokenEnvVar[] = "SHARDCAST_TOKEN";

// The values a client's security is built from, whoever took them. Files: empty = not
// given.
struct ClientSecurityValues {
  std::string tls_ca;           // --tls-ca FILE: PEM CA that signed the server's certificate
  std::string tls_cert;         // --tls-cert FILE: this client's certificate (mTLS)
  std::string tls_key;          // --tls-key FILE: its private key
  std::string auth_token_file;  // --auth-token-file FILE: the first token is sent
  // TLS even with neither tls_ca nor tls_cert, trusting the system's roots (Python's
  // tls=True; the flags have no such switch: --tls-cert alone does the same).
  bool tls = false;
  // A token given as a value (Python's token=): sent as it is, and neither
  // auth_token_file nor $SHARDCAST_TOKEN is read; empty = none.
  std::optional<std::string> token;
};
using ClientSecurityFlags = ClientSecurityValues;

// How errors name each value: the flag, or Python's keyword.
struct ClientSecurityNames {
  std::string tls_ca = "--tls-ca";
  std::string tls_cert = "--tls-cert";
  std::string tls_key = "--tls-key";
  std::string auth_token_file = "--auth-token-file";
};
// The names of Python's Loader keywords.
ClientSecurityNames KeywordNames();

// Adds --tls-ca, --tls-cert, --tls-key and --auth-token-file to `flags`.
// REQUIRES: `dst` outlives flags->Parse().
void AddClientSecurityFlags(FlagSet* flags, ClientSecurityFlags* dst);

struct ClientSecurity {
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // nullptr = plaintext
  std::string bearer_token;                               // empty = none
};

// Reads the files the values name (and SHARDCAST_TOKEN when neither a token nor
// --auth-token-file is given; it must hold one token of visible ASCII or nothing): TLS
// when `tls`, --tls-ca or --tls-cert is given (--tls-ca empty = the system's roots), a
// client certificate when --tls-cert/--tls-key are given (both or neither).
// INVALID_ARGUMENT (or the file's error) naming the value by `names` and the file; a
// token never appears in one.
absl::StatusOr<ClientSecurity> LoadClientSecurity(const ClientSecurityValues& values,
                                                  const ClientSecurityNames& names = {});

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_RPC_CLIENT_SECURITY_H_

// Client security flags -> credentials and token (see client_security.h).
#include "client/rpc/client_security.h"

#include <cstdlib>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/util/token_file.h"

namespace shardcast::client {

void AddClientSecurityFlags(FlagSet* flags, ClientSecurityFlags* dst) {
  flags->String({{"--tls-ca"},
                 "FILE",
                 "connect with TLS, trusting the server certificate this PEM CA signed "
                 "(empty with --tls-cert: the system's CAs); empty = plaintext"},
                &dst->tls_ca, /*allow_empty=*/true);
  flags->String({{"--tls-cert"}, "FILE", "client certificate (PEM) for a server with mTLS"},
                &dst->tls_cert, /*allow_empty=*/true);
  flags->String({{"--tls-key"}, "FILE", "private key (PEM) of --tls-cert"}, &dst->tls_key,
                /*allow_empty=*/true);
  flags->String({{"--auth-token-file"},
                 "FILE",
                 "send 'authorization: Bearer <token>' with the file's first token "
                 "(# comments and blank lines skipped)",
                 absl::StrCat("$", kTokenEnvVar, " if set, else no token")},
                &dst->auth_token_file, /*allow_empty=*/true);
}

ClientSecurityNames KeywordNames() {
  return ClientSecurityNames{"tls_ca", "tls_cert", "tls_key", "token_file"};
}

namespace {

// The channel's credentials: nullptr (plaintext) unless TLS was asked for.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
    const ClientSecurityValues& values, const ClientSecurityNames& names) {
  if (values.tls_cert.empty() != values.tls_key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(names.tls_cert, " and ", names.tls_key,
                                                   " go together (a client certificate and "
                                                   "its key: pass both)"));
  }
  if (!values.tls && values.tls_ca.empty() && values.tls_cert.empty()) return nullptr;
  grpc::SslCredentialsOptions ssl;
  if (!values.tls_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPemFile(names.tls_ca, values.tls_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!values.tls_cert.empty()) {
    absl::StatusOr<std::string> cert = ReadPemFile(names.tls_cert, values.tls_cert);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPemFile(names.tls_key, values.tls_key);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

// The bearer token: the value given, else the token file's first, else the environment's.
absl::StatusOr<std::string> BearerToken(const ClientSecurityValues& values,
                                        const ClientSecurityNames& names) {
  if (values.token.has_value()) return *values.token;
  if (!values.auth_token_file.empty()) {
    absl::StatusOr<std::vector<std::string>> tokens = ReadTokenFile(values.auth_token_file);
    if (!tokens.ok()) {
      return absl::Status(tokens.status().code(),
                          absl::StrCat(names.auth_token_file, ": ", tokens.status().message()));
    }
    return tokens->front();
  }
  const char* env = std::getenv(kTokenEnvVar);
  if (env == nullptr) return "";
  absl::StatusOr<std::vector<std::string>> tokens = ParseTokens(env);
  if (!tokens.ok() || tokens->size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        kTokenEnvVar, ": one token of visible ASCII without whitespace, or empty for none"));
  }
  return tokens->empty() ? "" : tokens->front();
}

}  // namespace

absl::StatusOr<ClientSecurity> LoadClientSecurity(const ClientSecurityValues& values,
                                                  const ClientSecurityNames& names) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      Credentials(values, names);
  if (!credentials.ok()) return credentials.status();
  absl::StatusOr<std::string> token = BearerToken(values, names);
  if (!token.ok()) return token.status();
  return ClientSecurity{*std::move(credentials), *std::move(token)};
}

}  // namespace shardcast::client

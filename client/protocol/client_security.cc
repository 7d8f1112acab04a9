// Client security flags -> credentials and token (see client_security.h).
#include "client/protocol/client_security.h"

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

absl::StatusOr<ClientSecurity> LoadClientSecurity(const ClientSecurityFlags& flags) {
  ClientSecurity out;
  if (flags.tls_cert.empty() != flags.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!flags.tls_ca.empty() || !flags.tls_cert.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!flags.tls_ca.empty()) {
      absl::StatusOr<std::string> ca = ReadPemFile("--tls-ca", flags.tls_ca);
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *std::move(ca);
    }
    if (!flags.tls_cert.empty()) {
      absl::StatusOr<std::string> cert = ReadPemFile("--tls-cert", flags.tls_cert);
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPemFile("--tls-key", flags.tls_key);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    out.credentials = grpc::SslCredentials(ssl);
  }
  if (!flags.auth_token_file.empty()) {
    absl::StatusOr<std::vector<std::string>> tokens = ReadTokenFile(flags.auth_token_file);
    if (!tokens.ok()) {
      return absl::Status(tokens.status().code(),
                          absl::StrCat("--auth-token-file: ", tokens.status().message()));
    }
    out.bearer_token = tokens->front();
  } else if (const char* env = std::getenv(kTokenEnvVar); env != nullptr) {
    absl::StatusOr<std::vector<std::string>> tokens = ParseTokens(env);
    if (!tokens.ok() || tokens->size() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          kTokenEnvVar, ": one token of visible ASCII without whitespace, or empty for none"));
    }
    if (!tokens->empty()) out.bearer_token = tokens->front();
  }
  return out;
}

}  // namespace shardcast::client

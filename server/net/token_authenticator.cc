// The bearer-token check (see token_authenticator.h).
#include "server/net/token_authenticator.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/util/token_file.h"

namespace shardcast::server {

namespace {

constexpr char kTokenHint[] =
    "send metadata 'authorization: Bearer <token>' (shardcast clients: --auth-token-file FILE "
    "or the SHARDCAST_TOKEN environment variable)";

}  // namespace

TokenAuthenticator::Sha256 TokenAuthenticator::Digest(absl::string_view token) {
  Sha256 out{};
  unsigned int length = 0;
  // SHA-256 cannot fail on in-memory input; a zero digest would simply match nothing
  // real, since accepted tokens are digested the same way.
  EVP_Digest(token.data(), token.size(), out.data(), &length, EVP_sha256(), nullptr);
  return out;
}

absl::StatusOr<size_t> TokenAuthenticator::Reload() {
  absl::StatusOr<std::vector<std::string>> tokens = ReadTokenFile(path_);
  if (!tokens.ok()) return tokens.status();
  std::vector<Sha256> digests;
  digests.reserve(tokens->size());
  for (const std::string& token : *tokens) digests.push_back(Digest(token));
  absl::MutexLock lock(&mu_);
  accepted_ = std::move(digests);
  return accepted_.size();
}

absl::Status TokenAuthenticator::Check(absl::string_view authorization) const {
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat("this server requires a bearer token: ", kTokenHint));
  }
  constexpr absl::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme)) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the authorization metadata is not of the form 'Bearer <token>': ", kTokenHint));
  }
  const Sha256 presented = Digest(absl::StripAsciiWhitespace(authorization.substr(kScheme.size())));
  bool match = false;
  {
    absl::MutexLock lock(&mu_);
    // Every accepted digest is compared, whatever matched before: the time taken does
    // not depend on which token (if any) the client holds.
    for (const Sha256& accepted : accepted_) {
      match |= CRYPTO_memcmp(accepted.data(), presented.data(), presented.size()) == 0;
    }
  }
  if (match) return absl::OkStatus();
  return absl::UnauthenticatedError(
      "bearer token refused: it is not in the server's --auth-token-file (check the client's "
      "--auth-token-file / SHARDCAST_TOKEN, and whether the server's file was reloaded)");
}

}  // namespace shardcast::server

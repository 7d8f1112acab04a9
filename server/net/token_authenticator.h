// The bearer-token allow-list that every shardcast.v1.Shardcast method and /metrics
// check. Kept apart from the listener's credentials (rpc/server_credentials.h) so that
// the rooms without gRPC (the /metrics endpoint) can check a token too. Standard
// OpenSSL pieces only; no home-made crypto.
#ifndef SHARDCAST_SERVER_NET_TOKEN_AUTHENTICATOR_H_
#define SHARDCAST_SERVER_NET_TOKEN_AUTHENTICATOR_H_

#include <array>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace shardcast::server {

// The accepted bearer tokens, re-readable while calls are checked. Tokens are kept as
// SHA-256 digests and compared with CRYPTO_memcmp, so neither the comparison's time
// nor an equal-length shortcut tells a client how much of a guess was right.
class TokenAuthenticator {
 public:
  // Nothing is read until Reload().
  explicit TokenAuthenticator(std::string path) : path_(std::move(path)) {}

  // (Re-)reads the file. On failure the tokens accepted so far stay in force (a bad
  // edit during a SIGHUP must not lock every trainer out); the error says why. On
  // success, returns how many tokens are now accepted.
  absl::StatusOr<size_t> Reload() ABSL_LOCKS_EXCLUDED(mu_);

  // OK when `authorization` (the request's "authorization" metadata; empty when absent)
  // is "Bearer <token>" with an accepted token; UNAUTHENTICATED otherwise, saying what
  // was wrong without echoing what the client sent.
  absl::Status Check(absl::string_view authorization) const ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& path() const { return path_; }

 private:
  using Sha256 = std::array<unsigned char, 32>;
  static Sha256 Digest(absl::string_view token);

  const std::string path_;
  mutable absl::Mutex mu_;
  std::vector<Sha256> accepted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_NET_TOKEN_AUTHENTICATOR_H_

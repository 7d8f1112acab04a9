// Which failed calls a rank retries: IsPermanent (statuses a reconnect cannot fix) and
// HandshakeRefusalWatch (a peer that keeps closing every connection during the
// handshake, which gRPC reports as a retryable UNAVAILABLE). Pure: the caller passes
// the status (absl::Status: the gRPC edge converted it, client/rpc/channel.h FromGrpc)
// and the time.
#ifndef SHARDCAST_CLIENT_RECONNECT_RETRY_RULES_H_
#define SHARDCAST_CLIENT_RECONNECT_RETRY_RULES_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shardcast::client {

// Statuses a reconnect cannot fix: the request itself is wrong, the job conflicts
// with what other ranks registered, this is not a shardcast server, or the server
// refused this client's token or certificate (IsSecurityRefusal: also the TLS
// handshake failures gRPC reports as UNAVAILABLE). Everything else (UNAVAILABLE above
// all: server killed, restarting, network) is retried.
bool IsPermanent(const absl::Status& status);

// Watches a run of attempts for a peer that keeps closing the connection during the
// handshake (IsClosedDuringConnect); once that lasted `limit`, Observe returns the
// error to give up with. Any other outcome ends the run.
class HandshakeRefusalWatch {
 public:
  explicit HandshakeRefusalWatch(absl::Duration limit) : limit_(limit) {}
  // `status` came back at `now` from the attempt `what` names (used in the error).
  absl::Status Observe(const absl::Status& status, absl::Time now, absl::string_view what);

 private:
  const absl::Duration limit_;
  std::optional<absl::Time> since_;
};

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_RECONNECT_RETRY_RULES_H_

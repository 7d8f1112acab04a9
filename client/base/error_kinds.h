// The kinds of failure a client tells apart, decided on absl::Status (the project's own
// error type, as the server's core decides): a failed TLS handshake, a peer that closed
// the connection during the handshake, a refusal a reconnect cannot fix, and the hint
// each comes with. The gRPC edge converts a call's grpc::Status once
// (client/rpc/channel.h, FromGrpc: the codes share their numbering, the message is
// kept), so the retry and reconnect rules above never see a gRPC type.
#ifndef SHARDCAST_CLIENT_BASE_ERROR_KINDS_H_
#define SHARDCAST_CLIENT_BASE_ERROR_KINDS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardcast::client {

// Whether `status` is a failed TLS handshake or a plaintext/TLS mismatch rather than
// an unreachable server. gRPC reports both as UNAVAILABLE, so this reads the message
// of the connect failure: a retry cannot fix a wrong CA, a missing client certificate
// or a client speaking plaintext to a TLS port (or the reverse), so clients give up
// at once instead of retrying as for a network outage.
bool IsHandshakeFailure(const absl::Status& status);
// Whether `status` says the peer accepted the TCP connection and closed it before HTTP/2
// was set up ("failed to connect ... Socket closed", a reset, or "tcp handshaker
// shutdown"): what a TLS server does
// to a plaintext client or to a client without the certificate it requires, but also
// what a proxy in front of a server still starting does, so callers only give up after
// it persisted (StreamSettings::handshake_refusal_seconds).
bool IsClosedDuringConnect(const absl::Status& status);
// Whether a reconnect could ever fix `status`: false for a refused token or
// certificate (UNAUTHENTICATED, PERMISSION_DENIED) and for IsHandshakeFailure.
bool IsSecurityRefusal(const absl::Status& status);
// For a security refusal, what to check on which side (" (hint: ...)"); else "".
std::string SecurityHint(const absl::Status& status);
// `status` with `what` prefixed to its message and SecurityHint's advice after it:
// "register rank 0 of job 'x' at host:port: ...". OK stays OK.
absl::Status WithContext(const absl::Status& status, absl::string_view what);
// "UNAVAILABLE: failed to connect to all addresses; ..." — the code by name, then the
// message, then SecurityHint's advice when there is one.
std::string DescribeError(const absl::Status& status);

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_BASE_ERROR_KINDS_H_

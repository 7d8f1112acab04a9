// The one way every shardcast client (trainer, ctl, Python-facing tools, tests,
// benchmarks) opens a gRPC channel to a server: credentials, bearer token, message
// size limits, reconnect backoff and keepalive in one place. The flags that fill the
// credentials and the token are in client_security.h.
#ifndef SHARDCAST_CLIENT_RPC_CHANNEL_H_
#define SHARDCAST_CLIENT_RPC_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/base/error_kinds.h"

namespace shardcast::client {

struct ChannelOptions {
  // host:port, [v6]:port, unix:/path, or any gRPC target string.
  std::string target;
  // nullptr = plaintext (grpc::InsecureChannelCredentials).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Non-empty: every call on the channel carries "authorization: Bearer <token>". Sent
  // as metadata by a client interceptor, not as call credentials, because gRPC refuses
  // call credentials on plaintext channels and a server may take tokens without TLS.
  std::string bearer_token;
  // Batches are tens of MB (B*3*C*C bytes); gRPC's 4 MB default would refuse them.
  // -1 = no limit.
  int max_receive_message_bytes = -1;
  // gRPC's own reconnect backoff (1 s growing to 120 s by default) would keep the
  // channel in TRANSIENT_FAILURE long after a restarted server is back.
  absl::Duration reconnect_backoff_initial = absl::Milliseconds(100);
  absl::Duration reconnect_backoff_max = absl::Seconds(2);
  // How long one connection attempt (TCP, TLS, the server's HTTP/2 SETTINGS) may take.
  // gRPC reads it from GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, despite the name. When that
  // was the 100 ms initial backoff, handshakes were cut short on a loaded machine
  // ("connection attempt timed out before receiving SETTINGS frame"), and a server
  // slower to answer than the largest backoff was never reached. A refused connection
  // still fails at once, so this does not slow down reconnecting to a restarted server.
  absl::Duration connect_timeout = absl::Seconds(20);
  // After a connection fails, gRPC re-resolves the target before it connects anew, and
  // by default not sooner than 30 s after the last resolution: a server killed and back
  // within a few seconds was not reconnected to for ~10 s (the Python client's grpcio
  // the same), whatever the backoff. Re-resolving is cheap (an IP literal, /etc/hosts,
  // a cluster DNS name whose addresses move: issue 26's replicas).
  absl::Duration min_reresolution_interval = absl::Milliseconds(100);
  // A server host that vanishes without closing the connection (power loss,
  // partition) would leave a Read() blocked forever; keepalive pings turn that into
  // a broken stream. 5 minutes is the least interval a gRPC server accepts by
  // default (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS) before it
  // answers pings with GOAWAY. Zero = no keepalive pings.
  absl::Duration keepalive_time = absl::Minutes(5);
  absl::Duration keepalive_timeout = absl::Seconds(20);
  // > 0: a fixed HTTP/2 stream window of this many bytes (BDP probing off), so the
  // transport buffers little beyond what the reader took: a slow reader is felt by
  // the server at once (tests of backpressure, memory benchmarks). 0 = gRPC's own.
  int stream_window_bytes = 0;
  // true: this channel shares no TCP connection with other channels of the process
  // (gRPC pools them by target and arguments otherwise). Benchmarks that stand in for
  // several trainer processes need it.
  bool own_connection = false;
};

// Nothing connects until the first call.
std::shared_ptr<grpc::Channel> MakeChannel(const ChannelOptions& options);

// grpc::Status -> absl::Status, the one conversion of a call's outcome: the codes share
// their numbering, the message is kept. Every rule above the edge (retry_rules,
// reconnect_budget, registration, error_kinds.h) decides on what this returns.
absl::Status FromGrpc(const grpc::Status& status);
// FromGrpc with `what` prefixed to the message and SecurityHint's advice after it
// (WithContext): "register rank 0 of job 'x' at host:port: ...".
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view what);
// "UNAVAILABLE: failed to connect to all addresses; ..." (DescribeError of FromGrpc).
std::string DescribeRpcError(const grpc::Status& status);

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_RPC_CHANNEL_H_

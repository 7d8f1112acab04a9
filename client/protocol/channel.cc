// Channel set-up and status conversion for every client (see channel.h).
#include "client/protocol/channel.h"

#include <grpcpp/support/client_interceptor.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shardcast::client {

namespace {

// Adds the bearer token to the initial metadata of every call of a channel.
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;  // owned by the factory, which outlives the channel's calls
};

class BearerTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(const std::string& token)
      : header_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new BearerTokenInterceptor(&header_);
  }

 private:
  const std::string header_;
};

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const ChannelOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  const int initial_ms = std::max<int>(
      1, static_cast<int>(absl::ToInt64Milliseconds(options.reconnect_backoff_initial)));
  const int max_ms = std::max<int>(
      initial_ms, static_cast<int>(absl::ToInt64Milliseconds(options.reconnect_backoff_max)));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, initial_ms);
  args.SetInt(
      GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
      std::max<int>(1, static_cast<int>(absl::ToInt64Milliseconds(options.connect_timeout))));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_ms);
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS,
              std::max<int>(1, static_cast<int>(
                                   absl::ToInt64Milliseconds(options.min_reresolution_interval))));
  if (options.keepalive_time > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
  }
  if (options.stream_window_bytes > 0) {
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, options.stream_window_bytes);
  }
  if (options.own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials();
  if (options.bearer_token.empty()) {
    return grpc::CreateCustomChannel(options.target, credentials, args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<BearerTokenInterceptorFactory>(options.bearer_token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(options.target, credentials, args,
                                                                 std::move(factories));
}

bool IsHandshakeFailure(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return false;
  const std::string message = absl::AsciiStrToLower(status.error_message());
  // "Ssl handshake failed: ...CERTIFICATE_VERIFY_FAILED" (wrong CA, or a TLS client at
  // a plaintext port), "Handshake read failed" / "handshake failed" (the server refused
  // the client's certificate, or a TLS server got plaintext), "Trying to connect an
  // http1.x server" (not HTTP/2 at all).
  // Not "handshaker shutdown": gRPC's TCP handshaker says that when the peer closed the
  // connection, which IsClosedDuringConnect covers.
  for (absl::string_view marker :
       {"ssl handshake", "handshake failed", "handshake read failed", "handshake write failed",
        "ssl_error", "certificate", "http1.x"}) {
    if (absl::StrContains(message, marker)) return true;
  }
  return false;
}

bool IsClosedDuringConnect(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return false;
  const std::string message = absl::AsciiStrToLower(status.error_message());
  return absl::StrContains(message, "failed to connect") &&
         (absl::StrContains(message, "socket closed") ||
          absl::StrContains(message, "connection reset") ||
          absl::StrContains(message, "handshaker shutdown"));
}

bool IsSecurityRefusal(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
         status.error_code() == grpc::StatusCode::PERMISSION_DENIED || IsHandshakeFailure(status);
}

std::string SecurityHint(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
      // shardcast-server's own refusals already say what to pass; other servers and
      // proxies may not.
      if (absl::StrContains(status.error_message(), "SHARDCAST_TOKEN")) return "";
      return " (hint: the server refused this client's bearer token or got none: give the "
             "client --auth-token-file FILE (Python: token=) or SHARDCAST_TOKEN with a token "
             "from the server's --auth-token-file)";
    case grpc::StatusCode::PERMISSION_DENIED:
      return " (hint: the server does not let this client do that; check its token and "
             "certificate)";
    default:
      break;
  }
  if (IsHandshakeFailure(status)) {
    return " (hint: the TLS handshake failed: check that client and server both use TLS or "
           "both plaintext (--tls-ca on the client, tls_ca= in Python; --tls-cert on the "
           "server), that the client's --tls-ca signed the server's certificate and the "
           "certificate names the host dialed, and, when the server has --tls-client-ca, that "
           "the client passes --tls-cert/--tls-key (tls_cert=/tls_key=) signed by that CA)";
  }
  if (IsClosedDuringConnect(status)) {
    return " (hint: the server closed the connection before answering: if it serves TLS, give "
           "this client --tls-ca (Python: tls_ca=); if it requires client certificates "
           "(--tls-client-ca), --tls-cert/--tls-key (tls_cert=/tls_key=); a proxy in front of a "
           "server that is not up yet does the same)";
  }
  return "";
}

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message(), SecurityHint(status)));
}

std::string DescribeRpcError(const grpc::Status& status) {
  std::string out = absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
  if (!status.error_message().empty()) absl::StrAppend(&out, ": ", status.error_message());
  absl::StrAppend(&out, SecurityHint(status));
  return out;
}

}  // namespace shardcast::client

// The kinds of failure a client tells apart (see error_kinds.h).
#include "client/base/error_kinds.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shardcast::client {

bool IsHandshakeFailure(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kUnavailable) return false;
  const std::string message = absl::AsciiStrToLower(status.message());
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

bool IsClosedDuringConnect(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kUnavailable) return false;
  const std::string message = absl::AsciiStrToLower(status.message());
  return absl::StrContains(message, "failed to connect") &&
         (absl::StrContains(message, "socket closed") ||
          absl::StrContains(message, "connection reset") ||
          absl::StrContains(message, "handshaker shutdown"));
}

bool IsSecurityRefusal(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnauthenticated ||
         status.code() == absl::StatusCode::kPermissionDenied || IsHandshakeFailure(status);
}

std::string SecurityHint(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnauthenticated:
      // shardcast-server's own refusals already say what to pass; other servers and
      // proxies may not.
      if (absl::StrContains(status.message(), "SHARDCAST_TOKEN")) return "";
      return " (hint: the server refused this client's bearer token or got none: give the "
             "client --auth-token-file FILE (Python: token=) or SHARDCAST_TOKEN with a token "
             "from the server's --auth-token-file)";
    case absl::StatusCode::kPermissionDenied:
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

absl::Status WithContext(const absl::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(status.code(),
                      absl::StrCat(what, ": ", status.message(), SecurityHint(status)));
}

std::string DescribeError(const absl::Status& status) {
  std::string out = absl::StatusCodeToString(status.code());
  if (!status.message().empty()) absl::StrAppend(&out, ": ", status.message());
  absl::StrAppend(&out, SecurityHint(status));
  return out;
}

}  // namespace shardcast::client

// Which failed calls a rank retries (see retry_rules.h).
#include "client/protocol/retry_rules.h"

#include "absl/strings/str_cat.h"
#include "client/protocol/channel.h"

namespace shardcast::client {

bool IsPermanent(const grpc::Status& status) {
  if (IsSecurityRefusal(status)) return true;
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      return true;
    default:
      return false;
  }
}

absl::Status HandshakeRefusalWatch::Observe(const grpc::Status& status, absl::Time now,
                                            absl::string_view what) {
  if (!IsClosedDuringConnect(status)) {
    since_.reset();
    return absl::OkStatus();
  }
  if (!since_) since_ = now;
  if (now - *since_ < limit_) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      what, ": the server accepted every connection for ", absl::FormatDuration(limit_),
      " but closed it during the handshake (", status.error_message(), ")", SecurityHint(status)));
}

}  // namespace shardcast::client

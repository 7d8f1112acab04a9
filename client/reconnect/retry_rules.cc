// Which failed calls a rank retries (see retry_rules.h).
#include "client/reconnect/retry_rules.h"

#include "absl/strings/str_cat.h"
#include "client/base/error_kinds.h"

namespace shardcast::client {

bool IsPermanent(const absl::Status& status) {
  if (IsSecurityRefusal(status)) return true;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return true;
    default:
      return false;
  }
}

absl::Status HandshakeRefusalWatch::Observe(const absl::Status& status, absl::Time now,
                                            absl::string_view what) {
  if (!IsClosedDuringConnect(status)) {
    since_.reset();
    return absl::OkStatus();
  }
  if (!since_) since_ = now;
  if (now - *since_ < limit_) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      what, ": the server accepted every connection for ", absl::FormatDuration(limit_),
      " but closed it during the handshake (", status.message(), ")", SecurityHint(status)));
}

}  // namespace shardcast::client

// Secrets out of URLs before they are shown (issue 35): the password of a URL's userinfo
// and the values of query parameters that carry secrets. At the bottom of common/ because
// every log line of the server passes through RedactUrlsIn (server/base/log.cc), below
// any room that knows what a dataset URL is (common/remote/dataset_url.h parses them).
#ifndef SHARDCAST_COMMON_UTIL_URL_REDACTION_H_
#define SHARDCAST_COMMON_UTIL_URL_REDACTION_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace shardcast {

// `url` as it may be shown (status, errors, logs, metrics, shardcast-ctl): the password
// of its userinfo ("user:REDACTED@"; a user alone may be a token: "REDACTED@"), and the
// values of query parameters that carry secrets (presigned URLs' X-Amz-Signature,
// X-Amz-Credential, X-Amz-Security-Token, X-Goog-Signature; sig, key, token,
// password, and any name holding "token", "secret", "password", "signature",
// "credential") replaced by "REDACTED". Text without "://" is returned as it is.
std::string RedactedUrl(absl::string_view url);

// Every URL (scheme://...) inside free text (an error message, a log line) redacted as
// RedactedUrl does; the rest of the text as it is. The last line of defence for
// messages made from URLs below the layer that shows them.
std::string RedactUrlsIn(absl::string_view text);

// Where the authority of `url` (after "scheme://", at `start`) ends: at its path, query
// or fragment. With UrlUserinfoEnd, the one reading of where a URL's userinfo is, so
// that ParseDatasetUrl takes out exactly what RedactedUrl hides.
size_t UrlAuthorityEnd(absl::string_view url, size_t start);

// The '@' that ends the userinfo of the authority [start, end), npos without one. The
// last '@' counts: a password may hold an unencoded '@', a host never does.
size_t UrlUserinfoEnd(absl::string_view url, size_t start, size_t end);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_UTIL_URL_REDACTION_H_

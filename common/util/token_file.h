// The security files shared by shardcast-server and its clients: PEM certificates and
// keys (--tls-*), and the bearer-token file (--auth-token-file: the server accepts every
// token in it, a client sends the first). One token a line; blank lines and lines starting with '#'
// are ignored; surrounding whitespace is trimmed, so a file written by `echo` or an editor works as
// is.
#ifndef SHARDCAST_COMMON_UTIL_TOKEN_FILE_H_
#define SHARDCAST_COMMON_UTIL_TOKEN_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardcast {

// The tokens of `text`, in file order. A token holding whitespace, a control character
// or a non-ASCII byte is refused (it could not travel in an `authorization: Bearer`
// header unchanged).
absl::StatusOr<std::vector<std::string>> ParseTokens(absl::string_view text);

// The text of the PEM file `path` given as `flag` (for the message): NOT_FOUND when it
// cannot be opened, INVALID_ARGUMENT when it is empty or holds no PEM block.
absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path);

// Reads and parses `path`. Errors name the file; a file without any token is an error
// (an empty allow-list would lock every client out, which is never what is meant).
// The tokens themselves never appear in an error message.
absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_UTIL_TOKEN_FILE_H_

// Reading a file that a user or another process can replace: the index cache, token and
// TLS files, info.json. Such a path may name a FIFO (open() would block until a writer
// comes, and with it SIGTERM handling), a device such as /dev/zero (read() never ends),
// a directory, or a regular file far larger than it should be (read whole, it takes the
// memory). ReadRegularFile opens without blocking, refuses anything but a regular file,
// and checks the size before it reads a byte.
#ifndef SHARDCAST_COMMON_UTIL_REGULAR_FILE_H_
#define SHARDCAST_COMMON_UTIL_REGULAR_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace shardcast {

// The whole content of the regular file at `path`, at most `max_bytes` long. Errors say
// what was wrong (the caller names the file): NOT_FOUND (no such file),
// FAILED_PRECONDITION (not a regular file: says which kind; or larger than `max_bytes`:
// says both sizes), PERMISSION_DENIED, UNAVAILABLE (an error of the host: EMFILE, EIO,
// ...; the errno's text). A file that shrinks while being read gives what was there;
// one that grows gives the size it had when opened.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_UTIL_REGULAR_FILE_H_

// ReadRegularFile (see regular_file.h).
#include "common/util/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardcast {
namespace {

absl::Status ErrnoError(int error, const char* what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

const char* KindOf(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer; it changes
  // nothing for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return ErrnoError(errno, "cannot open");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError(errno, "cannot stat");
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(KindOf(st.st_mode), ", not a regular file; not read"));
  }
  if (st.st_size > max_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(st.st_size, " bytes, more than the ",
                                                      max_bytes, " this file may hold; not read"));
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::pread(fd, data.data() + got, data.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(errno, "read failed");
    if (n == 0) break;  // shrunk since fstat
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  return data;
}

}  // namespace shardcast

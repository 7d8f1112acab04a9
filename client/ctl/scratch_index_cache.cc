#include "client/ctl/scratch_index_cache.h"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardcast::ctl {
namespace {

namespace fs = std::filesystem;

// Whether `path` is `dir` or lies inside it.
bool Within(const fs::path& path, const fs::path& dir) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(path, ec);
  const fs::path d = fs::weakly_canonical(dir, ec);
  if (ec) return false;
  auto [d_end, p_at] = std::mismatch(d.begin(), d.end(), p.begin(), p.end());
  return d_end == d.end();
}

}  // namespace

absl::StatusOr<ScratchIndexCache> ScratchIndexCache::Use(const std::string& dataset,
                                                         IndexOptions* options) {
  if (!options->cache_dir.empty()) {
    options->samples_on_disk = true;
    return ScratchIndexCache("");
  }
  const char* tmpdir = ::getenv("TMPDIR");
  const fs::path base = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
  std::error_code ec;
  if (fs::is_directory(dataset, ec) && Within(base, dataset)) return ScratchIndexCache("");
  std::string dir = (base / "shardcast-ctl-index.XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) {
    return absl::UnavailableError(
        absl::StrCat(dir, ": cannot make a temporary index cache: ", std::strerror(errno)));
  }
  options->cache_dir = dir;
  options->samples_on_disk = true;
  return ScratchIndexCache(std::move(dir));
}

ScratchIndexCache::~ScratchIndexCache() {
  if (owned_.empty()) return;
  std::error_code ec;
  fs::remove_all(owned_, ec);  // best effort: a leftover in $TMPDIR harms nothing
}

}  // namespace shardcast::ctl

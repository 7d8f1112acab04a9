// Memory available to the process, from cgroups or the machine (see memory_limit.h).
#include "server/base/memory_limit.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shardcast::server {
namespace {

std::optional<std::string> ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return std::string(absl::StripAsciiWhitespace(line));
}

// A limit file's value in bytes; nullopt for "max", a missing file or garbage.
std::optional<int64_t> ReadLimit(const std::string& path) {
  std::optional<std::string> text = ReadFirstLine(path);
  int64_t value = 0;
  if (!text.has_value() || *text == "max" || !absl::SimpleAtoi(*text, &value) || value <= 0) {
    return std::nullopt;
  }
  return value;
}

// The cgroup path of `controller` ("" = the v2 unified hierarchy) in /proc/self/cgroup:
// lines "0::/path" (v2) or "4:memory:/path" (v1; controllers may be comma-joined).
std::optional<std::string> CgroupPath(const std::string& root, const std::string& controller) {
  std::ifstream in(root + "/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    const std::vector<absl::string_view> controllers = absl::StrSplit(parts[1], ',');
    if (controller.empty() ? parts[1].empty() : absl::c_linear_search(controllers, controller)) {
      return parts[2];
    }
  }
  return std::nullopt;
}

// The first limit found among the candidate files: the process's own cgroup, then the
// hierarchy's root (inside a container with its own cgroup namespace the path is "/",
// and some runtimes mount the container's cgroup at the root).
std::optional<std::pair<int64_t, std::string>> FirstLimit(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (std::optional<int64_t> limit = ReadLimit(path)) return std::make_pair(*limit, path);
  }
  return std::nullopt;
}

}  // namespace

MemoryLimit AvailableMemory(const std::string& root, int64_t physical_bytes) {
  const std::string sys = root + "/sys/fs/cgroup";
  std::vector<std::string> candidates;
  if (std::optional<std::string> v2 = CgroupPath(root, "")) {
    candidates.push_back(absl::StrCat(sys, *v2 == "/" ? "" : *v2, "/memory.max"));
  }
  candidates.push_back(sys + "/memory.max");
  if (std::optional<std::string> v1 = CgroupPath(root, "memory")) {
    candidates.push_back(
        absl::StrCat(sys, "/memory", *v1 == "/" ? "" : *v1, "/memory.limit_in_bytes"));
  }
  candidates.push_back(sys + "/memory/memory.limit_in_bytes");
  if (auto limit = FirstLimit(candidates); limit.has_value() && limit->first < physical_bytes) {
    // v1 reports "no limit" as a huge number: only a limit below the machine counts.
    return MemoryLimit{limit->first, absl::StrCat("cgroup limit ", limit->second)};
  }
  return MemoryLimit{physical_bytes, "physical memory"};
}

MemoryLimit AvailableMemory() {
  const int64_t pages = sysconf(_SC_PHYS_PAGES);
  const int64_t page_size = sysconf(_SC_PAGESIZE);
  const int64_t physical = pages > 0 && page_size > 0 ? pages * page_size : (int64_t{8} << 30);
  return AvailableMemory("", physical);
}

}  // namespace shardcast::server

// shardcast-server's command line: its flags (with --help text and defaults), and the
// checks that make a bad command line exit 2 before anything starts.
#ifndef SHARDCAST_SERVER_SERVER_FLAGS_H_
#define SHARDCAST_SERVER_SERVER_FLAGS_H_

#include <string>

#include "absl/status/status.h"
#include "server/base/log.h"
#include "server/net/descriptor_limit.h"
#include "server/serving/server_options.h"

namespace shardcast::server {

struct ServerCommandLine {
  ServerOptions options;
  // RLIMIT_NOFILE as raised at start (set before parsing): the default
  // --max-connections derives from it.
  DescriptorLimit descriptors;
  LogLevel log_level = LogLevel::kInfo;
  bool help = false;
  bool version = false;
  std::string help_text;  // with help
};

// Parses argv into `cl` (whose `descriptors` the caller set). INVALID_ARGUMENT names
// the flag and what is wrong with it.
absl::Status ParseServerCommandLine(int argc, char** argv, ServerCommandLine* cl);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_SERVER_FLAGS_H_

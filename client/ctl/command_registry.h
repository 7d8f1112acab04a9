// shardcast-ctl subcommands register themselves here, one file each, so a
// subcommand is added by adding a file (see client/CMakeLists.txt).
#ifndef SHARDCAST_CLIENT_CTL_COMMAND_REGISTRY_H_
#define SHARDCAST_CLIENT_CTL_COMMAND_REGISTRY_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace shardcast::ctl {

struct Command {
  std::string summary;  // one line for `shardcast-ctl --help`
  // argv after the subcommand name; returns the process exit code.
  std::function<int(const std::vector<std::string>& args)> run;
};

std::map<std::string, Command>& Commands();

struct RegisterCommand {
  RegisterCommand(const std::string& name, Command command) {
    Commands().emplace(name, std::move(command));
  }
};

}  // namespace shardcast::ctl

#endif  // SHARDCAST_CLIENT_CTL_COMMAND_REGISTRY_H_

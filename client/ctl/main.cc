// shardcast-ctl: inspect datasets, print epoch plans, query a running server.
#include <cstdio>
#include <string>
#include <vector>

#include "client/ctl/command_registry.h"

namespace shardcast::ctl {
std::map<std::string, Command>& Commands() {
  static auto* commands = new std::map<std::string, Command>();
  return *commands;
}
}  // namespace shardcast::ctl

namespace {
void PrintUsage(FILE* out) {
  std::fprintf(out, "usage: shardcast-ctl COMMAND [ARGS...]   (COMMAND --help for its flags)\n\n");
  for (const auto& [name, command] : shardcast::ctl::Commands()) {
    std::fprintf(out, "  %-10s %s\n", name.c_str(), command.summary.c_str());
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    PrintUsage(stdout);
    return 0;
  }
  auto& commands = shardcast::ctl::Commands();
  auto it = commands.find(name);
  if (it == commands.end()) {
    std::fprintf(stderr, "shardcast-ctl: unknown command '%s'\n\n", name.c_str());
    PrintUsage(stderr);
    return 2;
  }
  return it->second.run(std::vector<std::string>(argv + 2, argv + argc));
}

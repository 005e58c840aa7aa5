// hixlrun: the command line.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace hixlrun {

struct Options {
  int np = 0;
  bool prefix_output = false;
  std::optional<double> timeout_s;
  int kill_grace_ms = 2000;
  std::vector<std::string> env;  // NAME=VALUE
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free one
  std::vector<std::string> command;
};

// Parses and checks the command line into opts.  Returns the exit code to use
// when the launcher must not run (0 after --help or --version, kExitUsage on
// a usage error, with a message printed), or nullopt.
std::optional<int> parse_options(int argc, char **argv, Options &opts);

}  // namespace hixlrun

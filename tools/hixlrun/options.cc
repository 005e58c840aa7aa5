// hixlrun: the command line (CLI11): options, help text and checks.
#include "options.h"

#include <CLI/CLI.hpp>

#include <limits>
#include <memory>
#include <string_view>
#include <utility>

#include "util.h"

#ifndef HIXL_VERSION
#define HIXL_VERSION "0.1.0"
#endif

namespace hixlrun {
namespace {

const char *const kReservedVars[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",    "LOCAL_WORLD_SIZE",
                                     "MASTER_ADDR", "MASTER_PORT", "HIXL_LAUNCHER", "HIXL_STORE_FD"};

class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App *, std::string name) const override {
    return "Usage: " + name + " -n N [OPTIONS] PROGRAM [ARGS...]\n";
  }
};

}  // namespace

std::optional<int> parse_options(int argc, char **argv, Options &opts) {
  CLI::App app{"Start N local processes of PROGRAM as the ranks of a hixl job.", "hixlrun"};
  app.formatter(std::make_shared<UsageFormatter>());
  app.footer(
      "Everything from PROGRAM on is passed to the ranks untouched (use '--' before a PROGRAM\n"
      "that starts with '-').\n\n"
      "Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT\n"
      "and HIXL_LAUNCHER=hixlrun, and HIXL_SECRET: a fresh random job secret, unless HIXL_SECRET\n"
      "or HIXL_SECRET_FILE is set already (then that one is passed on).  Each rank runs in a process group of its own. "
      " When a rank\n"
      "fails, the process groups of all ranks get SIGTERM and, after --kill-grace, SIGKILL.\n"
      "SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to hixlrun are forwarded to the ranks, which\n"
      "are likewise killed if they are still running after --kill-grace.  Processes a rank\n"
      "leaves running in its process group when it exits are stopped the same way.\n\n"
      "Exit status: the first non-zero rank status (128+S for a rank killed by signal S),\n"
      "124 on timeout, 127 if PROGRAM is not found, 126 if it cannot be executed,\n"
      "2 on a usage error, 0 when all ranks succeed.");
  app.prefix_command();
  app.set_version_flag("--version", std::string("hixlrun (hixl) ") + HIXL_VERSION);

  app.add_option("-n,--np", opts.np, "Number of ranks to start")->required()->check(CLI::Range(1, 1 << 20));
  app.add_flag("-p,--prefix-output", opts.prefix_output, "Prefix every output line of a rank with '[rank] '");
  double timeout = 0;
  auto *timeout_opt = app.add_option("--timeout", timeout, "Stop all ranks and exit 124 after SECONDS")
                          ->type_name("SECONDS")
                          ->check(CLI::PositiveNumber);
  app.add_option("--kill-grace", opts.kill_grace_ms, "Milliseconds between SIGTERM and SIGKILL when stopping ranks")
      ->type_name("MS")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()))
      ->capture_default_str();
  app.add_option("-x,--env", opts.env, "Set NAME=VALUE in the environment of the ranks (repeatable)")
      ->type_name("NAME=VALUE")
      ->allow_extra_args(false);
  app.add_option("--master-addr", opts.master_addr, "Value of MASTER_ADDR")->capture_default_str();
  app.add_option("--master-port", opts.master_port, "Value of MASTER_PORT (default: a free port on MASTER_ADDR)")
      ->check(CLI::Range(1, 65535));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }

  std::vector<std::string> rest = app.remaining();
  // prefix_command() keeps an explicit "--" separator; drop it.
  if (!rest.empty() && rest.front() == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && rest.front().size() > 1 && rest.front()[0] == '-') {
    // With prefix_command() CLI11 files unknown options before PROGRAM as extras.
    message("unknown option '" + rest.front() + "' (run 'hixlrun --help')");
    return kExitUsage;
  }
  if (rest.empty()) {
    message("no program given (run 'hixlrun --help')");
    return kExitUsage;
  }
  opts.command = std::move(rest);
  if (timeout_opt->count() > 0) opts.timeout_s = timeout;

  if (opts.master_addr.empty()) {
    message("--master-addr must not be empty");
    return kExitUsage;
  }
  for (const std::string &kv : opts.env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      message("-x expects NAME=VALUE, got '" + kv + "'");
      return kExitUsage;
    }
    std::string_view name(kv.data(), eq);
    for (const char *reserved : kReservedVars) {
      if (name == reserved) {
        message("-x cannot set " + std::string(name) + ", hixlrun sets it (see --master-addr/--master-port)");
        return kExitUsage;
      }
    }
  }
  return std::nullopt;
}

}  // namespace hixlrun

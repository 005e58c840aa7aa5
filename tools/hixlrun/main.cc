// hixlrun: start N local processes of one program as the ranks of a hixl job.
//
//   hixlrun -n N [options] prog args...
//
// Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT and HIXL_LAUNCHER=hixlrun in its environment.  Every rank runs
// in a process group of its own, so that stopping a rank also stops whatever
// it started.  The launcher waits for the ranks with poll() on a signalfd
// (SIGCHLD and the signals it forwards) and, with --prefix-output, on the
// ranks' output pipes; it never busy-waits.
//
// Exit status: 0 when all ranks succeed; otherwise the first non-zero rank
// status (128+S for a rank killed by signal S); 124 on --timeout; 127 (126)
// when the program cannot be found (executed); 2 on a usage error; 1 on an
// internal error of the launcher.
//
// This file holds main(); the parts are options.cc (the command line),
// processes.cc (starting the ranks, signals), output.cc (--prefix-output),
// launcher.cc (the loop) and util.cc.
#include <utility>

#include "launcher.h"
#include "options.h"
#include "util.h"

int main(int argc, char **argv) {
  hixlrun::ensure_std_fds();
  hixlrun::Options opts;
  if (auto rc = hixlrun::parse_options(argc, argv, opts)) return *rc;
  hixlrun::Launcher launcher(std::move(opts));
  return launcher.run();
}

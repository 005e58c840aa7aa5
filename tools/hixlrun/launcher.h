// hixlrun: the job: the ranks, their output streams, and the Launcher that
// starts them, forwards signals and output, and stops them.  Its methods live
// in launcher.cc (the loop), processes.cc (spawning, signals, exits) and
// output.cc (forwarding output with --prefix-output).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "options.h"

namespace hixlrun {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

struct Stream {
  int fd = -1;          // read end of the pipe, -1 once closed
  int dest = -1;        // STDOUT_FILENO or STDERR_FILENO
  std::string partial;  // bytes after the last newline seen
};

struct Rank {
  int index = 0;
  pid_t pid = -1;  // also the process group id
  bool exited = false;
  int status = 0;  // exit code, or 128+signal
  Stream out, err;
};

class Launcher {
 public:
  explicit Launcher(Options opts) : opts_(std::move(opts)) {}
  int run();

 private:
  bool setup_signals();
  // Starts all ranks.  On failure sets launch_error_ and keeps the ranks that
  // were started (the caller then stops them).
  void start_ranks(int port);
  bool spawn(Rank &rank, const std::vector<std::string> &env, const std::vector<std::string> &candidates);
  void main_loop();
  void handle_signalfd();
  // Takes the ranks that have exited.  `first`: the pid that SIGCHLD named
  // (0: none).  Children that exit while hixlrun is not reading (stopped,
  // or busy) raise one SIGCHLD between them, the first one's: that rank is
  // taken first, so that a failure is blamed on the rank that failed first
  // rather than on the lowest-numbered rank that exited.
  void check_children(pid_t first = 0);
  // The exit of rank r, if it has exited (not reaped: WNOWAIT).
  void check_child(Rank &r);
  void rank_exited(Rank &r, int status, bool signaled);
  void start_stopping(int sig);
  void signal_all(int sig);
  bool all_exited() const;
  std::set<pid_t> groups() const;
  void read_stream(Rank &r, Stream &s, bool until_eof);
  void emit(const Rank &r, Stream &s, bool flush_partial);
  void dest_broken(int dest);
  void final_drain();

  Options opts_;
  std::vector<Rank> ranks_;
  int sigfd_ = -1;
  int store_fd_ = -1;  // rank 0's store socket until rank 0 is started
  sigset_t orig_mask_{};
  sigset_t handled_{};
  bool sigpipe_ignored_at_entry_ = false;

  std::optional<Clock::time_point> deadline_;  // --timeout
  bool stopping_ = false;
  Clock::time_point kill_at_{};
  bool killed_ = false;
  Clock::time_point killed_at_{};
  bool leftovers_reported_ = false;

  bool timed_out_ = false;
  int first_failure_ = 0;
  int forwarded_signal_ = 0;
  int launch_error_ = 0;
  bool dest_broken_[3] = {false, false, false};
};

// Returns true when some process that is not a zombie belongs to one of pgids
// (read from /proc).
bool any_group_alive(const std::set<pid_t> &pgids);

}  // namespace hixlrun

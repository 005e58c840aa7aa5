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

#include <CLI/CLI.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

extern char **environ;

#ifndef HIXL_VERSION
#define HIXL_VERSION "0.1.0"
#endif

namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

constexpr int kExitUsage = 2;
constexpr int kExitInternal = 1;
constexpr int kExitTimeout = 124;
constexpr int kExitCannotExecute = 126;
constexpr int kExitNotFound = 127;

// A line longer than this is emitted in pieces (each piece gets its own
// prefix) so that a rank printing without newlines cannot exhaust memory.
constexpr std::size_t kMaxLine = 1 << 20;
constexpr std::size_t kReadChunk = 1 << 16;
// At most this much is read from a pipe once the job has ended.
constexpr std::size_t kMaxDrain = 16 << 20;
// How often leftover processes are looked for once all ranks have exited.
constexpr Millis kLeftoverPoll{20};
// How long to wait for processes that survive SIGKILL (e.g. stuck in D state).
constexpr Millis kAfterKillWait{3000};

const char *const kReservedVars[] = {"RANK",        "WORLD_SIZE", "LOCAL_RANK",   "LOCAL_WORLD_SIZE",
                                     "MASTER_ADDR", "MASTER_PORT", "HIXL_LAUNCHER"};

// ---------------------------------------------------------------------------
// Small helpers

// Writes all of [data, data+len) to fd.  Copes with EINTR, short writes and a
// non-blocking descriptor inherited from the caller.  Returns false on error.
bool write_all(int fd, const char *data, std::size_t len) {
  while (len > 0) {
    ssize_t w = ::write(fd, data, len);
    if (w > 0) {
      data += w;
      len -= static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, -1) < 0 && errno != EINTR) return false;
      continue;
    }
    return false;
  }
  return true;
}

// Prints "hixlrun: <msg>\n" to stderr as a single write.
void message(const std::string &msg) {
  std::string line = "hixlrun: " + msg + "\n";
  (void)write_all(STDERR_FILENO, line.data(), line.size());
}

std::string errno_text(int err) { return std::strerror(err); }

// "SIGINT", or "signal N" for a signal without a name.
std::string signal_name(int sig) {
  const char *abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string format_seconds(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::string signal_text(int sig) {
  const char *abbrev = sigabbrev_np(sig);
  const char *desc = sigdescr_np(sig);
  std::string s = std::to_string(sig);
  if (abbrev != nullptr) s += std::string(" (SIG") + abbrev + (desc != nullptr ? std::string(": ") + desc : "") + ")";
  return s;
}

void close_fd(int &fd) {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
}

// Make sure descriptors 0, 1 and 2 are open, so that pipes created later can
// never land on them.
void ensure_std_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int n = ::open("/dev/null", O_RDWR);
      if (n >= 0 && n != fd) {
        ::dup2(n, fd);
        ::close(n);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Command line

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

class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App *, std::string name) const override {
    return "Usage: " + name + " -n N [OPTIONS] PROGRAM [ARGS...]\n";
  }
};

// Returns the exit code to use when the launcher must not run, or nullopt.
std::optional<int> parse_options(int argc, char **argv, Options &opts) {
  CLI::App app{"Start N local processes of PROGRAM as the ranks of a hixl job.", "hixlrun"};
  app.formatter(std::make_shared<UsageFormatter>());
  app.footer(
      "Everything from PROGRAM on is passed to the ranks untouched (use '--' before a PROGRAM\n"
      "that starts with '-').\n\n"
      "Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT\n"
      "and HIXL_LAUNCHER=hixlrun.  Each rank runs in a process group of its own.  When a rank\n"
      "fails, the process groups of all ranks get SIGTERM and, after --kill-grace, SIGKILL.\n"
      "SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to hixlrun are forwarded to the ranks, which\n"
      "are likewise killed if they are still running after --kill-grace.  Processes a rank\n"
      "leaves running in its process group when it exits are stopped the same way.\n\n"
      "Exit status: the first non-zero rank status (128+S for a rank killed by signal S),\n"
      "124 on timeout, 127 if PROGRAM is not found, 126 if it cannot be executed,\n"
      "2 on a usage error, 0 when all ranks succeed.");
  app.prefix_command();
  app.set_version_flag("--version", std::string("hixlrun (hixl) ") + HIXL_VERSION);

  app.add_option("-n,--np", opts.np, "Number of ranks to start")
      ->required()
      ->check(CLI::Range(1, 1 << 20));
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

// Picks a free TCP port on addr by binding port 0 and closing the socket.
// Returns 0 and prints a message on failure.
int pick_free_port(const std::string &addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo *res = nullptr;
  int gai = ::getaddrinfo(addr.c_str(), "0", &hints, &res);
  if (gai != 0) {
    message("cannot resolve MASTER_ADDR '" + addr + "': " + ::gai_strerror(gai));
    return 0;
  }
  int port = 0;
  int last_err = 0;
  for (addrinfo *ai = res; ai != nullptr && port == 0; ai = ai->ai_next) {
    int s = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (s < 0) {
      last_err = errno;
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::bind(s, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(s, reinterpret_cast<sockaddr *>(&ss), &len) == 0) {
      if (ss.ss_family == AF_INET) {
        port = ntohs(reinterpret_cast<sockaddr_in *>(&ss)->sin_port);
      } else if (ss.ss_family == AF_INET6) {
        port = ntohs(reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_port);
      }
    } else {
      last_err = errno;
    }
    ::close(s);
  }
  ::freeaddrinfo(res);
  if (port == 0) {
    message("cannot pick a free port on MASTER_ADDR '" + addr + "': " + errno_text(last_err) +
            " (use --master-port)");
  }
  return port;
}

// ---------------------------------------------------------------------------
// Program lookup (the PATH search of execvp, done before fork so that the
// child only has to call execve).

std::vector<std::string> exec_candidates(const std::string &prog, const std::string &path) {
  if (prog.find('/') != std::string::npos) return {prog};
  if (prog.empty()) return {};
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    std::size_t colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    out.push_back(dir + "/" + prog);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

// ---------------------------------------------------------------------------
// Processes running in a given set of process groups, read from /proc.

// Returns true when some process that is not a zombie belongs to one of pgids.
bool any_group_alive(const std::set<pid_t> &pgids) {
  if (pgids.empty()) return false;
  DIR *d = ::opendir("/proc");
  if (d == nullptr) return false;
  bool alive = false;
  char buf[512];
  while (!alive) {
    dirent *e = ::readdir(d);
    if (e == nullptr) break;
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    std::string path = std::string("/proc/") + e->d_name + "/stat";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) continue;
    buf[n] = '\0';
    // Format: pid (comm) state ppid pgrp ...; comm may contain anything.
    const char *rp = std::strrchr(buf, ')');
    if (rp == nullptr) continue;
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (std::sscanf(rp + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3) continue;
    if (state == 'Z' || state == 'X' || state == 'x') continue;
    if (pgids.count(static_cast<pid_t>(pgrp)) != 0) alive = true;
  }
  ::closedir(d);
  return alive;
}

// ---------------------------------------------------------------------------
// The job

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
  void check_children();
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

bool Launcher::setup_signals() {
  struct sigaction old {};
  ::sigaction(SIGPIPE, nullptr, &old);
  sigpipe_ignored_at_entry_ = old.sa_handler == SIG_IGN;
  // Writes to a closed stdout/stderr must fail with EPIPE, not kill us.
  ::signal(SIGPIPE, SIG_IGN);
  // An inherited SIG_IGN for SIGCHLD would make the kernel reap the ranks.
  ::signal(SIGCHLD, SIG_DFL);

  sigemptyset(&handled_);
  sigaddset(&handled_, SIGCHLD);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    // A signal ignored by whoever started us (e.g. SIGINT for a background
    // job of a script) stays ignored and is not forwarded.
    struct sigaction sa {};
    ::sigaction(sig, nullptr, &sa);
    if (sa.sa_handler != SIG_IGN) sigaddset(&handled_, sig);
  }
  if (::sigprocmask(SIG_BLOCK, &handled_, &orig_mask_) != 0) {
    message(std::string("sigprocmask: ") + errno_text(errno));
    return false;
  }
  sigfd_ = ::signalfd(-1, &handled_, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd_ < 0) {
    message(std::string("signalfd: ") + errno_text(errno));
    return false;
  }
  return true;
}

int Launcher::run() {
  if (!setup_signals()) return kExitInternal;

  int port = opts_.master_port;
  if (port == 0) port = pick_free_port(opts_.master_addr);
  if (port == 0) return kExitInternal;

  if (opts_.timeout_s) {
    auto ms = static_cast<int64_t>(std::ceil(*opts_.timeout_s * 1000.0));
    deadline_ = Clock::now() + Millis(ms);
  }

  start_ranks(port);
  if (launch_error_ != 0 && !ranks_.empty()) start_stopping(SIGTERM);
  main_loop();
  final_drain();

  // The ranks were left as zombies until now so that their pids (and with
  // them the process group ids we signal) could not be reused.
  for (Rank &r : ranks_) {
    while (::waitpid(r.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }

  if (launch_error_ != 0) return launch_error_;
  if (timed_out_) return kExitTimeout;
  if (first_failure_ != 0) return first_failure_;
  if (forwarded_signal_ != 0) return 128 + forwarded_signal_;
  return 0;
}

void Launcher::start_ranks(int port) {
  // Environment shared by all ranks: ours minus the variables we set.
  std::vector<std::pair<std::string, std::string>> set_vars;
  for (const std::string &kv : opts_.env) {
    auto eq = kv.find('=');
    std::string name = kv.substr(0, eq);
    std::string value = kv.substr(eq + 1);
    auto it = std::find_if(set_vars.begin(), set_vars.end(), [&](const auto &p) { return p.first == name; });
    if (it != set_vars.end()) {
      it->second = value;  // the last -x wins
    } else {
      set_vars.emplace_back(name, value);
    }
  }
  const std::string n = std::to_string(opts_.np);
  set_vars.emplace_back("WORLD_SIZE", n);
  set_vars.emplace_back("LOCAL_WORLD_SIZE", n);
  set_vars.emplace_back("MASTER_ADDR", opts_.master_addr);
  set_vars.emplace_back("MASTER_PORT", std::to_string(port));
  set_vars.emplace_back("HIXL_LAUNCHER", "hixlrun");

  std::vector<std::string> base;
  for (char **e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    std::string_view name = kv.substr(0, kv.find('='));
    bool overridden = name == "RANK" || name == "LOCAL_RANK" ||
                      std::any_of(set_vars.begin(), set_vars.end(), [&](const auto &p) { return p.first == name; });
    if (!overridden) base.emplace_back(kv);
  }
  std::string path;
  bool path_set = false;
  for (const auto &[name, value] : set_vars) {
    base.push_back(name + "=" + value);
    if (name == "PATH") {
      path = value;
      path_set = true;
    }
  }
  // Search the PATH the ranks will see, like execvp in the rank would.
  if (!path_set) {
    const char *p = std::getenv("PATH");
    path = p != nullptr ? p : "/bin:/usr/bin";
  }
  std::vector<std::string> candidates = exec_candidates(opts_.command[0], path);

  ranks_.reserve(static_cast<std::size_t>(opts_.np));
  for (int i = 0; i < opts_.np; ++i) {
    std::vector<std::string> env = base;
    env.push_back("RANK=" + std::to_string(i));
    env.push_back("LOCAL_RANK=" + std::to_string(i));
    Rank r;
    r.index = i;
    if (!spawn(r, env, candidates)) return;
    ranks_.push_back(std::move(r));
  }
}

bool Launcher::spawn(Rank &rank, const std::vector<std::string> &env, const std::vector<std::string> &candidates) {
  // Everything the child needs is prepared here: after fork it may only
  // call async-signal-safe functions.
  std::vector<char *> argv;
  for (const std::string &a : opts_.command) argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  // For a file without a #! line, execvp falls back to running it with sh.
  static char sh_path[] = "/bin/sh";
  std::vector<char *> sh_argv;
  sh_argv.push_back(sh_path);
  sh_argv.push_back(nullptr);  // the script, filled in by the child
  for (std::size_t i = 1; i < opts_.command.size(); ++i) sh_argv.push_back(argv[i]);
  sh_argv.push_back(nullptr);
  std::vector<char *> envp;
  for (const std::string &e : env) envp.push_back(const_cast<char *>(e.c_str()));
  envp.push_back(nullptr);
  std::vector<const char *> cand;
  for (const std::string &c : candidates) cand.push_back(c.c_str());

  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  int status_pipe[2] = {-1, -1};  // reports exec failure; closed by a successful exec
  auto close_all = [&] {
    for (int *p : {out_pipe, err_pipe, status_pipe}) {
      close_fd(p[0]);
      close_fd(p[1]);
    }
  };
  if ((opts_.prefix_output && (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)) ||
      ::pipe2(status_pipe, O_CLOEXEC) != 0) {
    message("cannot create pipes for rank " + std::to_string(rank.index) + ": " + errno_text(errno));
    close_all();
    launch_error_ = kExitInternal;
    return false;
  }

  const pid_t parent = ::getpid();
  const bool reset_sigpipe = !sigpipe_ignored_at_entry_;
  const sigset_t child_mask = orig_mask_;

  pid_t pid = ::fork();
  if (pid < 0) {
    message("cannot start rank " + std::to_string(rank.index) + ": fork: " + errno_text(errno));
    close_all();
    launch_error_ = kExitInternal;
    return false;
  }
  if (pid == 0) {
    // Child.
    ::setpgid(0, 0);
    // Do not outlive a launcher that is killed with SIGKILL.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(kExitInternal);
    if (out_pipe[1] >= 0) {
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
    }
    ::signal(SIGCHLD, SIG_DFL);
    if (reset_sigpipe) ::signal(SIGPIPE, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &child_mask, nullptr);

    int err = ENOENT;
    bool got_eacces = false;
    for (const char *c : cand) {
      ::execve(c, argv.data(), envp.data());
      int e = errno;
      if (e == ENOEXEC) {
        sh_argv[1] = const_cast<char *>(c);
        ::execve(sh_path, sh_argv.data(), envp.data());
        e = errno;
      }
      if (e == EACCES) {
        got_eacces = true;
      } else if (e != ENOENT && e != ENOTDIR && e != ESTALE && e != ETIMEDOUT && e != ENODEV && e != ELOOP &&
                 e != ENAMETOOLONG) {
        err = e;
        break;
      }
      err = e;
    }
    if (got_eacces && (err == ENOENT || err == ENOTDIR || err == ESTALE || err == ETIMEDOUT || err == ENODEV ||
                       err == ELOOP || err == ENAMETOOLONG)) {
      err = EACCES;
    }
    ssize_t ignored = ::write(status_pipe[1], &err, sizeof err);
    (void)ignored;
    ::_exit(kExitNotFound);
  }

  // Parent.  Set the group here as well, so that it exists as soon as fork
  // returns (fails harmlessly if the child has already exec'd).
  ::setpgid(pid, pid);
  rank.pid = pid;
  close_fd(out_pipe[1]);
  close_fd(err_pipe[1]);
  close_fd(status_pipe[1]);

  int child_err = 0;
  ssize_t n;
  do {
    n = ::read(status_pipe[0], &child_err, sizeof child_err);
  } while (n < 0 && errno == EINTR);
  close_fd(status_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof child_err)) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    message("cannot execute '" + opts_.command[0] + "': " + errno_text(child_err));
    close_all();
    launch_error_ = child_err == ENOENT ? kExitNotFound : kExitCannotExecute;
    return false;
  }

  if (opts_.prefix_output) {
    for (int fd : {out_pipe[0], err_pipe[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    rank.out.fd = std::exchange(out_pipe[0], -1);
    rank.out.dest = STDOUT_FILENO;
    rank.err.fd = std::exchange(err_pipe[0], -1);
    rank.err.dest = STDERR_FILENO;
  }
  return true;
}

bool Launcher::all_exited() const {
  return std::all_of(ranks_.begin(), ranks_.end(), [](const Rank &r) { return r.exited; });
}

std::set<pid_t> Launcher::groups() const {
  std::set<pid_t> g;
  for (const Rank &r : ranks_) g.insert(r.pid);
  return g;
}

void Launcher::signal_all(int sig) {
  // Ranks are not reaped before the end, so each pid still names its group.
  for (const Rank &r : ranks_) {
    ::kill(-r.pid, sig);
    if (sig == SIGTERM) ::kill(-r.pid, SIGCONT);  // a stopped process must wake up to die
  }
}

void Launcher::start_stopping(int sig) {
  if (!stopping_) {
    stopping_ = true;
    kill_at_ = Clock::now() + Millis(opts_.kill_grace_ms);
  }
  signal_all(sig);
}

void Launcher::rank_exited(Rank &r, int status, bool signaled) {
  r.exited = true;
  r.status = signaled ? 128 + status : status;
  if (r.status == 0) return;
  bool first = first_failure_ == 0;
  if (first) first_failure_ = r.status;
  if (!first || stopping_) return;  // expected while stopping
  std::string what = signaled ? "was killed by signal " + signal_text(status)
                              : "exited with code " + std::to_string(status);
  bool others = ranks_.size() > 1;
  message("rank " + std::to_string(r.index) + " (pid " + std::to_string(r.pid) + ") " + what +
          (others ? "; stopping the other ranks" : ""));
  start_stopping(SIGTERM);
}

void Launcher::check_children() {
  for (Rank &r : ranks_) {
    if (r.exited) continue;
    siginfo_t info{};
    // WNOWAIT: leave the rank a zombie, so that its pid stays reserved.
    if (::waitid(P_PID, static_cast<id_t>(r.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      if (errno == ECHILD) rank_exited(r, kExitInternal, false);  // cannot happen; do not hang
      continue;
    }
    if (info.si_pid != r.pid) continue;
    if (info.si_code == CLD_EXITED) {
      rank_exited(r, info.si_status, false);
    } else if (info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED) {
      rank_exited(r, info.si_status, true);
    }
  }
}

void Launcher::handle_signalfd() {
  bool child = false;
  while (true) {
    signalfd_siginfo si{};
    ssize_t n = ::read(sigfd_, &si, sizeof si);
    if (n != static_cast<ssize_t>(sizeof si)) break;
    int sig = static_cast<int>(si.ssi_signo);
    if (sig == SIGCHLD) {
      child = true;
      continue;
    }
    message("received " + signal_name(sig) + "; forwarding it to the ranks");
    if (forwarded_signal_ == 0) forwarded_signal_ = sig;
    start_stopping(sig);
  }
  if (child) check_children();
}

void Launcher::dest_broken(int dest) {
  // Our stdout/stderr is gone (e.g. a closed pipe).  Close the matching pipe
  // of every rank, so that the ranks see EPIPE/SIGPIPE as they would have
  // without --prefix-output.
  dest_broken_[dest] = true;
  for (Rank &r : ranks_) {
    for (Stream *s : {&r.out, &r.err}) {
      if (s->dest == dest) {
        close_fd(s->fd);
        s->partial.clear();
      }
    }
  }
}

void Launcher::emit(const Rank &r, Stream &s, bool flush_partial) {
  if (dest_broken_[s.dest]) {
    s.partial.clear();
    return;
  }
  const std::string prefix = "[" + std::to_string(r.index) + "] ";
  std::string out;
  std::size_t pos = 0;
  while (true) {
    std::size_t nl = s.partial.find('\n', pos);
    if (nl == std::string::npos) break;
    out += prefix;
    out.append(s.partial, pos, nl + 1 - pos);
    pos = nl + 1;
  }
  s.partial.erase(0, pos);
  // Over-long lines are cut; a partial last line is completed with a newline
  // so that the next line of another rank starts on a line of its own.
  while (s.partial.size() >= kMaxLine || (flush_partial && !s.partial.empty())) {
    std::size_t take = std::min(s.partial.size(), kMaxLine);
    out += prefix;
    out.append(s.partial, 0, take);
    out += '\n';
    s.partial.erase(0, take);
  }
  if (!out.empty() && !write_all(s.dest, out.data(), out.size())) dest_broken(s.dest);
}

void Launcher::read_stream(Rank &r, Stream &s, bool until_eof) {
  char buf[kReadChunk];
  std::size_t total = 0;
  do {
    if (s.fd < 0) return;
    // Bound the final drain: a process that escaped its group could keep
    // the pipe full forever.
    if (total >= kMaxDrain) return;
    ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n > 0) {
      s.partial.append(buf, static_cast<std::size_t>(n));
      total += static_cast<std::size_t>(n);
      emit(r, s, false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // EOF (or an error): flush what is left.
    emit(r, s, true);
    close_fd(s.fd);
    return;
  } while (until_eof);
}

void Launcher::main_loop() {
  std::vector<pollfd> fds;
  std::vector<std::pair<Rank *, Stream *>> owners;
  while (true) {
    const auto now = Clock::now();
    if (!stopping_ && deadline_ && now >= *deadline_) {
      timed_out_ = true;
      message("timeout of " + format_seconds(*opts_.timeout_s) + " s expired; stopping all ranks");
      start_stopping(SIGTERM);
    }
    if (stopping_ && !killed_ && now >= kill_at_) {
      signal_all(SIGKILL);
      killed_ = true;
      killed_at_ = now;
    }

    bool periodic = false;
    if (all_exited()) {
      // Processes the ranks left behind in their groups are stopped too.
      if (!any_group_alive(groups())) break;
      if (!stopping_) {
        if (!leftovers_reported_) {
          message("the ranks have exited but left processes running; stopping them");
          leftovers_reported_ = true;
        }
        start_stopping(SIGTERM);
      }
      if (killed_ && now - killed_at_ >= kAfterKillWait) {
        message("some processes of the ranks did not die after SIGKILL; giving up on them");
        break;
      }
      periodic = true;
    }

    // Sleep until something happens or the next deadline.
    std::optional<Clock::time_point> wake;
    auto earliest = [&](Clock::time_point t) {
      if (!wake || t < *wake) wake = t;
    };
    if (!stopping_ && deadline_) earliest(*deadline_);
    if (stopping_ && !killed_) earliest(kill_at_);
    if (periodic) earliest(now + kLeftoverPoll);
    int timeout_ms = -1;
    if (wake) {
      auto ms = std::chrono::ceil<Millis>(*wake - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(ms, 0, std::numeric_limits<int>::max()));
    }

    fds.clear();
    owners.clear();
    fds.push_back({sigfd_, POLLIN, 0});
    owners.emplace_back(nullptr, nullptr);
    for (Rank &r : ranks_) {
      for (Stream *s : {&r.out, &r.err}) {
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          owners.emplace_back(&r, s);
        }
      }
    }
    int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      message(std::string("poll: ") + errno_text(errno));
      // Do not leave the ranks behind.
      signal_all(SIGKILL);
      launch_error_ = kExitInternal;
      while (!all_exited()) {
        ::usleep(10000);
        check_children();
      }
      return;
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_stream(*owners[i].first, *owners[i].second, false);
    }
    if (fds[0].revents != 0) handle_signalfd();
  }
}

void Launcher::final_drain() {
  for (Rank &r : ranks_) {
    for (Stream *s : {&r.out, &r.err}) {
      // All writers are gone, unless one escaped its process group: read
      // what is there without waiting for more.
      read_stream(r, *s, true);
      if (s->fd >= 0) {
        emit(r, *s, true);
        close_fd(s->fd);
      }
    }
  }
}

}  // namespace

int main(int argc, char **argv) {
  ensure_std_fds();
  Options opts;
  if (auto rc = parse_options(argc, argv, opts)) return *rc;
  Launcher launcher(std::move(opts));
  return launcher.run();
}

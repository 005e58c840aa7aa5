// hixlrun: starting the ranks (environment, PATH search, fork and exec),
// signals (the signalfd, forwarding, stopping) and the ranks' exits.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "launcher.h"
#include "util.h"

namespace hixlrun {
namespace {

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
    // A view, not a string assigned ".": g++ 12 at -O3 misreads that
    // assignment as an overlapping copy (-Wrestrict, GCC bug 105329).
    std::string_view dir =
        std::string_view(path).substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    std::string cand(dir);
    cand.push_back('/');
    cand.append(prog);
    out.push_back(std::move(cand));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

}  // namespace

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
  // The job secret (docs/security.md): the user's, if given (in our
  // environment or by -x), passed through; else a fresh random one.
  auto given = [&](const char *name) {
    return std::getenv(name) != nullptr ||
           std::any_of(set_vars.begin(), set_vars.end(), [&](const auto &p) { return p.first == name; });
  };
  if (!given("HIXL_SECRET") && !given("HIXL_SECRET_FILE")) set_vars.emplace_back("HIXL_SECRET", new_secret_hex());

  std::vector<std::string> base;
  for (char **e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    std::string_view name = kv.substr(0, kv.find('='));
    bool overridden = name == "RANK" || name == "LOCAL_RANK" || name == "HIXL_STORE_FD" ||
                      std::any_of(set_vars.begin(), set_vars.end(), [&](const auto &p) { return p.first == name; });
    if (!overridden) base.emplace_back(kv);
  }
  std::string path;
  bool path_set = false;
  for (const auto &[name, value] : set_vars) {
    std::string kv;
    kv.reserve(name.size() + 1 + value.size());
    kv.append(name).append(1, '=').append(value);
    base.push_back(std::move(kv));
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
    if (i == 0 && store_fd_ >= 0) env.push_back("HIXL_STORE_FD=" + std::to_string(store_fd_));
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
  argv.reserve(opts_.command.size() + 1);
  for (const std::string &a : opts_.command) argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  // For a file without a #! line, execvp falls back to running it with sh.
  static char sh_path[] = "/bin/sh";
  std::vector<char *> sh_argv;
  sh_argv.reserve(opts_.command.size() + 2);
  sh_argv.push_back(sh_path);
  sh_argv.push_back(nullptr);  // the script, filled in by the child
  for (std::size_t i = 1; i < opts_.command.size(); ++i) sh_argv.push_back(argv[i]);
  sh_argv.push_back(nullptr);
  std::vector<char *> envp;
  envp.reserve(env.size() + 1);
  for (const std::string &e : env) envp.push_back(const_cast<char *>(e.c_str()));
  envp.push_back(nullptr);
  std::vector<const char *> cand;
  cand.reserve(candidates.size());
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
  const int store_fd = store_fd_;

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
    // Rank 0 inherits the store's socket (HIXL_STORE_FD); the others do not.
    if (rank.index == 0 && store_fd >= 0) ::fcntl(store_fd, F_SETFD, 0);

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
  std::string what =
      signaled ? "was killed by signal " + signal_text(status) : "exited with code " + std::to_string(status);
  bool others = ranks_.size() > 1;
  message("rank " + std::to_string(r.index) + " (pid " + std::to_string(r.pid) + ") " + what +
          (others ? "; stopping the other ranks" : ""));
  start_stopping(SIGTERM);
}

void Launcher::check_child(Rank &r) {
  if (r.exited) return;
  siginfo_t info{};
  // WNOWAIT: leave the rank a zombie, so that its pid stays reserved.
  if (::waitid(P_PID, static_cast<id_t>(r.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno == ECHILD) rank_exited(r, kExitInternal, false);  // cannot happen; do not hang
    return;
  }
  if (info.si_pid != r.pid) return;
  if (info.si_code == CLD_EXITED) {
    rank_exited(r, info.si_status, false);
  } else if (info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED) {
    rank_exited(r, info.si_status, true);
  }
}

void Launcher::check_children(pid_t first) {
  if (first > 0) {
    for (Rank &r : ranks_) {
      if (r.pid == first) check_child(r);
    }
  }
  for (Rank &r : ranks_) check_child(r);
}

void Launcher::handle_signalfd() {
  bool child = false;
  pid_t first = 0;
  while (true) {
    signalfd_siginfo si{};
    ssize_t n = ::read(sigfd_, &si, sizeof si);
    if (n != static_cast<ssize_t>(sizeof si)) break;
    int sig = static_cast<int>(si.ssi_signo);
    if (sig == SIGCHLD) {
      // A standard signal is not queued twice: a SIGCHLD raised while one is
      // pending is dropped, so this one names the first of the children
      // that exited since the last read.
      if (!child) first = static_cast<pid_t>(si.ssi_pid);
      child = true;
      continue;
    }
    message("received " + signal_name(sig) + "; forwarding it to the ranks");
    if (forwarded_signal_ == 0) forwarded_signal_ = sig;
    start_stopping(sig);
  }
  if (child) check_children(first);
}

}  // namespace hixlrun

// The chaos soak (issue 14): for HIXL_SOAK_SECONDS (default 180) it runs
// rounds; each round starts kEngines engine processes and kRanks world
// ranks (torchrun-style variables, rank 0 holds the store) over one
// transport (shm with cross-memory attach, the shm relay, UCX where built;
// taken in turn), lets them do random operations on each other for a few
// seconds, and SIGKILLs one of the processes at a random moment.  The
// survivors check:
//  * data: every write is read back and compared (each writer has its own
//    slice of every region, with its own pattern); every fetch-add returns
//    the count of the adder's own earlier adds;
//  * canaries: 64 bytes before and after every region (never registered)
//    are checked after every operation, and an engine region's bytes are
//    checked unchanged for a while after its DeregisterMem returned (never
//    freed within the round, so that no later region takes its addresses
//    and a stale address can only be refused);
//  * bounds: every call returns within its timeout (plus slack for a
//    loaded machine);
//  * failures: PEER_FAILED / NOT_CONNECTED only from the killed process;
//  * leaks: descriptors and threads at the end of the round against those
//    after a warm-up (hundreds of connect/disconnect cycles between).
// A watchdog bounds every round; every process is killed and reaped.
// Prints the seed (HIXL_SOAK_SEED replays the rounds' choices; timing
// differs) and a summary: rounds, operations per second per kind for
// engines and world, faults injected.
//
// Engine operations: put/get (sync), async put, notify, register,
// deregister (then a quarantine), disconnect/connect, a put past a
// region's end (must be refused), reading notifications.  World
// operations: put, fence, get, fence; fetch-add; notify; register and
// deregister of private memory; reading notifications.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hixl/engine.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../engine/free_port.h"
#include "../engine/peer_proc.h"
#include "../mp/mp_util.h"

#include "soak_common.h"

namespace soak {

namespace {

struct Transport {
  const char* name;
  const char* transport;
  const char* cma;
};

std::string Self() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "/proc/self/exe";
}

// Where each worker's standard error goes (a directory of the driver's,
// removed at its end): shown only when a round fails, so that a failure's
// cause is not lost among the warnings of rounds that passed.
std::string g_err_dir;

std::string ErrPath(int i) { return g_err_dir + "/worker" + std::to_string(i) + ".err"; }

// The last `n` lines of the file at `path` ("" when it is empty or absent).
std::string Tail(const std::string& path, int n) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    lines.push_back(std::move(l));
    if (static_cast<int>(lines.size()) > n) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += "    " + l + "\n";
  return out;
}

// Starts `self args...` with the transport's variables, talking over pipes,
// its standard error into err_path.
bool Spawn(hixl::test::PeerProc& p, const std::vector<std::string>& args, const Transport& t,
           const std::vector<std::pair<std::string, std::string>>& env, const std::string& err_path) {
  int to[2], from[2];
  if (::pipe2(to, O_CLOEXEC) != 0) return false;
  if (::pipe2(from, O_CLOEXEC) != 0) {
    ::close(to[0]);
    ::close(to[1]);
    return false;
  }
  p.pid = ::fork();
  if (p.pid == 0) {
    ::setenv("HIXL_TRANSPORT", t.transport, 1);
    ::setenv("HIXL_SHM_CMA", t.cma, 1);
    ::setenv("HIXL_SHM_PROMOTE", "0", 1);  // registered memory by cross-memory attach or the relay
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    ::dup2(to[0], 0);
    ::dup2(from[1], 1);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (err >= 0) ::dup2(err, 2);
    std::vector<std::string> a = args;
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  ::close(to[0]);
  ::close(from[1]);
  p.in = to[1];
  p.out = from[0];
  return p.pid > 0;
}

// The next line of the protocol from p within bound_ms; lines that are
// not (UCX logs to standard output) are shown and skipped.
std::string Reply(hixl::test::PeerProc& p, const std::string& who, int bound_ms) {
  const auto until = Clock::now() + std::chrono::milliseconds(bound_ms);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    std::string l = p.Line(static_cast<int>(std::max<int64_t>(1, left)));
    for (const char* tag : {"READY", "INITFAIL", "DONE ", "NO REPLY", "EOF"}) {
      if (l.rfind(tag, 0) == 0) return l;
    }
    std::printf("  %s said: %s\n", who.c_str(), l.c_str());
  }
}

// The value of `key=` in a DONE line ("" when absent).
std::string Field(const std::string& line, const std::string& key) {
  std::istringstream in(line);
  for (std::string t; in >> t;) {
    if (t.rfind(key + "=", 0) == 0) return t.substr(key.size() + 1);
  }
  return "";
}

std::pair<long, long> Pair(const std::string& v) {
  long a = -1, b = -1;
  std::sscanf(v.c_str(), "%ld,%ld", &a, &b);
  return {a, b};
}

struct Totals {
  long ops[2][kNumKinds] = {};  // engines, world ranks
  long kills = 0, rounds = 0, retries = 0;
  std::map<std::string, long> rounds_by_transport;
};

// One round; "" when it checked out, else what went wrong.
std::string RunRound(const Transport& t, uint64_t seed, Totals* tot, bool* retry) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> names;
  for (int i = 0; i < kEngines; ++i) names.push_back("127.0.0.1:" + std::to_string(hixl::test::FreePort()));
  // procs: the engines 0..kEngines-1, then world ranks 0..kRanks-1.
  std::vector<std::unique_ptr<hixl::test::PeerProc>> procs;
  auto who = [](int i) {
    return i < kEngines ? "engine " + std::to_string(i) : "rank " + std::to_string(i - kEngines);
  };
  const std::string self = Self();
  const auto t0 = Clock::now();
  auto left = [&] { return static_cast<int>(std::max<int64_t>(1, kWatchdogMs - MsSince(t0))); };
  for (int i = 0; i < kEngines; ++i) {
    procs.push_back(std::make_unique<hixl::test::PeerProc>());
    std::vector<std::string> args = {self, "--worker", std::to_string(i), std::to_string(rng())};
    args.insert(args.end(), names.begin(), names.end());
    if (!Spawn(*procs.back(), args, t, {}, ErrPath(i))) return "cannot start a worker";
  }
  const std::string store_port = std::to_string(hixl::test::FreePort());
  for (int r = 0; r < kRanks; ++r) {
    procs.push_back(std::make_unique<hixl::test::PeerProc>());
    const std::vector<std::pair<std::string, std::string>> env = {{"RANK", std::to_string(r)},
                                                                  {"WORLD_SIZE", std::to_string(kRanks)},
                                                                  {"LOCAL_RANK", std::to_string(r)},
                                                                  {"LOCAL_WORLD_SIZE", std::to_string(kRanks)},
                                                                  {"MASTER_ADDR", "127.0.0.1"},
                                                                  {"MASTER_PORT", store_port},
                                                                  {"HIXL_TIMEOUT_MS", std::to_string(kEngineMs)}};
    if (!Spawn(*procs.back(), {self, "--rank", std::to_string(rng())}, t, env, ErrPath(kEngines + r)))
      return "cannot start a rank";
  }
  for (size_t i = 0; i < procs.size(); ++i) {
    const std::string l = Reply(*procs[i], who(static_cast<int>(i)), std::min(30000, left()));
    if (l.rfind("INITFAIL", 0) == 0) {  // a port taken meanwhile: the round again, with others
      *retry = true;
      return who(static_cast<int>(i)) + ": " + l;
    }
    if (l != "READY") return who(static_cast<int>(i)) + " did not start: " + l;
  }
  for (auto& p : procs) {
    if (::write(p->in, "go\n", 3) != 3) return "cannot start a worker's round";
  }
  // The fault: one process killed at a random moment of the round.  (A
  // wait for that moment, not for a condition: it is what is randomised.)
  const int victim = static_cast<int>(rng() % procs.size());
  const int kill_at = static_cast<int>(rng() % kRoundMs);
  ::poll(nullptr, 0, kill_at);
  procs[static_cast<size_t>(victim)]->Kill();
  ++tot->kills;
  std::printf("  killed %s after %d ms\n", who(victim).c_str(), kill_at);
  std::string failure;
  for (int i = 0; i < static_cast<int>(procs.size()); ++i) {
    if (i == victim) continue;
    auto& p = *procs[static_cast<size_t>(i)];
    const std::string l = Reply(p, who(i), left());
    if (l.rfind("DONE ", 0) != 0) {
      failure = who(i) + " (watchdog, " + std::to_string(kWatchdogMs) + " ms): " + l;
      break;
    }
    if (Field(l, "ok") != "1") failure = who(i) + ": " + Field(l, "errors");
    // Failures are the victim's only (engines number engines, ranks ranks).
    const int dead = i < kEngines ? victim : victim - kEngines;
    const bool same_kind = (i < kEngines) == (victim < kEngines);
    const size_t at = l.find("failed_peers=[") + 14;
    std::istringstream fp(l.substr(at, l.find(']', at) - at));
    for (int w; fp >> w;) {
      if (!same_kind || w != dead) failure = who(i) + " saw a live peer (" + std::to_string(w) + ") fail: " + l;
    }
    // Engines' descriptors and threads: the first figure is the most seen
    // in the round's first half, the second the count at its end; a few
    // more are made lazily (the async workers, a callback connection).
    const auto [fd0, fd1] = Pair(Field(l, "fds"));
    const auto [th0, th1] = Pair(Field(l, "threads"));
    // Whether each peer is connected, and its channel made, at either
    // count varies: up to 6 descriptors a peer.
    const long fd_slack = 12;
    if (fd1 > fd0 + fd_slack || th1 > th0 + 3) failure = who(i) + " grew: " + l;
    for (int k = 0; k < kNumKinds; ++k) tot->ops[i < kEngines ? 0 : 1][k] += std::atol(Field(l, kKinds[k]).c_str());
    std::printf("  %s: %s\n", who(i).c_str(), l.c_str());
  }
  // The survivors finalize and exit, bounded; the rest are killed.  A
  // rank's Finalize fails (exit 3) when a rank was killed.
  for (auto& p : procs) {
    if (p->pid > 0 && ::write(p->in, "quit\n", 5) != 5) failure = "a worker's stdin closed early";
  }
  for (size_t i = 0; i < procs.size(); ++i) {
    auto& p = procs[i];
    const auto until = Clock::now() + std::chrono::seconds(20);
    const int allowed = static_cast<int>(i) >= kEngines && victim >= kEngines ? 3 : 0;
    int status = 0;
    while (p->pid > 0) {
      const pid_t r = ::waitpid(p->pid, &status, WNOHANG);
      if (r == p->pid) {
        if (!WIFEXITED(status) || (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != allowed))
          failure = who(static_cast<int>(i)) + " exited with status " + std::to_string(status);
        p->pid = -1;
      } else if (Clock::now() > until) {
        failure = who(static_cast<int>(i)) + " did not exit within 20 s of quit";
        p->Kill();
      } else {
        ::poll(nullptr, 0, 10);  // bounded polling for the exit
      }
    }
  }
  return failure;
}

}  // namespace

// One round, and on its failure what each worker wrote to standard error
// last.
std::string Round(const Transport& t, uint64_t seed, Totals* tot, bool* retry) {
  const std::string f = RunRound(t, seed, tot, retry);
  for (int i = 0; i < kEngines + kRanks; ++i) {
    const std::string path = ErrPath(i);
    if (!f.empty()) {
      const std::string tail = Tail(path, 25);
      const std::string name = i < kEngines ? "engine " + std::to_string(i) : "rank " + std::to_string(i - kEngines);
      if (!tail.empty()) std::printf("  %s's standard error ended with:\n%s", name.c_str(), tail.c_str());
    }
    std::remove(path.c_str());
  }
  return f;
}

int DriverMain() {
  const char* sec = std::getenv("HIXL_SOAK_SECONDS");
  const int64_t seconds = sec ? std::max(1L, std::atol(sec)) : 180;
  const char* given = std::getenv("HIXL_SOAK_SEED");
  const uint64_t seed = given ? std::strtoull(given, nullptr, 10) : std::random_device{}();
  std::printf(
      "soak: seed %llu (HIXL_SOAK_SEED=%llu replays the same rounds), %lld s, %d engines and %d world ranks a round\n",
      static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed), static_cast<long long>(seconds),
      kEngines, kRanks);
  std::fflush(stdout);
  std::vector<Transport> ts = {{"shm_cma", "shm", "1"}, {"shm_relay", "shm", "0"}};
#ifdef HIXL_TEST_HAVE_UCX
  ts.push_back({"ucx", "ucx", "1"});
#endif
  char dir[] = "/tmp/hixl-soak-XXXXXX";
  if (::mkdtemp(dir) == nullptr) {
    std::printf("soak FAILED: cannot make a directory for the workers' standard error: %s\n", std::strerror(errno));
    return 1;
  }
  g_err_dir = dir;
  std::mt19937_64 rng(seed);
  Totals tot;
  const auto t0 = Clock::now();
  std::string failure;
  for (int round = 0; failure.empty() && (round == 0 || MsSince(t0) < seconds * 1000); ++round) {
    const Transport& t = ts[static_cast<size_t>(round) % ts.size()];
    const uint64_t round_seed = rng();
    std::printf("round %d: %s, seed %llu\n", round, t.name, static_cast<unsigned long long>(round_seed));
    std::fflush(stdout);
    bool retry = false;
    std::string f = Round(t, round_seed, &tot, &retry);
    if (retry && tot.retries++ < 10) {
      std::printf("  again (%s)\n", f.c_str());
      continue;
    }
    if (!f.empty()) failure = "round " + std::to_string(round) + " (" + t.name + "): " + f;
    ++tot.rounds;
    ++tot.rounds_by_transport[t.name];
  }
  std::error_code ec;
  std::filesystem::remove_all(g_err_dir, ec);
  // Leftovers: every child was reaped (none remains), and hixl keeps its
  // shared memory in memfds, so nothing of it is in /dev/shm.
  errno = 0;
  if (::waitpid(-1, nullptr, WNOHANG) != -1 || errno != ECHILD) failure += "; a worker process is left";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (e.path().filename().string().find("hixl") != std::string::npos)
      failure += "; left in /dev/shm: " + e.path().string();
  }
  const double s = static_cast<double>(MsSince(t0)) / 1000.0;
  std::string per[2];
  for (int w = 0; w < 2; ++w) {
    for (int k = 0; k < kNumKinds; ++k) {
      if (tot.ops[w][k] == 0) continue;
      per[w] += std::string(" ") + kKinds[k] + "=" +
                std::to_string(static_cast<long>(static_cast<double>(tot.ops[w][k]) / s));
    }
  }
  std::string by;
  for (auto& [n, c] : tot.rounds_by_transport) by += " " + n + "=" + std::to_string(c);
  std::printf(
      "soak summary: seed %llu, %.0f s, rounds %ld (%s), faults injected %ld (SIGKILL), engine ops/s:%s, world "
      "ops/s:%s\n",
      static_cast<unsigned long long>(seed), s, tot.rounds, by.empty() ? "" : by.c_str() + 1, tot.kills, per[0].c_str(),
      per[1].c_str());
  if (!failure.empty()) {
    std::printf("soak FAILED: %s\n(replay: HIXL_SOAK_SEED=%llu)\n", failure.c_str(),
                static_cast<unsigned long long>(seed));
    return 1;
  }
  std::printf("soak passed\n");
  return 0;
}

}  // namespace soak

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  if (argc >= 2 && std::string(argv[1]) == "--worker") return soak::WorkerMain(argc, argv);
  if (argc == 3 && std::string(argv[1]) == "--rank") return soak::RankMain(std::strtoull(argv[2], nullptr, 10));
  return soak::DriverMain();
}

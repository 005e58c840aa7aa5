// Peer engines as child processes for the engine tests that kill, stop and
// count them (isolation_test.cc, dead_peer_test.cc): the test binary re-executes itself as
// `BINARY --peer ENGINE BUFLEN [key=value ...]`, which holds one engine
// with one registered buffer and answers one-line commands on stdin:
//   sum ADDR LEN   -> SUM <fnv of the bytes>
//   stats          -> STATS <fds> <threads> <VmSize pages> <maps lines>
//   connect ENGINE, disconnect ENGINE, write ENGINE ADDR LEN SEED,
//   notify ENGINE NAME
//                  -> OK, or ERR <status> <HIXL_ERR_ code> <why>
// and finalizes its engine and exits when stdin closes (PeerProc::Exit).
// Every reply is awaited with a bound; the harness kills and reaps its
// children.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hixl/engine.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace hixl::test {

inline uint64_t Fnv(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// What a process holds, from /proc/self.
struct ProcStats {
  long fds = 0, threads = 0, vm_pages = 0, maps = 0;
};

inline long CountDir(const char* path) {
  long n = 0;
  if (DIR* d = ::opendir(path)) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

inline ProcStats SelfStats() {
  ProcStats s;
  s.fds = CountDir("/proc/self/fd") - 1;  // less the one counting them
  s.threads = CountDir("/proc/self/task");
  std::ifstream("/proc/self/statm") >> s.vm_pages;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) ++s.maps;
  return s;
}

inline std::string StatsLine(const ProcStats& s) {
  return std::to_string(s.fds) + " " + std::to_string(s.threads) + " " + std::to_string(s.vm_pages) + " " +
         std::to_string(s.maps);
}

// Lines from a descriptor (the peers' stdin): Next gives the next one
// without its newline, false once the descriptor is closed.
struct LineReader {
  explicit LineReader(int from) : fd(from) {}
  int fd;
  std::string pending;
  bool Next(std::string* line) {
    char chunk[4096];
    for (auto nl = pending.find('\n'); nl == std::string::npos; nl = pending.find('\n')) {
      ssize_t n = ::read(fd, chunk, sizeof(chunk));
      if (n <= 0) return false;
      pending.append(chunk, static_cast<size_t>(n));
    }
    const auto nl = pending.find('\n');
    *line = pending.substr(0, nl);
    pending.erase(0, nl + 1);
    return true;
  }
};

// `BINARY --peer ENGINE BUFLEN [key=value ...]`
inline int PeerMain(int argc, char** argv) {
  std::map<std::string, std::string> options;
  for (int i = 4; i < argc; ++i) {
    std::string kv = argv[i];
    auto eq = kv.find('=');
    options[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  auto say = [](const std::string& line) {
    std::string l = line + "\n";
    (void)!::write(1, l.data(), l.size());
  };
  hixl::Engine engine;
  const size_t len = std::strtoull(argv[3], nullptr, 10);
  std::vector<uint8_t> buf(len, 1);
  hixl::MemHandle h = nullptr;
  if (engine.Initialize(argv[2], options) != hixl::SUCCESS ||
      engine.RegisterMem({reinterpret_cast<uintptr_t>(buf.data()), len}, hixl::MEM_HOST, h) != hixl::SUCCESS) {
    say(std::string("INITFAIL ") + hixl::Engine::LastError());
    return 1;
  }
  say("READY " + std::to_string(reinterpret_cast<uintptr_t>(buf.data())));
  auto status = [](hixl::EngineStatus s) {
    return s == hixl::SUCCESS ? std::string("OK")
                              : "ERR " + std::string(hixl::EngineStatusName(s)) + " " +
                                    std::to_string(hixl::Engine::LastErrorCode()) + " " + hixl::Engine::LastError();
  };
  LineReader lines{0};
  for (std::string line; lines.Next(&line);) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "sum") {
      uint64_t addr = 0, n = 0;
      in >> addr >> n;
      say("SUM " + std::to_string(Fnv(reinterpret_cast<const void*>(addr), n)));
    } else if (cmd == "stats") {
      say("STATS " + StatsLine(SelfStats()));
    } else if (cmd == "connect") {  // connect ENGINE
      std::string peer;
      in >> peer;
      say(status(engine.Connect(peer, 5000)));
    } else if (cmd == "write") {  // write ENGINE ADDR LEN SEED: a pattern into the other engine's memory
      std::string peer;
      uint64_t addr = 0, n = 0, seed = 0;
      in >> peer >> addr >> n >> seed;
      std::vector<uint8_t> src(n);
      for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(seed + i * 131);
      say(status(engine.TransferSync(peer, hixl::WRITE, {{reinterpret_cast<uintptr_t>(src.data()), addr, n}}, 5000)));
    } else if (cmd == "disconnect") {  // disconnect ENGINE
      std::string peer;
      in >> peer;
      say(status(engine.Disconnect(peer, 5000)));
    } else if (cmd == "notify") {  // notify ENGINE NAME
      std::string peer, name;
      in >> peer >> name;
      say(status(engine.SendNotify(peer, {name, "m"}, 5000)));
    } else {
      say("ERR unknown command " + cmd);
    }
  }
  return 0;  // the test went away
}

struct PeerProc {
  pid_t pid = -1;
  int in = -1, out = -1;
  std::string engine;  // "127.0.0.1:port"
  uintptr_t buf = 0;
  std::string pending;

  // Starts `self --peer engine buf_len options...`; false (with why in
  // *line) when it did not say READY.
  bool Start(const std::string& self, const std::string& name, size_t buf_len,
             const std::map<std::string, std::string>& opts, std::string* line) {
    int to[2], from[2];
    if (::pipe2(to, O_CLOEXEC) != 0 || ::pipe2(from, O_CLOEXEC) != 0) return false;
    std::vector<std::string> args = {self, "--peer", name, std::to_string(buf_len)};
    for (const auto& [k, v] : opts) args.push_back(k + "=" + v);
    pid = ::fork();
    if (pid == 0) {
      ::dup2(to[0], 0);
      ::dup2(from[1], 1);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      _exit(127);
    }
    ::close(to[0]);
    ::close(from[1]);
    in = to[1];
    out = from[0];
    engine = name;
    *line = Line();
    if (line->rfind("READY ", 0) != 0) return false;
    buf = std::stoull(line->substr(6));
    return true;
  }

  // One line within bound_ms.
  std::string Line(int bound_ms = 60000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(bound_ms);
    while (true) {
      auto nl = pending.find('\n');
      if (nl != std::string::npos) {
        std::string l = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        return l;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) return "NO REPLY within the bound";
      pollfd pfd{out, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left)) <= 0) continue;
      char chunk[4096];
      ssize_t n = ::read(out, chunk, sizeof(chunk));
      if (n <= 0) return "EOF (the peer exited)";
      pending.append(chunk, static_cast<size_t>(n));
    }
  }

  std::string Cmd(const std::string& line) {
    std::string l = line + "\n";
    if (::write(in, l.data(), l.size()) != static_cast<ssize_t>(l.size())) return "WRITE FAILED";
    return Line();
  }

  uint64_t Sum(uintptr_t addr, size_t n) {
    std::string r = Cmd("sum " + std::to_string(addr) + " " + std::to_string(n));
    return r.rfind("SUM ", 0) == 0 ? std::stoull(r.substr(4)) : 0;
  }

  // False when the reply was not STATS.
  bool Stats(ProcStats* s) {
    std::istringstream r(Cmd("stats"));
    std::string tag;
    r >> tag >> s->fds >> s->threads >> s->vm_pages >> s->maps;
    return tag == "STATS" && !r.fail();
  }

  // Closes its stdin: it finalizes its engine and exits.  True once it
  // has exited (bounded by Line's bound), reaped.
  bool Exit() {
    if (in >= 0) ::close(in);
    in = -1;
    if (Line() != "EOF (the peer exited)") return false;
    int st = 0;
    if (::waitpid(pid, &st, 0) != pid) return false;
    pid = -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }

  void Kill() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
    if (in >= 0) ::close(in);
    if (out >= 0) ::close(out);
    in = out = -1;
  }
  ~PeerProc() { Kill(); }
};

}  // namespace hixl::test

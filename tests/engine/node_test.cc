// One node per process (src/core/node.h): engines and the rank world of this
// process share one set of transports and the process's one event loop, each front
// door still sees only its own regions, and transfers between engines of one
// process and to an engine in another process work.
//
// What is shared is seen from outside: the library names its threads
// ("hixl-loop", "hixl-shm", "hixl-ucx", "hixl-watch"), so the test counts them in
// /proc/self/task.  The peer in another process is this binary started with
// --peer; every wait on it is bounded.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hixl/hixl.h>
#include <hixl/engine.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "free_port.h"

namespace {

using Clock = std::chrono::steady_clock;
using hixl::test::FreePort;
constexpr int kReplyMs = 60000;
std::string g_self;

// Threads of this process named `name`.
int Threads(const std::string& name) {
  int n = 0;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return -1;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string comm;
    std::getline(f, comm);
    n += comm == name ? 1 : 0;
  }
  ::closedir(d);
  return n;
}

// Threads named `name` once it is `want`, or after 10 s.  A joined thread
// leaves /proc a moment after pthread_join returns (the kernel reaps it
// after waking the joiner), so a count that drops is awaited, bounded.
int ThreadsSettle(const std::string& name, int want) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  int n = Threads(name);
  while (n != want && Clock::now() < deadline) {
    std::this_thread::yield();
    n = Threads(name);
  }
  return n;
}

// An engine listening on a free port of 127.0.0.1 (retried when another
// process takes the port first); its name in *name.
hixl::EngineStatus Listen(hixl::Engine& e, std::string* name, const std::map<std::string, std::string>& opts = {}) {
  hixl::EngineStatus s = hixl::FAILED;
  for (int attempt = 0; attempt < 6 && s != hixl::SUCCESS; ++attempt) {
    *name = "127.0.0.1:" + std::to_string(FreePort());
    s = e.Initialize(*name, opts);
  }
  return s;
}

std::string Why(hixl::EngineStatus s) {
  return std::string(hixl::EngineStatusName(s)) + ": " + hixl::Engine::LastError();
}

struct Buf {
  explicit Buf(size_t n, int fill) : v(n, static_cast<uint8_t>(fill)) {}
  uintptr_t addr() { return reinterpret_cast<uintptr_t>(v.data()); }
  std::vector<uint8_t> v;
};

// engine_node_test --peer TRANSPORT: an engine in another process with one
// registered buffer of 4096 bytes of 7s; prints "READY ENGINE ADDR", then
// waits until its stdin closes.
int PeerMain(const std::string& transport) {
  hixl::Engine e;
  std::string name;
  if (auto s = Listen(e, &name, {{"transport", transport}}); s != hixl::SUCCESS) {
    std::printf("INITFAIL %s\n", Why(s).c_str());
    return 1;
  }
  Buf b(4096, 7);
  hixl::MemHandle h = nullptr;
  if (auto s = e.RegisterMem({b.addr(), b.v.size()}, hixl::MEM_HOST, h); s != hixl::SUCCESS) {
    std::printf("INITFAIL %s\n", Why(s).c_str());
    return 1;
  }
  std::printf("READY %s %llu\n", name.c_str(), static_cast<unsigned long long>(b.addr()));
  std::fflush(stdout);
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  return 0;
}

// The peer process: started, read from (bounded), and killed and reaped.
struct PeerProcess {
  pid_t pid = -1;
  int in = -1, out = -1;
  ~PeerProcess() {
    if (in >= 0) ::close(in);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (out >= 0) ::close(out);
  }
  // transport: the peer engine's option "transport" (nullptr: auto).
  std::string Start(const char* transport = nullptr) {
    int to[2], from[2];
    if (::pipe2(to, O_CLOEXEC) != 0 || ::pipe2(from, O_CLOEXEC) != 0) return "pipe failed";
    pid = ::fork();
    if (pid == 0) {
      ::dup2(to[0], 0);
      ::dup2(from[1], 1);
      ::execl(g_self.c_str(), g_self.c_str(), "--peer", transport ? transport : "auto", nullptr);
      _exit(127);
    }
    ::close(to[0]);
    ::close(from[1]);
    in = to[1];
    out = from[0];
    std::string line;
    const auto deadline = Clock::now() + std::chrono::milliseconds(kReplyMs);
    while (line.find('\n') == std::string::npos) {
      int left =
          static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (left <= 0) return "NO REPLY within the bound";
      pollfd pfd{out, POLLIN, 0};
      if (::poll(&pfd, 1, left) <= 0) continue;
      char chunk[256];
      ssize_t n = ::read(out, chunk, sizeof(chunk));
      if (n <= 0) return "EOF (the peer exited)";
      line.append(chunk, static_cast<size_t>(n));
    }
    return line.substr(0, line.find('\n'));
  }
};

TEST(Node, EnginesAndTheWorldShareOneNodeAndKeepTheirOwnRegions) {
  ASSERT_EQ(Threads("hixl-loop"), 0);
  ASSERT_EQ(Threads("hixl-shm"), 0);
  ASSERT_EQ(Threads("hixl-watch"), 0);
  // A world of one (no launcher variables) and three engines, all with the
  // process's default options: one node.
  ASSERT_EQ(hixl_init(), HIXL_SUCCESS) << hixl_last_error();
  EXPECT_EQ(Threads("hixl-shm"), 1);
  const int ucx = Threads("hixl-ucx");
  EXPECT_LE(ucx, 1);
  std::string n1, n2;
  auto e1 = std::make_unique<hixl::Engine>();
  auto e2 = std::make_unique<hixl::Engine>();
  auto e3 = std::make_unique<hixl::Engine>();
  ASSERT_EQ(Listen(*e1, &n1), hixl::SUCCESS) << hixl::Engine::LastError();
  ASSERT_EQ(Listen(*e2, &n2), hixl::SUCCESS) << hixl::Engine::LastError();
  ASSERT_EQ(e3->Initialize("127.0.0.1", {}), hixl::SUCCESS) << hixl::Engine::LastError();
  EXPECT_EQ(Threads("hixl-shm"), 1);
  EXPECT_EQ(Threads("hixl-ucx"), ucx);
  EXPECT_EQ(Threads("hixl-loop"), 1);  // three listeners, one event loop
  EXPECT_EQ(Threads("hixl-control"), 0);

  // The same range registered through e1, e2 and the world: registered with
  // the transports once, and each door's own.
  Buf shared(1 << 16, 0), only1(1 << 16, 0), worlds(1 << 16, 0), src(1 << 16, 5), back(1 << 16, 0);
  hixl::MemHandle h1 = nullptr, h2 = nullptr, h1b = nullptr;
  ASSERT_EQ(e1->RegisterMem({shared.addr(), shared.v.size()}, hixl::MEM_HOST, h1), hixl::SUCCESS);
  ASSERT_EQ(e2->RegisterMem({shared.addr(), shared.v.size()}, hixl::MEM_HOST, h2), hixl::SUCCESS);
  ASSERT_EQ(e1->RegisterMem({only1.addr(), only1.v.size()}, hixl::MEM_HOST, h1b), hixl::SUCCESS);
  ASSERT_EQ(hixl_register_memory(shared.v.data(), shared.v.size()), HIXL_SUCCESS) << hixl_last_error();
  ASSERT_EQ(hixl_register_memory(worlds.v.data(), worlds.v.size()), HIXL_SUCCESS) << hixl_last_error();

  // Transfers between engines of this process (and a connection of e1 to itself).
  ASSERT_EQ(e3->Connect(n1, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  ASSERT_EQ(e3->Connect(n2, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  ASSERT_EQ(e1->Connect(n1, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  // The peer watch (a thread that learns of dead peers for WaitNotifies):
  // one per process, however many engines watch.
  EXPECT_EQ(Threads("hixl-watch"), 1);
  EXPECT_EQ(e3->TransferSync(n1, hixl::WRITE, {{src.addr(), only1.addr(), 4096}}, 10000), hixl::SUCCESS)
      << hixl::Engine::LastError();
  EXPECT_EQ(only1.v[4095], 5);
  EXPECT_EQ(e1->TransferSync(n1, hixl::READ, {{back.addr(), only1.addr(), 4096}}, 10000), hixl::SUCCESS)
      << hixl::Engine::LastError();
  EXPECT_EQ(back.v[100], 5);
  EXPECT_EQ(e3->TransferSync(n2, hixl::WRITE, {{src.addr(), shared.addr(), 4096}}, 10000), hixl::SUCCESS)
      << hixl::Engine::LastError();
  EXPECT_EQ(shared.v[0], 5);

  // A peer of one door sees only that door's regions: not another engine's,
  // nor the world's.
  EXPECT_EQ(e3->TransferSync(n2, hixl::WRITE, {{src.addr(), only1.addr(), 64}}, 10000), hixl::PARAM_INVALID);
  EXPECT_NE(std::string(hixl::Engine::LastError()).find("Remote memory not registered"), std::string::npos)
      << hixl::Engine::LastError();
  EXPECT_EQ(e3->TransferSync(n1, hixl::WRITE, {{src.addr(), worlds.addr(), 64}}, 10000), hixl::PARAM_INVALID);

  // Deregistering through e1 leaves e2's and the world's registration of
  // the same range alone.
  ASSERT_EQ(e1->DeregisterMem(h1), hixl::SUCCESS);
  EXPECT_EQ(e3->TransferSync(n1, hixl::WRITE, {{src.addr(), shared.addr(), 64}}, 10000), hixl::PARAM_INVALID);
  src.v.assign(src.v.size(), 9);
  EXPECT_EQ(e3->TransferSync(n2, hixl::WRITE, {{src.addr(), shared.addr() + 4096, 4096}}, 10000), hixl::SUCCESS)
      << hixl::Engine::LastError();
  EXPECT_EQ(shared.v[4096], 9);
  ASSERT_EQ(hixl_put(0, src.v.data(), shared.addr() + 8192, 4096), HIXL_SUCCESS) << hixl_last_error();
  ASSERT_EQ(hixl_fence(), HIXL_SUCCESS) << hixl_last_error();
  EXPECT_EQ(shared.v[8192], 9);

  // An engine in another process.
  PeerProcess peer;
  const std::string ready = peer.Start();
  ASSERT_EQ(ready.rfind("READY ", 0), 0u) << ready;
  const std::string pname = ready.substr(6, ready.find(' ', 6) - 6);
  const uint64_t paddr = std::stoull(ready.substr(ready.find(' ', 6) + 1));
  ASSERT_EQ(e2->Connect(pname, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  EXPECT_EQ(e2->TransferSync(pname, hixl::READ, {{back.addr(), paddr, 4096}}, 10000), hixl::SUCCESS)
      << hixl::Engine::LastError();
  EXPECT_EQ(back.v[0], 7);
  EXPECT_EQ(back.v[4095], 7);
  EXPECT_EQ(e2->TransferSync(pname, hixl::WRITE, {{src.addr(), paddr, 4096}}, 10000), hixl::SUCCESS)
      << hixl::Engine::LastError();
  EXPECT_EQ(e2->TransferSync(pname, hixl::READ, {{back.addr() + 4096, paddr, 4096}}, 10000), hixl::SUCCESS);
  EXPECT_EQ(back.v[4096], 9);

  // Other transport options: a node of its own, gone with its engine.
  {
    hixl::Engine other;
    std::string n4;
    ASSERT_EQ(Listen(other, &n4, {{"shm_cma", "0"}}), hixl::SUCCESS) << hixl::Engine::LastError();
    EXPECT_EQ(Threads("hixl-shm"), 2);
    EXPECT_EQ(Threads("hixl-loop"), 1);  // two nodes, still one event loop per process
    ASSERT_EQ(other.Connect(n2, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
    EXPECT_EQ(other.TransferSync(n2, hixl::READ, {{back.addr(), shared.addr() + 4096, 64}}, 10000), hixl::SUCCESS)
        << hixl::Engine::LastError();
    EXPECT_EQ(back.v[0], 9);
  }
  EXPECT_EQ(ThreadsSettle("hixl-shm", 1), 1);
  EXPECT_EQ(ThreadsSettle("hixl-loop", 1), 1);

  // An engine that finalizes leaves the others working.
  e1.reset();
  EXPECT_EQ(e3->TransferSync(n2, hixl::READ, {{back.addr(), shared.addr(), 64}}, 10000), hixl::SUCCESS)
      << hixl::Engine::LastError();
  EXPECT_EQ(Threads("hixl-loop"), 1);
  e2.reset();
  e3.reset();
  EXPECT_EQ(Threads("hixl-shm"), 1);  // the world holds the node
  ASSERT_EQ(hixl_finalize(), HIXL_SUCCESS) << hixl_last_error();
  EXPECT_EQ(ThreadsSettle("hixl-shm", 0), 0);
  EXPECT_EQ(ThreadsSettle("hixl-loop", 0), 0);
  EXPECT_EQ(ThreadsSettle("hixl-watch", 0), 0);  // gone with the last engine
}

TEST(Node, EnginesOverUcxShareOneWorker) {
  const std::map<std::string, std::string> ucx = {{"transport", "ucx"}};
  hixl::Engine a, b;
  std::string na, nb;
  if (auto s = Listen(a, &na, ucx); s == hixl::UNSUPPORTED)
    GTEST_SKIP() << hixl::Engine::LastError();
  else
    ASSERT_EQ(s, hixl::SUCCESS) << Why(s);
  ASSERT_EQ(Listen(b, &nb, ucx), hixl::SUCCESS) << hixl::Engine::LastError();
  EXPECT_EQ(Threads("hixl-ucx"), 1);
  EXPECT_EQ(Threads("hixl-shm"), 0);
  EXPECT_EQ(Threads("hixl-loop"), 1);
  Buf mem(1 << 16, 0), src(1 << 16, 3);
  hixl::MemHandle h = nullptr;
  ASSERT_EQ(b.RegisterMem({mem.addr(), mem.v.size()}, hixl::MEM_HOST, h), hixl::SUCCESS);
  ASSERT_EQ(a.Connect(nb, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  ASSERT_EQ(a.TransferSync(nb, hixl::WRITE, {{src.addr(), mem.addr(), mem.v.size()}}, 10000), hixl::SUCCESS)
      << hixl::Engine::LastError();
  EXPECT_EQ(mem.v[0], 3);
  EXPECT_EQ(mem.v.back(), 3);
  // And to an engine over UCX in another process (an engine in "auto" that
  // listens on loopback offers only shm: nobody off this host can reach it).
  PeerProcess peer;
  const std::string ready = peer.Start("ucx");
  ASSERT_EQ(ready.rfind("READY ", 0), 0u) << ready;
  const std::string pname = ready.substr(6, ready.find(' ', 6) - 6);
  const uint64_t paddr = std::stoull(ready.substr(ready.find(' ', 6) + 1));
  ASSERT_EQ(b.Connect(pname, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  ASSERT_EQ(b.TransferSync(pname, hixl::READ, {{src.addr(), paddr, 4096}}, 10000), hixl::SUCCESS)
      << hixl::Engine::LastError();
  EXPECT_EQ(src.v[0], 7);
  EXPECT_EQ(a.DeregisterMem(h), hixl::PARAM_INVALID);  // b's registration, not a's
  EXPECT_EQ(b.DeregisterMem(h), hixl::SUCCESS);
}

}  // namespace

int main(int argc, char** argv) {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  g_self = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "/proc/self/exe";
  if (argc >= 3 && std::string(argv[1]) == "--peer") return PeerMain(argv[2]);
  ::signal(SIGPIPE, SIG_IGN);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

// The engine API between processes: this test process holds one engine (the
// client, sometimes also a server) and starts peer engines as child
// processes of this same binary (`engine_test --peer ...`), each at its own
// time.  A peer is driven through its stdin/stdout with one-line commands,
// so it can report what landed in its memory; it never calls anything for
// the transfers themselves.
//
// Every wait is bounded (kReplyMs per reply), every child is killed and
// reaped by the fixture, and no test sleeps to synchronise.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hixl/hixl.h>
#include <hixl/engine.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../mp/mp_util.h"
#include "free_port.h"
#include "peer_proc.h"

namespace hixl::test {
World* g_world = nullptr;  // unused here; mp_util.h declares it
}  // namespace hixl::test

namespace {

using hixl::test::Fill;
using hixl::test::FirstMismatch;
using hixl::test::FreePort;
using Clock = std::chrono::steady_clock;

constexpr int kReplyMs = 60000;

std::string g_self;  // this binary

uint64_t Fnv(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

std::string Status(hixl::EngineStatus s) {
  return std::string(hixl::EngineStatusName(s)) + ": " + hixl::Engine::LastError();
}

// Anonymous memory that the test owns.
struct Buf {
  explicit Buf(size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096))), len(n) {}
  ~Buf() { std::free(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  uintptr_t addr() const { return reinterpret_cast<uintptr_t>(p); }
  uint8_t* p;
  size_t len;
};

// ------------------------------------------------------------------ the peer

std::string Join(const std::vector<std::string>& v, size_t from) {
  std::string s;
  for (size_t i = from; i < v.size(); ++i) s += (i > from ? " " : "") + v[i];
  return s;
}

// engine_test --peer ENGINE BUFLEN [key=value ...]
int PeerMain(int argc, char** argv) {
  std::string name = argv[2];
  size_t buf_len = std::strtoull(argv[3], nullptr, 10);
  std::map<std::string, std::string> options;
  for (int i = 4; i < argc; ++i) {
    std::string kv = argv[i];
    auto eq = kv.find('=');
    options[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  hixl::Engine engine;
  auto say = [](const std::string& line) {
    std::string l = line + "\n";
    (void)!::write(1, l.data(), l.size());
  };
  if (auto s = engine.Initialize(name, options); s != hixl::SUCCESS) {
    say("INITFAIL " + Status(s));
    return 1;
  }
  std::vector<std::unique_ptr<Buf>> bufs;
  bufs.push_back(std::make_unique<Buf>(buf_len));
  Fill(bufs[0]->p, buf_len, 1);
  hixl::MemHandle h = nullptr;
  if (auto s = engine.RegisterMem({bufs[0]->addr(), buf_len}, hixl::MEM_HOST, h); s != hixl::SUCCESS) {
    say("INITFAIL " + Status(s));
    return 1;
  }
  say("READY " + std::to_string(bufs[0]->addr()));
  hixl::test::LineReader lines{0};
  for (std::string line; lines.Next(&line);) {
    std::istringstream in(line);
    std::vector<std::string> w;
    for (std::string t; in >> t;) w.push_back(t);
    if (w.empty()) continue;
    const std::string& cmd = w[0];
    if (cmd == "sum") {  // sum ADDR LEN: a checksum of our own memory
      auto* p = reinterpret_cast<const void*>(std::stoull(w[1]));
      say("SUM " + std::to_string(Fnv(p, std::stoull(w[2]))));
    } else if (cmd == "fill") {  // fill ADDR LEN SEED
      Fill(reinterpret_cast<void*>(std::stoull(w[1])), std::stoull(w[2]), std::stoull(w[3]));
      say("OK");
    } else if (cmd == "register") {  // register LEN -> REG ADDR
      auto b = std::make_unique<Buf>(std::stoull(w[1]));
      std::memset(b->p, 0, b->len);
      auto s = engine.RegisterMem({b->addr(), b->len}, hixl::MEM_HOST, h);
      if (s != hixl::SUCCESS) {
        say("ERR " + Status(s));
      } else {
        say("REG " + std::to_string(b->addr()));
        bufs.push_back(std::move(b));
      }
    } else if (cmd == "deregister") {  // deregister ADDR
      auto s = engine.DeregisterMem(reinterpret_cast<hixl::MemHandle>(std::stoull(w[1])));
      say(s == hixl::SUCCESS ? "OK" : "ERR " + Status(s));
    } else if (cmd == "notes") {  // notes N: waits for N notifications "ADDR LEN", checksums each
      size_t want = std::stoull(w[1]);
      std::string out;
      for (size_t got = 0; got < want;) {
        std::vector<hixl::NotifyDesc> ns;
        if (auto s = engine.WaitNotifies(ns, kReplyMs); s != hixl::SUCCESS) {
          say("ERR " + Status(s));
          break;
        }
        for (auto& n : ns) {
          std::istringstream m(n.notify_msg);
          uint64_t addr = 0, len = 0;
          m >> addr >> len;
          out += " " + n.name + "=" + std::to_string(Fnv(reinterpret_cast<const void*>(addr), len));
          ++got;
        }
      }
      say("NOTES" + out);
    } else if (cmd == "connect") {  // connect ENGINE
      auto s = engine.Connect(w[1], 5000);
      say(s == hixl::SUCCESS ? "OK" : "ERR " + Status(s));
    } else if (cmd == "write") {  // write ENGINE REMOTE LEN SEED: from a local buffer filled with SEED
      size_t len = std::stoull(w[3]);
      Buf src(len);
      Fill(src.p, len, std::stoull(w[4]));
      auto s = engine.TransferSync(w[1], hixl::WRITE, {{src.addr(), std::stoull(w[2]), len}}, 10000);
      say(s == hixl::SUCCESS ? "OK" : "ERR " + Status(s));
    } else if (cmd == "quit") {
      engine.Finalize();
      say("BYE");
      return 0;
    } else {
      say("ERR unknown command " + Join(w, 0));
    }
  }
  return 0;  // the test went away
}

// ------------------------------------------------------------------ the test side

struct Peer {
  pid_t pid = -1;
  int in = -1, out = -1;  // its stdin (we write), its stdout (we read)
  std::string engine;     // "127.0.0.1:port"
  uintptr_t buf = 0;
  size_t buf_len = 0;
  std::string pending;
  bool stopped = false;
};

class EngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override {
    for (auto& p : peers_) {
      // A peer that died on its own (a crash in a server that calls
      // nothing) is a failure, even when every transfer worked.
      int st = 0;
      if (p->pid > 0 && ::waitpid(p->pid, &st, WNOHANG) == p->pid) {
        p->pid = -1;
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "peer engine " << p->engine << " died: status " << st;
      }
      Kill(*p);
    }
  }

  std::map<std::string, std::string> Opts(std::map<std::string, std::string> extra = {}) {
    extra.emplace("transport", GetParam());
    return extra;
  }

  // Starts a peer engine listening on a free port; retried when another
  // process took the port first.
  Peer& Start(size_t buf_len, std::map<std::string, std::string> extra = {}) {
    auto opts = Opts(std::move(extra));
    for (int attempt = 0;; ++attempt) {
      auto p = std::make_unique<Peer>();
      p->engine = "127.0.0.1:" + std::to_string(FreePort());
      p->buf_len = buf_len;
      Spawn(*p, opts);
      std::string line = Line(*p);
      if (line.rfind("READY ", 0) == 0) {
        p->buf = std::stoull(line.substr(6));
        peers_.push_back(std::move(p));
        return *peers_.back();
      }
      Kill(*p);
      if (attempt >= 5) {
        ADD_FAILURE() << "peer engine did not start: " << line;
        throw std::runtime_error("peer did not start");
      }
    }
  }

  void Spawn(Peer& p, const std::map<std::string, std::string>& opts) {
    int to[2], from[2];
    ASSERT_EQ(::pipe2(to, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(from, O_CLOEXEC), 0);
    std::vector<std::string> args = {g_self, "--peer", p.engine, std::to_string(p.buf_len)};
    for (auto& [k, v] : opts) args.push_back(k + "=" + v);
    p.pid = ::fork();
    ASSERT_GE(p.pid, 0);
    if (p.pid == 0) {
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
    p.in = to[1];
    p.out = from[0];
  }

  // One line from the peer, within kReplyMs.
  std::string Line(Peer& p) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(kReplyMs);
    while (true) {
      auto nl = p.pending.find('\n');
      if (nl != std::string::npos) {
        std::string line = p.pending.substr(0, nl);
        p.pending.erase(0, nl + 1);
        return line;
      }
      int left =
          static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (left <= 0) return "NO REPLY within the bound";
      pollfd pfd{p.out, POLLIN, 0};
      if (::poll(&pfd, 1, left) <= 0) continue;
      char chunk[4096];
      ssize_t n = ::read(p.out, chunk, sizeof(chunk));
      if (n <= 0) return "EOF (the peer exited)";
      p.pending.append(chunk, static_cast<size_t>(n));
    }
  }

  std::string Cmd(Peer& p, const std::string& line) {
    std::string l = line + "\n";
    if (::write(p.in, l.data(), l.size()) != static_cast<ssize_t>(l.size())) return "WRITE FAILED";
    return Line(p);
  }

  uint64_t RemoteSum(Peer& p, uintptr_t addr, size_t len) {
    std::string r = Cmd(p, "sum " + std::to_string(addr) + " " + std::to_string(len));
    EXPECT_EQ(r.rfind("SUM ", 0), 0u) << r;
    return r.size() > 4 ? std::stoull(r.substr(4)) : 0;
  }

  void Kill(Peer& p) {
    if (p.pid > 0) {
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, nullptr, 0);
      p.pid = -1;
    }
    if (p.in >= 0) ::close(p.in);
    if (p.out >= 0) ::close(p.out);
    p.in = p.out = -1;
  }

  // The client engine, listening on a free port when `listen`.
  void InitClient(hixl::Engine& e, bool listen = false, std::map<std::string, std::string> extra = {}) {
    auto opts = Opts(std::move(extra));
    for (int attempt = 0; attempt < 6; ++attempt) {
      client_name_ = listen ? "127.0.0.1:" + std::to_string(FreePort()) : "127.0.0.1";
      if (auto s = e.Initialize(client_name_, opts); s == hixl::SUCCESS)
        return;
      else if (attempt == 5)
        FAIL() << Status(s);
    }
  }

  // A client engine connected to p (the test fails when it cannot connect).
  hixl::Engine& Client(Peer& p, std::map<std::string, std::string> extra = {}) {
    clients_.push_back(std::make_unique<hixl::Engine>());
    hixl::Engine& e = *clients_.back();
    InitClient(e, false, std::move(extra));
    EXPECT_EQ(e.Connect(p.engine, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
    return e;
  }

  std::vector<std::unique_ptr<Peer>> peers_;
  std::vector<std::unique_ptr<hixl::Engine>> clients_;
  std::string client_name_;
};

TEST_P(EngineTest, WriteAndReadBatchesOfOneToTenThousandBlocks) {
  constexpr size_t kRemote = 16 << 20;
  Peer& p = Start(kRemote);
  hixl::Engine e;
  InitClient(e);
  ASSERT_EQ(e.Connect(p.engine, 10000), hixl::SUCCESS) << Status(e.Connect(p.engine, 10000));
  Buf src(kRemote), back(kRemote);
  for (size_t count : {size_t{1}, size_t{7}, size_t{100}, size_t{10000}}) {
    SCOPED_TRACE("blocks: " + std::to_string(count));
    // Non-contiguous blocks of a paged cache: block i goes to page (i*37 % pages),
    // sizes vary, gaps stay untouched.
    const size_t page = kRemote / 10000 / 64 * 64;  // 1664 bytes
    std::vector<hixl::TransferOpDesc> wr, rd;
    const uint64_t seed = 100 + count;
    Fill(src.p, kRemote, seed);
    std::memset(back.p, 0, kRemote);
    for (size_t i = 0; i < count; ++i) {
      const size_t slot = (i * 37) % 10000;
      const size_t len = 64 + (i * 97) % (page - 64);
      wr.push_back({src.addr() + slot * page, p.buf + slot * page, len});
      rd.push_back({back.addr() + slot * page, p.buf + slot * page, len});
    }
    ASSERT_EQ(e.TransferSync(p.engine, hixl::WRITE, wr, 30000), hixl::SUCCESS) << hixl::Engine::LastError();
    ASSERT_EQ(e.TransferSync(p.engine, hixl::READ, rd, 30000), hixl::SUCCESS) << hixl::Engine::LastError();
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(
          std::memcmp(back.p + (rd[i].local_addr - back.addr()), src.p + (wr[i].local_addr - src.addr()), wr[i].len), 0)
          << "block " << i;
      // and it is in the peer's memory, as the peer itself sees it
      if (i % 997 == 0) {
        EXPECT_EQ(RemoteSum(p, wr[i].remote_addr, wr[i].len), Fnv(src.p + (wr[i].local_addr - src.addr()), wr[i].len));
      }
    }
  }
  // One large block: 16 MiB each way.
  Fill(src.p, kRemote, 7);
  ASSERT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{src.addr(), p.buf, kRemote}}, 30000), hixl::SUCCESS)
      << hixl::Engine::LastError();
  EXPECT_EQ(RemoteSum(p, p.buf, kRemote), Fnv(src.p, kRemote));
  ASSERT_EQ(Cmd(p, "fill " + std::to_string(p.buf) + " " + std::to_string(kRemote) + " 9"), "OK");
  ASSERT_EQ(e.TransferSync(p.engine, hixl::READ, {{back.addr(), p.buf, kRemote}}, 30000), hixl::SUCCESS)
      << hixl::Engine::LastError();
  EXPECT_EQ(FirstMismatch(back.p, kRemote, 9), -1);
}

TEST_P(EngineTest, EnginesStartedAtDifferentTimes) {
  hixl::Engine e;
  InitClient(e);
  // Nobody listens there yet: a bounded wait, then TIMEOUT.
  const std::string nobody = "127.0.0.1:" + std::to_string(FreePort());
  auto t0 = Clock::now();
  EXPECT_EQ(e.Connect(nobody, 300), hixl::TIMEOUT) << hixl::Engine::LastError();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20));
  EXPECT_NE(std::string(hixl::Engine::LastError()).find(nobody), std::string::npos) << hixl::Engine::LastError();
  // A peer started later is reachable.
  Peer& p = Start(1 << 20);
  ASSERT_EQ(e.Connect(p.engine, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  Buf b(4096);
  Fill(b.p, 4096, 3);
  ASSERT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), p.buf + 8192, 4096}}, 10000), hixl::SUCCESS);
  EXPECT_EQ(RemoteSum(p, p.buf + 8192, 4096), Fnv(b.p, 4096));
  // And a second one, started after the first connection.
  Peer& q = Start(1 << 20);
  ASSERT_EQ(e.Connect(q.engine, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  ASSERT_EQ(e.TransferSync(q.engine, hixl::WRITE, {{b.addr(), q.buf, 4096}}, 10000), hixl::SUCCESS);
  EXPECT_EQ(RemoteSum(q, q.buf, 4096), Fnv(b.p, 4096));
}

TEST_P(EngineTest, ConnectDisconnectReconnectAndTheirErrors) {
  Peer& p = Start(1 << 20);
  hixl::Engine e;
  InitClient(e);
  Buf b(4096);
  Fill(b.p, 4096, 5);
  EXPECT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), p.buf, 64}}, 1000), hixl::NOT_CONNECTED);
  EXPECT_NE(std::string(hixl::Engine::LastError()).find("not connected"), std::string::npos)
      << hixl::Engine::LastError();
  ASSERT_EQ(e.Connect(p.engine, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  EXPECT_EQ(e.Connect(p.engine, 10000), hixl::ALREADY_CONNECTED);
  EXPECT_NE(std::string(hixl::Engine::LastError()).find("already connected"), std::string::npos);
  EXPECT_EQ(hixl::Engine::LastErrorCode(), HIXL_ERR_ALREADY_CONNECTED);
  ASSERT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), p.buf, 4096}}, 10000), hixl::SUCCESS);
  ASSERT_EQ(e.Disconnect(p.engine, 5000), hixl::SUCCESS) << hixl::Engine::LastError();
  EXPECT_EQ(e.Disconnect(p.engine, 5000), hixl::NOT_CONNECTED);
  EXPECT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), p.buf, 64}}, 1000), hixl::NOT_CONNECTED);
  EXPECT_EQ(e.SendNotify(p.engine, {"n", "m"}, 1000), hixl::NOT_CONNECTED);
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(e.Connect(p.engine, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
    Fill(b.p, 4096, 50 + round);
    ASSERT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), p.buf, 4096}}, 10000), hixl::SUCCESS);
    EXPECT_EQ(RemoteSum(p, p.buf, 4096), Fnv(b.p, 4096));
    ASSERT_EQ(e.Disconnect(p.engine, 5000), hixl::SUCCESS);
  }
  // Bad addresses and arguments.
  EXPECT_EQ(e.Connect("127.0.0.1", 1000), hixl::PARAM_INVALID);  // no port
  EXPECT_EQ(e.Connect("1.2.3.4:x", 1000), hixl::PARAM_INVALID);
  EXPECT_EQ(e.Connect("::1:5000", 1000), hixl::PARAM_INVALID);  // IPv6 without brackets
  EXPECT_EQ(e.Connect(p.engine, 0), hixl::PARAM_INVALID);
}

TEST_P(EngineTest, RegistrationAfterConnectAndDeregistration) {
  Peer& p = Start(1 << 20);
  hixl::Engine& e = Client(p);
  Buf b(1 << 20);
  Fill(b.p, b.len, 11);
  ASSERT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), p.buf, 128}}, 10000), hixl::SUCCESS);
  // The peer registers more memory after we connected: reachable at once.
  std::string r = Cmd(p, "register 262144");
  ASSERT_EQ(r.rfind("REG ", 0), 0u) << r;
  const uintptr_t late = std::stoull(r.substr(4));
  ASSERT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), late, 262144}}, 10000), hixl::SUCCESS)
      << hixl::Engine::LastError();
  EXPECT_EQ(RemoteSum(p, late, 262144), Fnv(b.p, 262144));
  // Deregistered: refused before anything moves, by both operations.
  ASSERT_EQ(Cmd(p, "deregister " + std::to_string(late)), "OK");
  EXPECT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), late, 64}}, 10000), hixl::PARAM_INVALID);
  EXPECT_NE(std::string(hixl::Engine::LastError()).find("Remote memory not registered"), std::string::npos)
      << hixl::Engine::LastError();
  EXPECT_EQ(e.TransferSync(p.engine, hixl::READ, {{b.addr(), late, 64}}, 10000), hixl::PARAM_INVALID);
  EXPECT_EQ(RemoteSum(p, late, 262144), Fnv(b.p, 262144));  // still the old contents: nothing was written
}

TEST_P(EngineTest, UnregisteredRemoteRangeFailsTheWholeBatchBeforeAnyByteMoves) {
  constexpr size_t kLen = 1 << 20;
  Peer& p = Start(kLen);
  hixl::Engine& e = Client(p);
  const uint64_t before = RemoteSum(p, p.buf, kLen);
  Buf b(kLen);
  Fill(b.p, kLen, 77);
  // Block 0 is fine, block 1 runs past the end of the region.
  std::vector<hixl::TransferOpDesc> batch = {{b.addr(), p.buf, 4096}, {b.addr(), p.buf + kLen - 100, 200}};
  EXPECT_EQ(e.TransferSync(p.engine, hixl::WRITE, batch, 10000), hixl::PARAM_INVALID);
  const std::string why = hixl::Engine::LastError();
  EXPECT_NE(why.find("Remote memory not registered"), std::string::npos) << why;
  EXPECT_NE(why.find("block 1 of 2"), std::string::npos) << why;
  EXPECT_EQ(RemoteSum(p, p.buf, kLen), before);  // block 0 did not move either
  // An address nobody registered, a null local address, a zero address.
  EXPECT_EQ(e.TransferSync(p.engine, hixl::READ, {{b.addr(), 0x10000, 8}}, 10000), hixl::PARAM_INVALID);
  EXPECT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{0, p.buf, 8}}, 10000), hixl::PARAM_INVALID);
  EXPECT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), p.buf, 8}}, 0), hixl::PARAM_INVALID);
  // An empty batch and empty blocks are fine.
  EXPECT_EQ(e.TransferSync(p.engine, hixl::WRITE, {}, 1000), hixl::SUCCESS);
  EXPECT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), p.buf, 0}}, 1000), hixl::SUCCESS);
}

TEST_P(EngineTest, AnAsyncTransferThatFailsReportsFailedWithItsCode) {
  // GetTransferStatus of a transfer that ended FAILED returns FAILED (not
  // SUCCESS), sets status FAILED, and keeps the failure's own code and words.
  constexpr size_t kLen = 1 << 20;
  Peer& p = Start(kLen);
  hixl::Engine& e = Client(p);
  Buf b(4096);
  hixl::TransferReq req = nullptr;
  // The range runs past the end of the peer's region: the worker finds it.
  ASSERT_EQ(e.TransferAsync(p.engine, hixl::WRITE, {{b.addr(), p.buf + kLen - 100, 200}}, {}, req), hixl::SUCCESS)
      << hixl::Engine::LastError();
  hixl::TransferStatus st = hixl::TransferStatus::WAITING;
  hixl::EngineStatus ret = hixl::SUCCESS;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (st == hixl::TransferStatus::WAITING && Clock::now() < deadline) {
    ret = e.GetTransferStatus(req, st);
    if (st == hixl::TransferStatus::WAITING) {
      ASSERT_EQ(ret, hixl::SUCCESS) << hixl::Engine::LastError();
      std::this_thread::yield();
    }
  }
  ASSERT_EQ(st, hixl::TransferStatus::FAILED) << hixl::Engine::LastError();
  EXPECT_EQ(ret, hixl::FAILED);
  EXPECT_STREQ(hixl::EngineStatusName(ret), "FAILED");
  EXPECT_EQ(hixl::Engine::LastErrorCode(), HIXL_ERR_NOT_REGISTERED);
  EXPECT_NE(std::string(hixl::Engine::LastError()).find("Remote memory not registered"), std::string::npos)
      << hixl::Engine::LastError();
  // Reported once: then the request is unknown (PARAM_INVALID), status untouched.
  st = hixl::TransferStatus::COMPLETED;
  EXPECT_EQ(e.GetTransferStatus(req, st), hixl::PARAM_INVALID);
  EXPECT_EQ(st, hixl::TransferStatus::COMPLETED);
  EXPECT_EQ(hixl::Engine::LastErrorCode(), HIXL_ERR_INVALID_ARG);
  // The same range in a synchronous transfer: PARAM_INVALID, code NOT_REGISTERED.
  EXPECT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), p.buf + kLen - 100, 200}}, 10000), hixl::PARAM_INVALID);
  EXPECT_EQ(hixl::Engine::LastErrorCode(), HIXL_ERR_NOT_REGISTERED);
  // A success clears both.
  ASSERT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), p.buf, 64}}, 10000), hixl::SUCCESS);
  EXPECT_EQ(hixl::Engine::LastErrorCode(), HIXL_SUCCESS);
  EXPECT_STREQ(hixl::Engine::LastError(), "");
}

TEST_P(EngineTest, NotificationsArriveAfterTheData) {
  constexpr size_t kLen = 8 << 20;
  Peer& p = Start(kLen);
  hixl::Engine& e = Client(p);
  Buf b(kLen);
  // The peer checksums each range the moment its notification arrives,
  // while we go on writing other ranges: a notification that overtook its
  // data would show the range's old contents.
  for (int group = 0; group < 3; ++group) {
    const std::string cmd = "notes 4\n";
    ASSERT_EQ(::write(p.in, cmd.data(), cmd.size()), static_cast<ssize_t>(cmd.size()));
    std::string expect = "NOTES";
    for (int k = 0; k < 4; ++k) {
      const int i = group * 4 + k;
      const size_t len = kLen / 4, off = static_cast<size_t>(k) * len;
      Fill(b.p + off, len, 1000 + static_cast<uint64_t>(i));
      if (i % 2 == 0) {
        ASSERT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr() + off, p.buf + off, len}}, 30000), hixl::SUCCESS);
      } else {
        hixl::TransferReq req = nullptr;
        ASSERT_EQ(e.TransferAsync(p.engine, hixl::WRITE, {{b.addr() + off, p.buf + off, len}}, {}, req), hixl::SUCCESS);
        hixl::TransferStatus st = hixl::TransferStatus::WAITING;
        while (st == hixl::TransferStatus::WAITING) {
          ASSERT_EQ(e.GetTransferStatus(req, st), hixl::SUCCESS) << hixl::Engine::LastError();
          if (st == hixl::TransferStatus::WAITING) std::this_thread::yield();
        }
        ASSERT_EQ(st, hixl::TransferStatus::COMPLETED) << hixl::Engine::LastError();
      }
      const std::string name = "round" + std::to_string(i);
      ASSERT_EQ(e.SendNotify(p.engine, {name, std::to_string(p.buf + off) + " " + std::to_string(len)}, 10000),
                hixl::SUCCESS)
          << hixl::Engine::LastError();
      expect += " " + name + "=" + std::to_string(Fnv(b.p + off, len));
    }
    EXPECT_EQ(Line(p), expect);
  }
}

TEST_P(EngineTest, NotificationQueueIsBoundedAndGetNotifiesDrainsIt) {
  hixl::Engine server;
  InitClient(server, /*listen=*/true, {{"notify_queue_depth", "3"}});
  const std::string me = client_name_;
  hixl::Engine client;
  InitClient(client);
  ASSERT_EQ(client.Connect(me, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(client.SendNotify(me, {"k", std::to_string(i)}, 5000), hixl::SUCCESS);
  EXPECT_EQ(client.SendNotify(me, {"k", "3"}, 5000), hixl::RESOURCE_EXHAUSTED);
  EXPECT_NE(std::string(hixl::Engine::LastError()).find("full"), std::string::npos) << hixl::Engine::LastError();
  std::vector<hixl::NotifyDesc> got;
  ASSERT_EQ(server.GetNotifies(got), hixl::SUCCESS);
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got[static_cast<size_t>(i)].notify_msg, std::to_string(i));
  ASSERT_EQ(server.GetNotifies(got), hixl::SUCCESS);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(server.WaitNotifies(got, 50), hixl::TIMEOUT);
  EXPECT_EQ(client.SendNotify(me, {"k", "again"}, 5000), hixl::SUCCESS);
  ASSERT_EQ(server.WaitNotifies(got, 10000), hixl::SUCCESS);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, "k");
  EXPECT_EQ(got[0].notify_msg, "again");
  EXPECT_EQ(client.SendNotify(me, {"k", std::string(70000, 'x')}, 5000), hixl::PARAM_INVALID);
}

TEST_P(EngineTest, AnEngineConnectsToItselfAndSeesLateRegistrations) {
  hixl::Engine e;
  InitClient(e, /*listen=*/true);
  ASSERT_EQ(e.Connect(client_name_, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  Buf a(1 << 16), b(1 << 16);
  Fill(a.p, a.len, 21);
  std::memset(b.p, 0, b.len);
  hixl::MemHandle h = nullptr, h2 = nullptr;
  ASSERT_EQ(e.RegisterMem({b.addr(), b.len}, hixl::MEM_HOST, h), hixl::SUCCESS);  // after Connect
  ASSERT_EQ(e.RegisterMem({b.addr(), b.len}, hixl::HOST, h2), hixl::SUCCESS);
  EXPECT_EQ(h, h2);  // the same range twice: the same handle
  ASSERT_EQ(e.TransferSync(client_name_, hixl::WRITE, {{a.addr(), b.addr(), a.len}}, 10000), hixl::SUCCESS)
      << hixl::Engine::LastError();
  EXPECT_EQ(FirstMismatch(b.p, b.len, 21), -1);
  ASSERT_EQ(e.DeregisterMem(h), hixl::SUCCESS);  // one reference left
  ASSERT_EQ(e.TransferSync(client_name_, hixl::READ, {{a.addr(), b.addr(), 64}}, 10000), hixl::SUCCESS);
  ASSERT_EQ(e.DeregisterMem(h2), hixl::SUCCESS);
  EXPECT_EQ(e.TransferSync(client_name_, hixl::READ, {{a.addr(), b.addr(), 64}}, 10000), hixl::PARAM_INVALID);
  EXPECT_EQ(e.DeregisterMem(h2), hixl::PARAM_INVALID);
  // Registration errors.
  EXPECT_EQ(e.RegisterMem({0, 10}, hixl::MEM_HOST, h), hixl::PARAM_INVALID);
  EXPECT_EQ(e.RegisterMem({a.addr(), 0}, hixl::MEM_HOST, h), hixl::PARAM_INVALID);
  EXPECT_EQ(e.RegisterMem({a.addr(), a.len}, hixl::MEM_DEVICE, h), hixl::UNSUPPORTED);
  ASSERT_EQ(e.RegisterMem({a.addr(), 4096}, hixl::MEM_HOST, h), hixl::SUCCESS);
  EXPECT_EQ(e.RegisterMem({a.addr() + 100, 8192}, hixl::MEM_HOST, h2), hixl::PARAM_INVALID);  // overlaps
}

TEST_P(EngineTest, AsyncTransfersCompleteTimeOutAndFailWhenThePeerIsKilled) {
  constexpr size_t kLen = 32 << 20;
  // The relay (shm_cma=0, shm_promote=0) needs the peer's progress thread, so a stopped
  // peer really holds a transfer up; UCX over TCP needs it anyway.
  Peer& p = Start(kLen);
  hixl::Engine& e = Client(p, {{"shm_cma", "0"}, {"shm_promote", "0"}, {"timeout_ms", "20000"}});
  Buf b(kLen);
  Fill(b.p, kLen, 31);
  std::vector<hixl::TransferOpDesc> batch;
  for (size_t off = 0; off < kLen; off += 64 << 10) batch.push_back({b.addr() + off, p.buf + off, 64 << 10});
  // GetTransferStatus returns SUCCESS while WAITING and for COMPLETED, and
  // the final status's own number for TIMEOUT and FAILED.
  auto wait = [&](hixl::TransferReq req, std::chrono::seconds bound) {
    hixl::TransferStatus st = hixl::TransferStatus::WAITING;
    const auto deadline = Clock::now() + bound;
    while (st == hixl::TransferStatus::WAITING && Clock::now() < deadline) {
      const hixl::EngineStatus ret = e.GetTransferStatus(req, st);
      const hixl::EngineStatus expect = st == hixl::TransferStatus::FAILED    ? hixl::FAILED
                                        : st == hixl::TransferStatus::TIMEOUT ? hixl::TIMEOUT
                                                                              : hixl::SUCCESS;
      EXPECT_EQ(ret, expect) << hixl::Engine::LastError();
      if (st == hixl::TransferStatus::WAITING) std::this_thread::yield();
    }
    return st;
  };
  // 1. Completes.
  hixl::TransferReq req = nullptr;
  ASSERT_EQ(e.TransferAsync(p.engine, hixl::WRITE, batch, {}, req), hixl::SUCCESS) << hixl::Engine::LastError();
  EXPECT_EQ(wait(req, std::chrono::seconds(60)), hixl::TransferStatus::COMPLETED) << hixl::Engine::LastError();
  EXPECT_EQ(RemoteSum(p, p.buf, kLen), Fnv(b.p, kLen));
  hixl::TransferStatus st;
  EXPECT_EQ(e.GetTransferStatus(req, st), hixl::PARAM_INVALID);  // reported once, then forgotten
  // 2. Times out: the peer is stopped.
  ASSERT_EQ(::kill(p.pid, SIGSTOP), 0);
  hixl::TransferArgs args;
  args.timeout_ms = 300;
  ASSERT_EQ(e.TransferAsync(p.engine, hixl::WRITE, batch, args, req), hixl::SUCCESS);
  EXPECT_EQ(wait(req, std::chrono::seconds(60)), hixl::TransferStatus::TIMEOUT);
  EXPECT_NE(std::string(hixl::Engine::LastError()).find("300 ms"), std::string::npos) << hixl::Engine::LastError();
  EXPECT_EQ(hixl::Engine::LastErrorCode(), HIXL_ERR_TIMEOUT);
  ASSERT_EQ(::kill(p.pid, SIGCONT), 0);
  // 3. Fails: the peer is killed with a transfer pending.
  ASSERT_EQ(::kill(p.pid, SIGSTOP), 0);
  ASSERT_EQ(e.TransferAsync(p.engine, hixl::READ, batch, {}, req), hixl::SUCCESS);
  ASSERT_EQ(::kill(p.pid, SIGKILL), 0);
  ASSERT_EQ(::waitpid(p.pid, nullptr, 0), p.pid);
  p.pid = -1;
  EXPECT_EQ(wait(req, std::chrono::seconds(60)), hixl::TransferStatus::FAILED) << hixl::Engine::LastError();
  // 4. Later calls: NOT_CONNECTED, never a hang.
  auto t0 = Clock::now();
  hixl::EngineStatus s = e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), p.buf, 64}}, 5000);
  if (s != hixl::NOT_CONNECTED) {
    // The sync call may be the one that finds the peer gone (FAILED) ...
    EXPECT_EQ(s, hixl::FAILED) << hixl::Engine::LastError();
    s = e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), p.buf, 64}}, 5000);
  }
  EXPECT_EQ(s, hixl::NOT_CONNECTED) << hixl::Engine::LastError();
  EXPECT_EQ(e.SendNotify(p.engine, {"a", "b"}, 5000), hixl::NOT_CONNECTED);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(30));
  EXPECT_EQ(e.Disconnect(p.engine, 1000), hixl::SUCCESS);
}

TEST_P(EngineTest, APeerThatFinalizesLeavesItsClientsNotConnected) {
  Peer& p = Start(1 << 20);
  hixl::Engine& e = Client(p);
  Buf b(4096);
  ASSERT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), p.buf, 4096}}, 10000), hixl::SUCCESS);
  ASSERT_EQ(Cmd(p, "quit"), "BYE");
  EXPECT_EQ(e.TransferSync(p.engine, hixl::WRITE, {{b.addr(), p.buf, 4096}}, 10000), hixl::NOT_CONNECTED);
  EXPECT_NE(std::string(hixl::Engine::LastError()).find("finalized"), std::string::npos) << hixl::Engine::LastError();
}

TEST_P(EngineTest, ManyThreadsShareOneEngine) {
  constexpr size_t kLen = 4 << 20;
  Peer& p = Start(kLen);
  hixl::Engine& e = Client(p);
  constexpr int kThreads = 4;
  const size_t slice = kLen / kThreads;
  Buf src(kLen), back(kLen);
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      const size_t off = static_cast<size_t>(t) * slice;
      for (int round = 0; round < 20; ++round) {
        Fill(src.p + off, slice, static_cast<uint64_t>(t * 100 + round));
        std::vector<hixl::TransferOpDesc> wr, rd;
        for (size_t o = 0; o < slice; o += 4096) {
          wr.push_back({src.addr() + off + o, p.buf + off + o, 4096});
          rd.push_back({back.addr() + off + o, p.buf + off + o, 4096});
        }
        if (e.TransferSync(p.engine, hixl::WRITE, wr, 30000) != hixl::SUCCESS ||
            e.TransferSync(p.engine, hixl::READ, rd, 30000) != hixl::SUCCESS ||
            std::memcmp(back.p + off, src.p + off, slice) != 0) {
          ++failures;
        }
        std::vector<hixl::NotifyDesc> ns;
        (void)e.GetNotifies(ns);
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(EngineLifecycle, CallsBeforeInitializeAfterFinalizeAndBadOptions) {
  hixl::Engine e;
  hixl::MemHandle h = nullptr;
  Buf b(64);
  EXPECT_EQ(e.RegisterMem({b.addr(), 64}, hixl::MEM_HOST, h), hixl::FAILED);
  EXPECT_NE(std::string(hixl::Engine::LastError()).find("before Engine::Initialize"), std::string::npos);
  EXPECT_EQ(hixl::Engine::LastErrorCode(), HIXL_ERR_NOT_INITIALIZED);
  EXPECT_EQ(e.Initialize("127.0.0.1", {{"no_such_option", "1"}}), hixl::PARAM_INVALID);
  EXPECT_NE(std::string(hixl::Engine::LastError()).find("no_such_option"), std::string::npos);
  // The known options listed include the transports' own switches.
  EXPECT_NE(std::string(hixl::Engine::LastError()).find("shm_cma"), std::string::npos) << hixl::Engine::LastError();
  EXPECT_EQ(e.Initialize("127.0.0.1", {{"timeout_ms", "soon"}}), hixl::PARAM_INVALID);
  // A transport's switch is parsed by the transport: a malformed value
  // still fails Initialize with PARAM_INVALID, naming the option.
  EXPECT_EQ(e.Initialize("127.0.0.1", {{"shm_cma", "maybe"}}), hixl::PARAM_INVALID);
  EXPECT_NE(std::string(hixl::Engine::LastError()).find("option shm_cma='maybe'"), std::string::npos)
      << hixl::Engine::LastError();
  EXPECT_EQ(e.Initialize("127.0.0.1", {{"transport", "bogus"}}), hixl::PARAM_INVALID);
  EXPECT_NE(std::string(hixl::Engine::LastError()).find("shm"), std::string::npos) << hixl::Engine::LastError();
  EXPECT_EQ(e.Initialize("[::1", {}), hixl::PARAM_INVALID);
  EXPECT_EQ(e.Initialize("", {}), hixl::PARAM_INVALID);
  ASSERT_EQ(e.Initialize("127.0.0.1", {}), hixl::SUCCESS) << hixl::Engine::LastError();  // after failed tries
  EXPECT_EQ(e.Initialize("127.0.0.1", {}), hixl::FAILED);                                // twice
  EXPECT_EQ(hixl::Engine::LastErrorCode(), HIXL_ERR_ALREADY_INITIALIZED);
  ASSERT_EQ(e.RegisterMem({b.addr(), 64}, hixl::MEM_HOST, h), hixl::SUCCESS);
  e.Finalize();
  e.Finalize();  // idempotent
  EXPECT_EQ(e.RegisterMem({b.addr(), 64}, hixl::MEM_HOST, h), hixl::FAILED);
  EXPECT_NE(std::string(hixl::Engine::LastError()).find("after Engine::Finalize"), std::string::npos);
  EXPECT_EQ(e.Connect("127.0.0.1:1", 100), hixl::FAILED);
  std::vector<hixl::NotifyDesc> ns;
  EXPECT_EQ(e.GetNotifies(ns), hixl::FAILED);
  EXPECT_STREQ(hixl::EngineStatusName(hixl::NOT_CONNECTED), "NOT_CONNECTED");
  EXPECT_EQ(hixl::PARAM_INVALID, 103900u);
  EXPECT_EQ(hixl::RESOURCE_EXHAUSTED, 203900u);
  EXPECT_EQ(hixl::FAILED, 503900u);
  // An IPv6 engine, where the machine has IPv6 loopback.
  hixl::Engine six;
  if (six.Initialize("[::1]", {}) == hixl::SUCCESS) six.Finalize();
}

std::vector<std::string> Transports() {
  std::vector<std::string> t = {"shm"};
#ifdef HIXL_TEST_HAVE_UCX
  t.push_back("ucx");
#endif
  return t;
}

INSTANTIATE_TEST_SUITE_P(Transports, EngineTest, ::testing::ValuesIn(Transports()),
                         [](const auto& info) { return info.param; });

}  // namespace

int main(int argc, char** argv) {
  g_self = "/proc/self/exe";
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) g_self.assign(buf, static_cast<size_t>(n));
  // Makes cross-memory attach into this process fail (with CAP_SYS_PTRACE
  // dropped), as in many containers: see cma_refused_test.sh.
  if (std::getenv("HIXL_TEST_UNDUMPABLE")) ::prctl(PR_SET_DUMPABLE, 0);
  if (argc >= 4 && std::string(argv[1]) == "--peer") return PeerMain(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

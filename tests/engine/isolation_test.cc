// Per-peer isolation and release (issue 14): an engine with two peers keeps
// working with the healthy one while the other is killed or stopped, every
// call honours its own timeout, and connect/transfer/disconnect cycles
// leave no descriptor, thread or mapping behind on either side.  Over shm
// with cross-memory attach, the shm relay (shm_cma=0) and UCX where built.
// Peer engines are child processes of this binary (peer_proc.h); each
// test is bounded and kills and reaps its children.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hixl/engine.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "../mp/mp_util.h"
#include "free_port.h"
#include "peer_proc.h"

namespace hixl::test {
World* g_world = nullptr;  // unused here; mp_util.h declares it
}  // namespace hixl::test

namespace {

using hixl::test::Fill;
using hixl::test::Fnv;
using hixl::test::PeerProc;
using hixl::test::ProcStats;
using Clock = std::chrono::steady_clock;

std::string g_self;

struct Variant {
  const char* name;
  std::map<std::string, std::string> options;
  bool cma;  // a stopped peer does not hold a transfer up (cross-memory attach needs no help from it)
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

std::string Why(hixl::EngineStatus s) {
  return std::string(hixl::EngineStatusName(s)) + ": " + hixl::Engine::LastError();
}

struct Buf {
  explicit Buf(size_t n) : v(n) {}
  uintptr_t addr() { return reinterpret_cast<uintptr_t>(v.data()); }
  std::vector<uint8_t> v;
};

class IsolationTest : public ::testing::TestWithParam<Variant> {
 protected:
  PeerProc& Start(size_t len) {
    for (int attempt = 0;; ++attempt) {
      auto p = std::make_unique<PeerProc>();
      std::string line;
      if (p->Start(g_self, "127.0.0.1:" + std::to_string(hixl::test::FreePort()), len, GetParam().options, &line)) {
        peers_.push_back(std::move(p));
        return *peers_.back();
      }
      if (attempt == 5) throw std::runtime_error("a peer engine did not start: " + line);
    }
  }

  // The client; the node's own bound (timeout_ms) is long, so that what
  // ends a call early is the call's own timeout.
  void Init(hixl::Engine& e) {
    auto opts = GetParam().options;
    opts["timeout_ms"] = "30000";
    ASSERT_EQ(e.Initialize("127.0.0.1", opts), hixl::SUCCESS) << hixl::Engine::LastError();
  }

  static std::vector<hixl::TransferOpDesc> Blocks(Buf& local, uintptr_t remote, size_t len, size_t block) {
    std::vector<hixl::TransferOpDesc> v;
    for (size_t off = 0; off < len; off += block) v.push_back({local.addr() + off, remote + off, block});
    return v;
  }

  // Writes a fresh pattern to p, reads it back and checks both sides.
  void RoundTrip(hixl::Engine& e, PeerProc& p, size_t len, uint64_t seed) {
    Buf src(len), back(len);
    Fill(src.v.data(), len, seed);
    auto t0 = Clock::now();
    ASSERT_EQ(e.TransferSync(p.engine, hixl::WRITE, Blocks(src, p.buf, len, 64 << 10), 5000), hixl::SUCCESS)
        << Why(hixl::FAILED);
    ASSERT_EQ(e.TransferSync(p.engine, hixl::READ, Blocks(back, p.buf, len, 64 << 10), 5000), hixl::SUCCESS)
        << Why(hixl::FAILED);
    EXPECT_LT(MsSince(t0), 5000);
    EXPECT_EQ(std::memcmp(src.v.data(), back.v.data(), len), 0);
    EXPECT_EQ(p.Sum(p.buf, len), Fnv(src.v.data(), len));
  }

  // The final status of an async transfer, polled for at most bound_ms.
  hixl::TransferStatus Await(hixl::Engine& e, hixl::TransferReq req, int bound_ms) {
    hixl::TransferStatus st = hixl::TransferStatus::WAITING;
    const auto deadline = Clock::now() + std::chrono::milliseconds(bound_ms);
    while (st == hixl::TransferStatus::WAITING && Clock::now() < deadline) {
      (void)e.GetTransferStatus(req, st);
      if (st == hixl::TransferStatus::WAITING) std::this_thread::yield();
    }
    return st;
  }

  // The kill and stop tests' start: two peers B and C of `len` bytes,
  // connected from e and each checked with a round trip.
  std::pair<PeerProc*, PeerProc*> TwoWorkingPeers(hixl::Engine& e, size_t len) {
    PeerProc& b = Start(len);
    PeerProc& c = Start(len);
    Init(e);
    if (HasFatalFailure()) return {&b, &c};
    EXPECT_EQ(e.Connect(b.engine, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
    EXPECT_EQ(e.Connect(c.engine, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
    if (!HasFailure()) RoundTrip(e, b, 1 << 20, 1);
    if (!HasFailure()) RoundTrip(e, c, 1 << 20, 2);
    return {&b, &c};
  }

  std::vector<std::unique_ptr<PeerProc>> peers_;
};

TEST_P(IsolationTest, AKilledPeerLeavesTransfersToTheOthersWorking) {
  constexpr size_t kLen = 16 << 20;
  hixl::Engine e;
  auto [bp, cp] = TwoWorkingPeers(e, kLen);
  ASSERT_FALSE(HasFailure()) << "the two peers were not both working";
  PeerProc& b = *bp;
  PeerProc& c = *cp;
  // C dies with a transfer pending (stopped first, so that it cannot
  // finish before the kill where the transfer needs C's help).
  Buf src(kLen);
  Fill(src.v.data(), kLen, 3);
  ASSERT_EQ(::kill(c.pid, SIGSTOP), 0);
  hixl::TransferReq req = nullptr;
  ASSERT_EQ(e.TransferAsync(c.engine, hixl::WRITE, Blocks(src, c.buf, kLen, 64 << 10), {}, req), hixl::SUCCESS);
  ASSERT_EQ(::kill(c.pid, SIGKILL), 0);
  ASSERT_EQ(::waitpid(c.pid, nullptr, 0), c.pid);
  c.pid = -1;
  const hixl::TransferStatus st = Await(e, req, 20000);
  if (GetParam().cma) {
    EXPECT_TRUE(st == hixl::TransferStatus::FAILED || st == hixl::TransferStatus::COMPLETED) << static_cast<int>(st);
  } else {
    EXPECT_EQ(st, hixl::TransferStatus::FAILED) << hixl::Engine::LastError();
  }
  // B is unaffected: sync and async transfers, each verified.
  for (uint64_t seed = 10; seed < 13; ++seed) RoundTrip(e, b, kLen, seed);
  Fill(src.v.data(), kLen, 20);
  ASSERT_EQ(e.TransferAsync(b.engine, hixl::WRITE, Blocks(src, b.buf, kLen, 64 << 10), {}, req), hixl::SUCCESS);
  EXPECT_EQ(Await(e, req, 20000), hixl::TransferStatus::COMPLETED) << hixl::Engine::LastError();
  EXPECT_EQ(b.Sum(b.buf, kLen), Fnv(src.v.data(), kLen));
  // C: a clean error, never a hang; Disconnect is prompt; B still works
  // after it, and after a reconnect.
  auto t0 = Clock::now();
  hixl::EngineStatus s = e.TransferSync(c.engine, hixl::WRITE, {{src.addr(), c.buf, 4096}}, 5000);
  EXPECT_TRUE(s == hixl::NOT_CONNECTED || s == hixl::FAILED) << Why(s);
  EXPECT_EQ(e.Disconnect(c.engine, 2000), hixl::SUCCESS) << hixl::Engine::LastError();
  EXPECT_LT(MsSince(t0), 10000);
  RoundTrip(e, b, 1 << 20, 30);
  ASSERT_EQ(e.Disconnect(b.engine, 5000), hixl::SUCCESS) << hixl::Engine::LastError();
  ASSERT_EQ(e.Connect(b.engine, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  RoundTrip(e, b, 1 << 20, 31);
}

TEST_P(IsolationTest, AStoppedPeerHoldsUpOnlyItsOwnTransfersAndOnlyUntilTheirTimeout) {
  constexpr size_t kLen = 16 << 20;
  hixl::Engine e;
  auto [bp, cp] = TwoWorkingPeers(e, kLen);
  ASSERT_FALSE(HasFailure()) << "the two peers were not both working";
  PeerProc& b = *bp;
  PeerProc& c = *cp;
  ASSERT_EQ(::kill(c.pid, SIGSTOP), 0);
  // A transfer to C, bounded by its own 1500 ms (the node's bound is 30 s),
  // while transfers to B go on beside it.
  constexpr int kTimeoutMs = 1500, kSlackMs = 3000;
  Buf to_c(kLen);
  hixl::EngineStatus c_status = hixl::SUCCESS;
  int64_t c_ms = 0;
  std::thread t([&] {
    auto t0 = Clock::now();
    c_status = e.TransferSync(c.engine, hixl::WRITE, Blocks(to_c, c.buf, kLen, 64 << 10), kTimeoutMs);
    c_ms = MsSince(t0);
  });
  for (uint64_t seed = 10; seed < 14; ++seed) RoundTrip(e, b, 1 << 20, seed);
  t.join();
  if (GetParam().cma) {
    EXPECT_TRUE(c_status == hixl::SUCCESS || c_status == hixl::TIMEOUT) << Why(c_status);
  } else {
    EXPECT_EQ(c_status, hixl::TIMEOUT) << hixl::Engine::LastError();
  }
  EXPECT_LT(c_ms, kTimeoutMs + kSlackMs);
  // An async transfer to C times out within its own bound and keeps no
  // worker from B's transfers afterwards.
  hixl::TransferArgs args;
  args.timeout_ms = kTimeoutMs;
  hixl::TransferReq req = nullptr;
  auto t0 = Clock::now();
  ASSERT_EQ(e.TransferAsync(c.engine, hixl::WRITE, Blocks(to_c, c.buf, kLen, 64 << 10), args, req), hixl::SUCCESS);
  const hixl::TransferStatus st = Await(e, req, kTimeoutMs + kSlackMs);
  if (!GetParam().cma) {
    EXPECT_EQ(st, hixl::TransferStatus::TIMEOUT);
  }
  EXPECT_LT(MsSince(t0), kTimeoutMs + kSlackMs);
  Buf src(1 << 20);
  Fill(src.v.data(), src.v.size(), 40);
  for (int i = 0; i < 3; ++i) {
    t0 = Clock::now();
    ASSERT_EQ(e.TransferAsync(b.engine, hixl::WRITE, Blocks(src, b.buf, src.v.size(), 64 << 10), {}, req),
              hixl::SUCCESS);
    EXPECT_EQ(Await(e, req, 10000), hixl::TransferStatus::COMPLETED) << hixl::Engine::LastError();
    EXPECT_LT(MsSince(t0), kTimeoutMs + kSlackMs);
  }
  EXPECT_EQ(b.Sum(b.buf, src.v.size()), Fnv(src.v.data(), src.v.size()));
  // Disconnecting the stopped peer is bounded by its timeout too.
  t0 = Clock::now();
  EXPECT_EQ(e.Disconnect(c.engine, kTimeoutMs), hixl::SUCCESS) << hixl::Engine::LastError();
  EXPECT_LT(MsSince(t0), 2 * kTimeoutMs + kSlackMs);
  ASSERT_EQ(::kill(c.pid, SIGCONT), 0);
  RoundTrip(e, b, 1 << 20, 50);
}

// Cycles per transport: HIXL_TEST_CYCLES (at least 200) or 1000.
int Cycles() {
  const char* v = std::getenv("HIXL_TEST_CYCLES");
  return v ? std::max(200, std::atoi(v)) : 1000;
}

TEST_P(IsolationTest, ConnectTransferDisconnectCyclesReleaseEverything) {
  constexpr size_t kLen = 1 << 20;
  PeerProc& s = Start(kLen);
  hixl::Engine e;
  Init(e);
  Buf src(64 << 10), back(64 << 10);
  auto cycle = [&](int i) {
    Fill(src.v.data(), src.v.size(), static_cast<uint64_t>(i));
    ASSERT_EQ(e.Connect(s.engine, 10000), hixl::SUCCESS) << "cycle " << i << ": " << hixl::Engine::LastError();
    ASSERT_EQ(e.TransferSync(s.engine, hixl::WRITE, {{src.addr(), s.buf, src.v.size()}}, 10000), hixl::SUCCESS)
        << "cycle " << i << ": " << hixl::Engine::LastError();
    ASSERT_EQ(e.TransferSync(s.engine, hixl::READ, {{back.addr(), s.buf, back.v.size()}}, 10000), hixl::SUCCESS)
        << "cycle " << i << ": " << hixl::Engine::LastError();
    ASSERT_EQ(std::memcmp(src.v.data(), back.v.data(), src.v.size()), 0) << "cycle " << i;
    ASSERT_EQ(e.Disconnect(s.engine, 10000), hixl::SUCCESS) << "cycle " << i << ": " << hixl::Engine::LastError();
  };
  // The first cycle makes what is made once (lazily) per process.
  cycle(0);
  const ProcStats client0 = hixl::test::SelfStats();
  ProcStats server0, server1;
  ASSERT_TRUE(s.Stats(&server0));
  const int n = Cycles();
  for (int i = 1; i <= n && !::testing::Test::HasFatalFailure(); ++i) cycle(i);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  // A connection's last close is seen by the other side's control thread a
  // moment later: read again (each read a round trip to the peer process)
  // until the descriptors are back, or for at most 10 s.
  ProcStats client1 = hixl::test::SelfStats();
  ASSERT_TRUE(s.Stats(&server1));
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       (client1.fds > client0.fds || server1.fds > server0.fds) && std::chrono::steady_clock::now() < until;) {
    std::this_thread::yield();
    client1 = hixl::test::SelfStats();
    ASSERT_TRUE(s.Stats(&server1));
  }
  // Descriptors and threads exactly; address space within 256 MiB: glibc
  // reserves 64 MiB (up to 128 MiB with its alignment) for the malloc arena
  // of a thread that first allocates under contention, which load decides;
  // one leaked relay ring a cycle would be 8 GB.
  const long kPages = (256L << 20) / ::sysconf(_SC_PAGESIZE);
  for (auto [who, a, b] : {std::tuple{"client", client0, client1}, std::tuple{"server", server0, server1}}) {
    SCOPED_TRACE(std::string(who) + " after " + std::to_string(n) + " cycles: before " + hixl::test::StatsLine(a) +
                 ", after " + hixl::test::StatsLine(b) + " (fds threads pages maps)");
    EXPECT_LE(b.fds, a.fds);
    EXPECT_LE(b.threads, a.threads);
    EXPECT_LE(b.vm_pages, a.vm_pages + kPages);
    EXPECT_LE(b.maps, a.maps + 16);
  }
}

std::vector<Variant> Variants() {
  std::vector<Variant> v = {{"shm_promote", {{"transport", "shm"}, {"shm_promote", "1"}}, true},
                            {"shm_cma", {{"transport", "shm"}, {"shm_promote", "0"}}, true},
                            {"shm_relay", {{"transport", "shm"}, {"shm_cma", "0"}, {"shm_promote", "0"}}, false}};
#ifdef HIXL_TEST_HAVE_UCX
  v.push_back({"ucx", {{"transport", "ucx"}}, false});
#endif
  return v;
}

INSTANTIATE_TEST_SUITE_P(Transports, IsolationTest, ::testing::ValuesIn(Variants()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace

int main(int argc, char** argv) {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  g_self = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "/proc/self/exe";
  if (argc >= 4 && std::string(argv[1]) == "--peer") return hixl::test::PeerMain(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

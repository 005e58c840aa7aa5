// Engine calls that wait on a peer learn of its death promptly (issue 14):
// a killed server fails SendNotify and transfers with PEER_FAILED naming
// it; a killed client makes the owner's DeregisterMem return PEER_FAILED
// naming it, not wait out the timeout.  And an acknowledgement that never
// comes (a SIGSTOPped client holds the region's key) is TIMEOUT naming the
// client, bounded by the timeout, never a silent OK; the client's write
// once it runs again is refused, and no byte lands in the region.  Over shm with cross-memory
// attach, the shm relay and UCX where built.  Peers are child processes of
// this binary (peer_proc.h), killed and reaped by the fixture.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hixl/hixl.h>
#include <hixl/engine.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "free_port.h"
#include "peer_proc.h"

namespace {

using hixl::test::Fnv;
using hixl::test::PeerProc;
using Clock = std::chrono::steady_clock;

std::string g_self;

// What "promptly" means: a dead peer is found by its closed sockets or its
// exited pid, not by a timeout (the world's barrier takes ~55 ms; this
// allows for a loaded 2-core machine).
constexpr int64_t kPromptMs = 1500;

struct Variant {
  const char* name;
  std::map<std::string, std::string> options;
  // The owner's side refuses a transfer into a region it released (the
  // relay checks its own registry); not so cross-memory attach or UCX.
  bool enforced_by_owner;
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Status, code and message of the last call, checked to name the peer.
struct Outcome {
  hixl::EngineStatus status;
  int code;
  std::string why;
  int64_t ms;
};

template <typename F>
Outcome Measure(F&& call) {
  const auto t0 = Clock::now();
  const hixl::EngineStatus s = call();
  return {s, hixl::Engine::LastErrorCode(), hixl::Engine::LastError(), MsSince(t0)};
}

class DeadPeerTest : public ::testing::TestWithParam<Variant> {
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

  // The engine under test; the node's bound is long (30 s) unless given,
  // so that a prompt failure cannot be a timeout.
  std::string Init(hixl::Engine& e, bool listen, const char* timeout_ms = "30000") {
    auto opts = GetParam().options;
    opts["timeout_ms"] = timeout_ms;
    std::string name = "127.0.0.1";
    for (int attempt = 0; attempt < 5; ++attempt) {
      if (listen) name = "127.0.0.1:" + std::to_string(hixl::test::FreePort());
      if (e.Initialize(name, opts) == hixl::SUCCESS) return name;
    }
    ADD_FAILURE() << "Initialize: " << hixl::Engine::LastError();
    return name;
  }

  PeerProc& KilledServer(hixl::Engine& e, std::vector<uint8_t>& src, hixl::TransferOpDesc* d);

  static void Kill(PeerProc& p) {
    ASSERT_EQ(::kill(p.pid, SIGKILL), 0);
    ASSERT_EQ(::waitpid(p.pid, nullptr, 0), p.pid);
    p.pid = -1;
  }

  // Polls (bounded, 10 s) until every thread of pid is stopped.
  static bool Stopped(pid_t pid) {
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < until) {
      bool all = true;
      for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
        std::ifstream stat(t.path() / "stat");
        std::string line;
        std::getline(stat, line);
        const auto paren = line.rfind(')');
        all = all && paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'T';
      }
      if (all) return true;
      std::this_thread::yield();
    }
    return false;
  }

  std::vector<std::unique_ptr<PeerProc>> peers_;
};

// A server engine, connected and used, then killed.
PeerProc& DeadPeerTest::KilledServer(hixl::Engine& e, std::vector<uint8_t>& src, hixl::TransferOpDesc* d) {
  PeerProc& p = Start(src.size());
  Init(e, false);
  if (HasFailure()) return p;
  EXPECT_EQ(e.Connect(p.engine, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  *d = {reinterpret_cast<uintptr_t>(src.data()), p.buf, src.size()};
  EXPECT_EQ(e.TransferSync(p.engine, hixl::WRITE, {*d}, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  EXPECT_EQ(e.SendNotify(p.engine, {"n", "m"}, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  if (!HasFailure()) Kill(p);
  return p;
}

// The first call to notice is PEER_FAILED naming the engine; every call
// after it PEER_FAILED or NOT_CONNECTED (the connection is broken), still
// naming it.  None waits for its 20 s timeout.
void ExpectPrompt(const char* variant, const std::string& engine,
                  const std::vector<std::pair<const char*, Outcome>>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    const auto& [what, o] = v[i];
    std::printf("[ %s ] %s after the kill: %lld ms: %s\n", variant, what, static_cast<long long>(o.ms), o.why.c_str());
    if (i == 0) {
      EXPECT_EQ(o.code, HIXL_ERR_PEER_FAILED) << what << ": " << o.why;
    }
    EXPECT_NE(o.status, hixl::SUCCESS) << what;
    EXPECT_TRUE(o.code == HIXL_ERR_PEER_FAILED || o.code == HIXL_ERR_NOT_CONNECTED)
        << what << ": " << o.code << ": " << o.why;
    EXPECT_NE(o.why.find(engine), std::string::npos) << what << ": " << o.why;
    EXPECT_LT(o.ms, kPromptMs) << what << ": " << o.why;
  }
}

TEST_P(DeadPeerTest, AKilledServerFailsTransfersAndNotificationsPromptlyNamingIt) {
  hixl::Engine e;
  std::vector<uint8_t> src(1 << 20, 7);
  hixl::TransferOpDesc d;
  PeerProc& p = KilledServer(e, src, &d);
  ASSERT_FALSE(HasFailure());
  ExpectPrompt(GetParam().name, p.engine,
               {{"TransferSync(WRITE)", Measure([&] { return e.TransferSync(p.engine, hixl::WRITE, {d}, 20000); })},
                {"SendNotify", Measure([&] {
                   return e.SendNotify(p.engine, {"n", "m"}, 20000);
                 })},
                {"TransferSync(READ)", Measure([&] { return e.TransferSync(p.engine, hixl::READ, {d}, 20000); })}});
  EXPECT_EQ(e.Disconnect(p.engine, 2000), hixl::SUCCESS) << hixl::Engine::LastError();
}

TEST_P(DeadPeerTest, AKilledServerFailsNotificationsAndAsyncTransfersPromptlyNamingIt) {
  hixl::Engine e;
  std::vector<uint8_t> src(1 << 20, 7);
  hixl::TransferOpDesc d;
  PeerProc& p = KilledServer(e, src, &d);
  ASSERT_FALSE(HasFailure());
  auto async = [&] {
    hixl::TransferArgs args;
    args.timeout_ms = 20000;
    hixl::TransferReq req = nullptr;
    hixl::EngineStatus s = e.TransferAsync(p.engine, hixl::READ, {d}, args, req);
    hixl::TransferStatus st = hixl::TransferStatus::WAITING;
    while (s == hixl::SUCCESS && st == hixl::TransferStatus::WAITING) s = e.GetTransferStatus(req, st);
    return s;
  };
  ExpectPrompt(GetParam().name, p.engine,
               {{"SendNotify", Measure([&] {
                   return e.SendNotify(p.engine, {"n", "m"}, 20000);
                 })},
                {"TransferAsync(READ)", Measure(async)}});
  EXPECT_EQ(e.Disconnect(p.engine, 2000), hixl::SUCCESS) << hixl::Engine::LastError();
}

// The owner's call back to the client is refused at once (nothing listens
// where the client did): PEER_FAILED, not a wait for the timeout.
TEST_P(DeadPeerTest, AKilledClientFailsTheOwnersDeregisterPromptlyNamingIt) {
  hixl::Engine e;
  const std::string name = Init(e, true);
  ASSERT_FALSE(HasFailure());
  std::vector<uint8_t> buf(1 << 20, 0);
  hixl::MemHandle h = nullptr;
  ASSERT_EQ(e.RegisterMem({reinterpret_cast<uintptr_t>(buf.data()), buf.size()}, hixl::MEM_HOST, h), hixl::SUCCESS);
  PeerProc& p = Start(4096);
  ASSERT_EQ(p.Cmd("connect " + name), "OK");
  // Its first transfer fetches our table: it now holds the region's key.
  ASSERT_EQ(p.Cmd("write " + name + " " + std::to_string(reinterpret_cast<uintptr_t>(buf.data())) + " 4096 3"), "OK");
  Kill(p);
  const Outcome dereg = Measure([&] { return e.DeregisterMem(h); });
  std::printf("[ %s ] DeregisterMem with a killed client: %lld ms: %s\n", GetParam().name,
              static_cast<long long>(dereg.ms), dereg.why.c_str());
  EXPECT_EQ(dereg.code, HIXL_ERR_PEER_FAILED) << dereg.why;
  EXPECT_NE(dereg.why.find(p.engine), std::string::npos) << dereg.why;
  EXPECT_LT(dereg.ms, kPromptMs);
}

TEST_P(DeadPeerTest, AStoppedClientMakesTheOwnersDeregisterTimeOutNamingItAndNothingLandsAfter) {
  constexpr int kTimeoutMs = 1500, kSlackMs = 3000;
  hixl::Engine e;
  const std::string name = Init(e, true, "1500");
  ASSERT_FALSE(HasFailure());
  std::vector<uint8_t> buf(1 << 20, 0);
  const auto addr = std::to_string(reinterpret_cast<uintptr_t>(buf.data()));
  hixl::MemHandle h = nullptr;
  ASSERT_EQ(e.RegisterMem({reinterpret_cast<uintptr_t>(buf.data()), buf.size()}, hixl::MEM_HOST, h), hixl::SUCCESS);
  PeerProc& p = Start(4096);
  ASSERT_EQ(p.Cmd("connect " + name), "OK");
  ASSERT_EQ(p.Cmd("write " + name + " " + addr + " 4096 3"), "OK");
  ASSERT_EQ(::kill(p.pid, SIGSTOP), 0);
  // kill() returns before every thread of the client has stopped: one
  // still running could acknowledge (correctly) and make this a success.
  ASSERT_TRUE(Stopped(p.pid)) << "the client did not stop within 10 s";
  const Outcome dereg = Measure([&] { return e.DeregisterMem(h); });
  std::printf("[ %s ] DeregisterMem with a stopped client: %lld ms: %s\n", GetParam().name,
              static_cast<long long>(dereg.ms), dereg.why.c_str());
  EXPECT_EQ(dereg.status, hixl::TIMEOUT) << dereg.why;
  EXPECT_NE(dereg.why.find(p.engine), std::string::npos) << dereg.why;
  EXPECT_LT(dereg.ms, kTimeoutMs + kSlackMs);
  // The region is ours again: what is in it now stays, whatever the
  // client does once it runs again.
  const uint64_t before = Fnv(buf.data(), buf.size());
  ASSERT_EQ(::kill(p.pid, SIGCONT), 0);
  const std::string late = p.Cmd("write " + name + " " + addr + " 4096 9");
  const bool landed = Fnv(buf.data(), buf.size()) != before;
  std::printf("[ %s ] the client's write once it runs again: %s; %s\n", GetParam().name, late.c_str(),
              landed ? "it LANDED" : "nothing landed");
  if (GetParam().enforced_by_owner) {
    EXPECT_EQ(late.rfind("ERR ", 0), 0u) << late;
    EXPECT_FALSE(landed) << "a write landed after DeregisterMem returned";
  }
  // Over cross-memory attach and UCX it lands today: the invalidation was
  // never delivered (the stopped client did not even greet), the client's
  // cached table still holds the region when it runs again, and neither
  // transport asks the owner (README, known limitations: TIMEOUT names a
  // peer that may still reach the memory).
}

// WaitNotifies (issue 14, "every wait learns of a dead peer"): a peer
// SIGKILLed while we wait ends the wait with FAILED (PEER_FAILED) naming
// it, long before the wait's own 15 s, either way of the connection; what
// was queued before comes first; each death is told once.
constexpr int32_t kLongWaitMs = 15000;

Outcome WaitFor(hixl::Engine& e, std::vector<hixl::NotifyDesc>* got, int32_t timeout_ms = kLongWaitMs) {
  return Measure([&] { return e.WaitNotifies(*got, timeout_ms); });
}

void ExpectDeathTold(const char* variant, const char* what, const Outcome& o, const std::string& engine) {
  std::printf("[ %s ] WaitNotifies(%d ms), %s killed: %lld ms: %s\n", variant, kLongWaitMs, what,
              static_cast<long long>(o.ms), o.why.c_str());
  EXPECT_EQ(o.status, hixl::FAILED) << o.why;
  EXPECT_EQ(o.code, HIXL_ERR_PEER_FAILED) << o.why;
  EXPECT_NE(o.why.find(engine), std::string::npos) << o.why;
  // Far from the wait's own bound: found by the closed connection, not a timeout.
  EXPECT_LT(o.ms, kLongWaitMs / 5) << o.why;
}

TEST_P(DeadPeerTest, AServerKilledDuringWaitNotifiesEndsItPromptlyNamingIt) {
  hixl::Engine e;
  Init(e, false);
  ASSERT_FALSE(HasFailure());
  PeerProc& p = Start(4096);
  ASSERT_EQ(e.Connect(p.engine, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  // Killed while we wait (the waiter is already asleep, or about to be).
  std::thread killer([&] { Kill(p); });
  std::vector<hixl::NotifyDesc> got;
  const Outcome o = WaitFor(e, &got);
  killer.join();
  ExpectDeathTold(GetParam().name, "the engine it connected to", o, p.engine);
  EXPECT_TRUE(got.empty());
  // Told once: the next wait is an ordinary timeout.
  EXPECT_EQ(e.WaitNotifies(got, 200), hixl::TIMEOUT) << hixl::Engine::LastError();
  // A call to the dead engine fails naming it, at once (its address
  // refuses: not a retry until the call's timeout), and Disconnect works.
  const Outcome send = Measure([&] { return e.SendNotify(p.engine, {"n", "m"}, 5000); });
  std::printf("[ %s ] SendNotify to it then: %lld ms: %s\n", GetParam().name, static_cast<long long>(send.ms),
              send.why.c_str());
  EXPECT_EQ(send.code, HIXL_ERR_PEER_FAILED) << send.why;
  EXPECT_NE(send.why.find(p.engine), std::string::npos) << send.why;
  EXPECT_LT(send.ms, 5000 / 2) << send.why;
  EXPECT_EQ(e.Disconnect(p.engine, 2000), hixl::SUCCESS) << hixl::Engine::LastError();
}

TEST_P(DeadPeerTest, AClientKilledAfterNotifyingGivesItsNotificationsFirstThenItsDeath) {
  hixl::Engine e;
  const std::string name = Init(e, true);
  ASSERT_FALSE(HasFailure());
  PeerProc& p = Start(4096);
  ASSERT_EQ(p.Cmd("connect " + name), "OK");
  ASSERT_EQ(p.Cmd("notify " + name + " first"), "OK");  // queued here when it answers
  ASSERT_EQ(p.Cmd("notify " + name + " second"), "OK");
  Kill(p);
  std::vector<hixl::NotifyDesc> got;
  const Outcome queued = WaitFor(e, &got);
  ASSERT_EQ(queued.status, hixl::SUCCESS) << queued.why;
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].name, "first");
  EXPECT_EQ(got[1].name, "second");
  got.clear();
  const Outcome o = WaitFor(e, &got);
  ExpectDeathTold(GetParam().name, "a client that connected to it", o, p.engine);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(e.WaitNotifies(got, 200), hixl::TIMEOUT) << hixl::Engine::LastError();
}

TEST_P(DeadPeerTest, AClientKilledDuringWaitNotifiesEndsItPromptlyNamingIt) {
  hixl::Engine e;
  const std::string name = Init(e, true);
  ASSERT_FALSE(HasFailure());
  PeerProc& p = Start(4096);
  ASSERT_EQ(p.Cmd("connect " + name), "OK");
  std::thread killer([&] { Kill(p); });
  std::vector<hixl::NotifyDesc> got;
  const Outcome o = WaitFor(e, &got);
  killer.join();
  ExpectDeathTold(GetParam().name, "a client that connected to it", o, p.engine);
}

// An engine connected both ways (it to us, and we to it) is one death.
TEST_P(DeadPeerTest, AnEngineConnectedBothWaysIsToldDeadOnce) {
  hixl::Engine e;
  const std::string name = Init(e, true);
  ASSERT_FALSE(HasFailure());
  PeerProc& p = Start(4096);
  ASSERT_EQ(p.Cmd("connect " + name), "OK");
  ASSERT_EQ(e.Connect(p.engine, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  Kill(p);
  std::vector<hixl::NotifyDesc> got;
  const Outcome o = WaitFor(e, &got);
  ExpectDeathTold(GetParam().name, "an engine connected both ways", o, p.engine);
  const Outcome again = WaitFor(e, &got, 1000);
  EXPECT_EQ(again.status, hixl::TIMEOUT) << again.why;
}

// Peers that leave cleanly (Disconnect, Finalize; of theirs or ours) are
// not deaths; one killed among them is, and is the only one told.
TEST_P(DeadPeerTest, PeersThatLeaveCleanlyAreNotReportedOnlyTheKilledOneIs) {
  hixl::Engine e;
  const std::string name = Init(e, true);
  ASSERT_FALSE(HasFailure());
  PeerProc& client_disconnects = Start(4096);
  PeerProc& client_finalizes = Start(4096);
  PeerProc& server_finalizes = Start(4096);
  PeerProc& server_we_leave = Start(4096);
  PeerProc& killed = Start(4096);
  for (PeerProc* c : {&client_disconnects, &client_finalizes, &killed}) ASSERT_EQ(c->Cmd("connect " + name), "OK");
  for (PeerProc* s : {&server_finalizes, &server_we_leave}) {
    ASSERT_EQ(e.Connect(s->engine, 10000), hixl::SUCCESS) << hixl::Engine::LastError();
  }
  ASSERT_EQ(client_disconnects.Cmd("disconnect " + name), "OK");
  ASSERT_EQ(e.Disconnect(server_we_leave.engine, 5000), hixl::SUCCESS) << hixl::Engine::LastError();
  ASSERT_TRUE(client_finalizes.Exit());
  ASSERT_TRUE(server_finalizes.Exit());
  Kill(client_disconnects);  // gone after leaving: still no death of ours
  Kill(server_we_leave);
  std::vector<hixl::NotifyDesc> got;
  // Nothing to tell yet (each of those ends is seen within milliseconds;
  // this wait would end with it).
  const Outcome quiet = WaitFor(e, &got, 1000);
  EXPECT_EQ(quiet.status, hixl::TIMEOUT) << quiet.why;
  Kill(killed);
  const Outcome o = WaitFor(e, &got);
  ExpectDeathTold(GetParam().name, "one client among peers that left cleanly", o, killed.engine);
  for (PeerProc* gone : {&client_disconnects, &client_finalizes, &server_finalizes, &server_we_leave}) {
    EXPECT_EQ(o.why.find(gone->engine), std::string::npos) << o.why;
  }
  EXPECT_EQ(e.WaitNotifies(got, 500), hixl::TIMEOUT) << hixl::Engine::LastError();
}

std::vector<Variant> Variants() {
  std::vector<Variant> v = {{"shm_promote", {{"transport", "shm"}, {"shm_promote", "1"}}, false},
                            {"shm_cma", {{"transport", "shm"}, {"shm_promote", "0"}}, false},
                            {"shm_relay", {{"transport", "shm"}, {"shm_cma", "0"}, {"shm_promote", "0"}}, true}};
#ifdef HIXL_TEST_HAVE_UCX
  v.push_back({"ucx", {{"transport", "ucx"}}, false});
#endif
  return v;
}

INSTANTIATE_TEST_SUITE_P(Transports, DeadPeerTest, ::testing::ValuesIn(Variants()),
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

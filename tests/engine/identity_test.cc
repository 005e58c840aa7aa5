// Identity on the engines' control plane (issue 13): ids are random 64-bit
// values tied to a connection, a request naming an id its engine does not
// know is refused and changes nothing, a hello flood is capped, and
// DeregisterMem and Finalize wait on callback addresses that never answer
// for no longer than their own bound, however many there are.
//
// One process: the engines under test, and "members" that speak the
// control protocol directly (bootstrap::ControlClient, core's encoders), as
// a process holding the job's secret could.  Callback addresses that never
// answer are a listening socket that never accepts (a black hole).  Every
// wait is bounded; every socket is closed by its owner.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hixl/engine.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "bootstrap/control.h"
#include "core/control_protocol.h"
#include "free_port.h"

namespace {

using hixl::Errc;
using hixl::bootstrap::ControlClient;
using hixl::core::ControlMsg;
using hixl::core::Wire;
using Clock = std::chrono::steady_clock;

constexpr int64_t kCallMs = 10000;

int64_t MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

std::string Why() { return std::string(hixl::Engine::LastError()); }

// A listening socket that never accepts: connections to it are made by the
// kernel and then hear nothing.
struct BlackHole {
  BlackHole() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && ::listen(fd, SOMAXCONN) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
  }
  ~BlackHole() {
    if (fd >= 0) ::close(fd);
  }
  BlackHole(const BlackHole&) = delete;
  BlackHole& operator=(const BlackHole&) = delete;
  int fd = -1;
  uint16_t port = 0;
};

// An engine listening on a free port of 127.0.0.1 (retried: another
// process may take the port first).
std::string Start(hixl::Engine& e, const std::map<std::string, std::string>& opts = {}) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    const std::string name = "127.0.0.1:" + std::to_string(hixl::test::FreePort());
    if (e.Initialize(name, opts) == hixl::SUCCESS) return name;
  }
  ADD_FAILURE() << "no engine started: " << Why();
  return {};
}

uint16_t PortOf(const std::string& name) { return static_cast<uint16_t>(std::stoi(name.substr(name.rfind(':') + 1))); }

// A hello as an engine named `name` whose callback is at 127.0.0.1:cb_port;
// the id the engine gave it, or the error.
hixl::Result<int64_t> Hello(ControlClient& anon, const std::string& name, uint16_t cb_port) {
  hixl::core::Hello h;
  h.uuid = 42;
  h.name = name;
  h.callback_host = "127.0.0.1";
  h.callback_port = cb_port;
  h.id_for_server = 7;
  auto r = anon.Call(Wire(ControlMsg::kHello), hixl::core::Encode(h), kCallMs);
  if (!r.ok()) return r.status();
  auto reply = hixl::core::DecodeHelloReply(r.value());
  if (!reply) return hixl::Status(Errc::kTransport, "malformed hello reply");
  return reply->id_for_client;
}

TEST(Identity, TheIdsAnEngineGivesItsClientsAreRandom64BitValues) {
  hixl::Engine s;
  const std::string name = Start(s);
  ASSERT_FALSE(name.empty());
  BlackHole hole;
  ControlClient anon(-1, -1, "127.0.0.1", PortOf(name), "engine under test");
  std::set<int64_t> ids;
  bool wide = false;
  for (int i = 0; i < 16; ++i) {
    auto id = Hello(anon, "member-" + std::to_string(i), hole.port);
    ASSERT_TRUE(id.ok()) << id.status().message();
    EXPECT_NE(id.value(), -1);
    ids.insert(id.value());
    if (id.value() > std::numeric_limits<int32_t>::max() || id.value() < std::numeric_limits<int32_t>::min()) {
      wide = true;
    }
  }
  EXPECT_EQ(ids.size(), 16u) << "ids repeat";
  EXPECT_TRUE(wide) << "16 ids, all within 32 bits: not random 64-bit values";
  // Not a counter: consecutive ids are not a step apart.
  std::vector<int64_t> v(ids.begin(), ids.end());
  int steps = 0;
  for (size_t i = 1; i < v.size(); ++i) steps += (static_cast<uint64_t>(v[i]) - static_cast<uint64_t>(v[i - 1])) < 16;
  EXPECT_EQ(steps, 0);
}

TEST(Identity, TheIdAClientGivesEachConnectionIsRandomAndNew) {
  // A fake server engine that records the client's id from its hello.
  std::mutex mu;
  std::vector<int64_t> seen;
  auto server = hixl::bootstrap::ControlServer::Start(
      "127.0.0.1", [&](int64_t from, uint8_t type, std::string_view p) -> hixl::Result<std::string> {
        EXPECT_EQ(from, -1) << "a hello is anonymous";
        if (type != Wire(ControlMsg::kHello)) return hixl::Status(Errc::kInvalidArg, "only hellos here");
        auto h = hixl::core::DecodeHello(p);
        if (!h) return hixl::Status(Errc::kInvalidArg, "malformed hello");
        std::lock_guard lock(mu);
        seen.push_back(h->id_for_server);
        return hixl::core::Encode(hixl::core::HelloReply{1, 99, {}});  // no transport: the connect fails after
      });
  ASSERT_TRUE(server.ok()) << server.status().message();
  hixl::Engine c;
  ASSERT_FALSE(Start(c).empty());
  const std::string remote = "127.0.0.1:" + std::to_string(server.value()->port());
  for (int i = 0; i < 3; ++i) EXPECT_NE(c.Connect(remote, 5000), hixl::SUCCESS) << "no transport was offered";
  std::lock_guard lock(mu);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 3u) << "a connection id was reused";
  for (int64_t id : seen) EXPECT_NE(id, -1);
  EXPECT_TRUE(std::any_of(seen.begin(), seen.end(),
                          [](int64_t id) { return id > std::numeric_limits<int32_t>::max() || id < 0; }));
}

// A victim engine V connected to S; a member with its own connections
// forges requests with ids it does not hold: each is refused, and V's
// transfers and notifications still work.
TEST(Identity, RequestsNamingAnIdTheEngineDoesNotKnowAreRefusedAndTheVictimIsUnaffected) {
  hixl::Engine s, v;
  const std::string sname = Start(s), vname = Start(v);
  ASSERT_FALSE(sname.empty());
  ASSERT_FALSE(vname.empty());
  std::vector<uint64_t> mem(4096, 0);
  hixl::MemHandle h = nullptr;
  ASSERT_EQ(s.RegisterMem({reinterpret_cast<uintptr_t>(mem.data()), mem.size() * 8}, hixl::MEM_HOST, h), hixl::SUCCESS)
      << Why();
  ASSERT_EQ(v.Connect(sname, 10000), hixl::SUCCESS) << Why();
  std::vector<uint64_t> src(4096);
  for (size_t i = 0; i < src.size(); ++i) src[i] = i * 31 + 1;
  const hixl::TransferOpDesc d{reinterpret_cast<uintptr_t>(src.data()), reinterpret_cast<uintptr_t>(mem.data()),
                               src.size() * 8};
  ASSERT_EQ(v.TransferSync(sname, hixl::WRITE, {d}, 10000), hixl::SUCCESS) << Why();

  BlackHole hole;
  // The member's own hello: a real id of its own.
  ControlClient anon(-1, -1, "127.0.0.1", PortOf(sname), "S");
  auto mine = Hello(anon, "member", hole.port);
  ASSERT_TRUE(mine.ok()) << mine.status().message();
  // A bye on its anonymous connection names no client (-1): refused.
  EXPECT_FALSE(anon.Call(Wire(ControlMsg::kBye), {}, kCallMs).ok());
  // Requests from ids S never gave: each refused, on a connection of its own.
  const std::vector<int64_t> forged = {mine.value() + 1, mine.value() - 1, 0, 1, 2, int64_t{1} << 40};
  for (int64_t id : forged) {
    for (ControlMsg m :
         {ControlMsg::kBye, ControlMsg::kFetchTable, ControlMsg::kNotify, ControlMsg::kGone, ControlMsg::kInvalidate}) {
      ControlClient forger(id, -1, "127.0.0.1", PortOf(sname), "S");
      std::string payload;
      if (m == ControlMsg::kNotify) payload = hixl::core::Encode(hixl::core::NamedNotify{"forged", "x"});
      if (m == ControlMsg::kInvalidate)
        payload = hixl::core::Encode(hixl::core::Invalidation{1, reinterpret_cast<uint64_t>(mem.data()), 64});
      auto r = forger.Call(Wire(m), payload, kCallMs);
      EXPECT_FALSE(r.ok()) << "S answered message " << int(Wire(m)) << " from id " << id;
    }
  }
  // The same against V's own listener (its calls back): a forged GONE
  // would break its connection to S.
  for (int64_t id : forged) {
    for (ControlMsg m : {ControlMsg::kGone, ControlMsg::kInvalidate}) {
      // One at a time: a live connection holds its id.
      ControlClient forger(id, -1, "127.0.0.1", PortOf(vname), "V");
      const std::string payload =
          m == ControlMsg::kGone
              ? std::string()
              : hixl::core::Encode(hixl::core::Invalidation{99, reinterpret_cast<uint64_t>(mem.data()), 64});
      EXPECT_FALSE(forger.Call(Wire(m), payload, kCallMs).ok())
          << "V took message " << int(Wire(m)) << " from id " << id;
    }
  }
  // V is unaffected: it writes and reads S's memory, and notifies it.
  for (auto& x : src) x ^= 0x5a5a5a5aull;
  ASSERT_EQ(v.TransferSync(sname, hixl::WRITE, {d}, 10000), hixl::SUCCESS) << Why();
  std::vector<uint64_t> back(src.size());
  const hixl::TransferOpDesc rd{reinterpret_cast<uintptr_t>(back.data()), reinterpret_cast<uintptr_t>(mem.data()),
                                back.size() * 8};
  ASSERT_EQ(v.TransferSync(sname, hixl::READ, {rd}, 10000), hixl::SUCCESS) << Why();
  EXPECT_EQ(back, src);
  EXPECT_EQ(mem, src);
  ASSERT_EQ(v.SendNotify(sname, {"victim", "hello"}, 10000), hixl::SUCCESS) << Why();
  std::vector<hixl::NotifyDesc> notes;
  ASSERT_EQ(s.WaitNotifies(notes, 10000), hixl::SUCCESS) << Why();
  ASSERT_EQ(notes.size(), 1u) << "only V's notification, none forged";
  EXPECT_EQ(notes[0].name, "victim");
  EXPECT_EQ(v.Disconnect(sname, 10000), hixl::SUCCESS) << Why();
  EXPECT_EQ(s.DeregisterMem(h), hixl::SUCCESS) << Why();
}

// A bye naming another id than the member's own removes nobody; the
// member's own bye removes it, once.
TEST(Identity, AByeRemovesOnlyTheClientWhoseIdItsConnectionHolds) {
  hixl::Engine s;
  const std::string sname = Start(s);
  ASSERT_FALSE(sname.empty());
  BlackHole hole;
  ControlClient anon(-1, -1, "127.0.0.1", PortOf(sname), "S");
  auto a = Hello(anon, "a", hole.port);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ControlClient as_a(a.value(), -1, "127.0.0.1", PortOf(sname), "S");
  ASSERT_TRUE(as_a.Call(Wire(ControlMsg::kFetchTable), {}, kCallMs).ok());
  ControlClient as_other(a.value() + 1, -1, "127.0.0.1", PortOf(sname), "S");
  EXPECT_FALSE(as_other.Call(Wire(ControlMsg::kBye), {}, kCallMs).ok());
  // a is still a client (the forged bye did nothing): its own bye works once.
  EXPECT_TRUE(as_a.Call(Wire(ControlMsg::kBye), {}, kCallMs).ok());
  EXPECT_FALSE(as_a.Call(Wire(ControlMsg::kBye), {}, kCallMs).ok()) << "a names a client no more";
}

TEST(Identity, AHelloFloodIsCappedAndFinalizeIsBoundedWhateverTheCallbacks) {
  hixl::Engine s;
  const std::string sname = Start(s, {{"timeout_ms", "1500"}});
  ASSERT_FALSE(sname.empty());
  BlackHole hole;
  ControlClient anon(-1, -1, "127.0.0.1", PortOf(sname), "S");
  int accepted = 0;
  hixl::Status refused;
  for (int i = 0; i < 5000 && refused.ok(); ++i) {
    auto id = Hello(anon, "flood-" + std::to_string(i), hole.port);
    if (id.ok()) {
      ++accepted;
    } else {
      refused = id.status();
    }
  }
  EXPECT_EQ(accepted, 4096) << "the documented cap (engine_impl.h kMaxClients)";
  EXPECT_EQ(refused.code(), Errc::kQueueFull) << refused.message();
  // Finalize says goodbye to 4096 callbacks that never answer: bounded by
  // its quick bound (min(timeout_ms, 2000) = 1500 ms) in all.
  const auto t0 = Clock::now();
  s.Finalize();
  const int64_t took = MsSince(t0);
  EXPECT_LT(took, 1500 + 1500) << "Finalize waited on the silent callbacks one after another";
  std::printf("Finalize with 4096 silent clients: %lld ms (bound 1500 ms)\n", static_cast<long long>(took));
}

TEST(Identity, DeregisterMemWithManySilentSubscribersIsBoundedAndNamesThem) {
  constexpr int64_t kBoundMs = 1500;
  constexpr int kSubs = 200;
  hixl::Engine s;
  const std::string sname = Start(s, {{"timeout_ms", std::to_string(kBoundMs)}});
  ASSERT_FALSE(sname.empty());
  std::vector<char> a(8192), b(8192);
  hixl::MemHandle ha = nullptr, hb = nullptr;
  ASSERT_EQ(s.RegisterMem({reinterpret_cast<uintptr_t>(a.data()), a.size()}, hixl::MEM_HOST, ha), hixl::SUCCESS);
  ASSERT_EQ(s.RegisterMem({reinterpret_cast<uintptr_t>(b.data()), b.size()}, hixl::MEM_HOST, hb), hixl::SUCCESS);
  BlackHole hole;
  ControlClient anon(-1, -1, "127.0.0.1", PortOf(sname), "S");
  for (int i = 0; i < kSubs; ++i) {
    auto id = Hello(anon, "silent-" + std::to_string(i), hole.port);
    ASSERT_TRUE(id.ok()) << id.status().message();
    ControlClient sub(id.value(), -1, "127.0.0.1", PortOf(sname), "S");
    ASSERT_TRUE(sub.Call(Wire(ControlMsg::kFetchTable), {}, kCallMs).ok()) << "subscribed";
  }
  const auto t0 = Clock::now();
  const hixl::EngineStatus st = s.DeregisterMem(ha);
  const int64_t took = MsSince(t0);
  const std::string why = Why();
  EXPECT_NE(st, hixl::SUCCESS) << "never a silent OK";
  EXPECT_LT(took, kBoundMs + 1500) << "bounded by the engine's timeout, not by the number of subscribers";
  EXPECT_NE(why.find("200 of 200 peers did not acknowledge"), std::string::npos) << why;
  EXPECT_NE(why.find("engine silent-"), std::string::npos) << why;
  EXPECT_NE(why.find("(and 192 more)"), std::string::npos) << why;
  std::printf("DeregisterMem with %d silent subscribers: %lld ms (bound %lld ms)\n", kSubs,
              static_cast<long long>(took), static_cast<long long>(kBoundMs));
  // They were dropped: the next deregistration does not wait on them.
  const auto t1 = Clock::now();
  EXPECT_EQ(s.DeregisterMem(hb), hixl::SUCCESS) << Why();
  EXPECT_LT(MsSince(t1), kBoundMs);
}

}  // namespace

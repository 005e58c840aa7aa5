// The peer-session layer (core/session.h), its control protocol and its
// notification queue, driven directly (the world and engine suites drive
// them through the front doors).
#include "core/session.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/control_protocol.h"
#include "core/notify_queue.h"

namespace hixl::core {
namespace {

// Every proper prefix of an encoded message is rejected.
template <typename Decode>
void ExpectPrefixesRejected(const std::string& bytes, Decode decode) {
  for (size_t n = 0; n < bytes.size(); ++n) EXPECT_FALSE(decode(bytes.substr(0, n))) << "prefix of " << n << " bytes";
}

TEST(ControlProtocol, MessagesRoundTripAndTruncatedOnesAreRejected) {
  const Invalidation inv{7, 0x1000, 64};
  auto i = DecodeInvalidation(Encode(inv));
  ASSERT_TRUE(i);
  EXPECT_EQ(i->generation, 7u);
  EXPECT_EQ(i->base, 0x1000u);
  EXPECT_EQ(i->len, 64u);
  ExpectPrefixesRejected(Encode(inv), DecodeInvalidation);

  const PeerRecord rec{"10.0.0.1", 4242, {{"shm", "a"}, {"ucx", "bb"}}};
  auto r = DecodePeerRecord(Encode(rec));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->host, "10.0.0.1");
  EXPECT_EQ(r->port, 4242);
  ASSERT_EQ(r->addresses.size(), 2u);
  EXPECT_EQ(r->addresses[1].kind, "ucx");
  EXPECT_EQ(r->addresses[1].address, "bb");
  ExpectPrefixesRejected(Encode(rec), DecodePeerRecord);

  const Hello h{42, "127.0.0.1:5000", "127.0.0.1", 6000, 3};
  auto hd = DecodeHello(Encode(h));
  ASSERT_TRUE(hd);
  EXPECT_EQ(hd->uuid, 42u);
  EXPECT_EQ(hd->name, "127.0.0.1:5000");
  EXPECT_EQ(hd->callback_port, 6000);
  EXPECT_EQ(hd->id_for_server, 3);
  ExpectPrefixesRejected(Encode(h), DecodeHello);

  const HelloReply hr{43, 9, {{"shm", "x"}}};
  auto hrd = DecodeHelloReply(Encode(hr));
  ASSERT_TRUE(hrd);
  EXPECT_EQ(hrd->uuid, 43u);
  EXPECT_EQ(hrd->id_for_client, 9);
  ASSERT_EQ(hrd->addresses.size(), 1u);
  ExpectPrefixesRejected(Encode(hr), DecodeHelloReply);

  auto n = DecodeNamedNotify(Encode(NamedNotify{"name", std::string("m\0g", 3)}));
  ASSERT_TRUE(n);
  EXPECT_EQ(n->name, "name");
  EXPECT_EQ(n->msg, std::string("m\0g", 3));

  // An address count no peer sends is malformed, not an allocation.
  PeerRecord many{"h", 1, {}};
  for (int k = 0; k < 65; ++k) many.addresses.push_back({"t", "a"});
  EXPECT_FALSE(DecodePeerRecord(Encode(many)));
}

TEST(NotifyQueue, BoundedOldestFirstAndClosable) {
  using Q = NotifyQueue<int>;
  Q q(2);
  size_t waiting = 0;
  EXPECT_TRUE(q.Push(1, &waiting));
  EXPECT_TRUE(q.Push(2, &waiting));
  EXPECT_FALSE(q.Push(3, &waiting));
  EXPECT_EQ(waiting, 2u);
  std::vector<int> out;
  EXPECT_EQ(q.Take(1, false, 0, &out), Q::Taken::kTaken);
  EXPECT_EQ(out, std::vector<int>{1});
  EXPECT_EQ(q.Take(10, false, 0, &out), Q::Taken::kTaken);
  EXPECT_EQ(out, (std::vector<int>{1, 2}));
  EXPECT_EQ(q.Take(10, true, 1, &out), Q::Taken::kTimedOut);

  // A push wakes a waiter; Close wakes it with kClosed.
  std::thread pusher([&] {
    size_t w = 0;
    EXPECT_TRUE(q.Push(4, &w));
  });
  out.clear();
  EXPECT_EQ(q.Take(10, true, 60000, &out), Q::Taken::kTaken);
  pusher.join();
  EXPECT_EQ(out, std::vector<int>{4});
  std::thread closer([&] { q.Close(); });
  EXPECT_EQ(q.Take(10, true, 60000, &out), Q::Taken::kClosed);
  closer.join();
  q.Reopen();
  EXPECT_EQ(q.Take(10, true, 1, &out), Q::Taken::kTimedOut);
}

// An alert (a peer died) ends a wait that finds no item, once, after the
// items queued before it; takers that do not ask for alerts never see them.
TEST(NotifyQueue, AlertsEndWaitsOnceAfterTheQueuedItems) {
  using Q = NotifyQueue<int>;
  Q q(8);
  size_t waiting = 0;
  EXPECT_TRUE(q.Push(1, &waiting));
  q.Alert("engine x died");
  std::vector<int> out;
  std::string alert;
  EXPECT_EQ(q.Take(10, true, 60000, &out, &alert), Q::Taken::kTaken);
  EXPECT_EQ(out, std::vector<int>{1});
  EXPECT_EQ(q.Take(10, false, 0, &out, &alert), Q::Taken::kTaken);  // no wait: no alert
  EXPECT_TRUE(alert.empty());
  EXPECT_EQ(q.Take(10, true, 1, &out), Q::Taken::kTimedOut);  // not asked for
  EXPECT_EQ(q.Take(10, true, 60000, &out, &alert), Q::Taken::kAlert);
  EXPECT_EQ(alert, "engine x died");
  EXPECT_EQ(q.Take(10, true, 1, &out, &alert), Q::Taken::kTimedOut);  // told once
  // An alert wakes a sleeping waiter.
  std::thread alerter([&] { q.Alert("engine y died"); });
  EXPECT_EQ(q.Take(10, true, 60000, &out, &alert), Q::Taken::kAlert);
  alerter.join();
  EXPECT_EQ(alert, "engine y died");
  EXPECT_EQ(out, std::vector<int>{1});
}

std::unique_ptr<Session> ShmSession(int self_id) {
  Session::Options o;
  o.self_id = self_id;
  o.node.timeout_ms = 10000;
  o.node.transports.only = "shm";
  auto s = Session::Create(o);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? std::move(s.value()) : nullptr;
}

TEST(Session, PicksATransportByAddressKindCapabilityAndCanReach) {
  auto s = ShmSession(0);
  ASSERT_TRUE(s);
  const PublishedAddresses mine = s->Addresses();
  ASSERT_EQ(mine.size(), 1u);
  Session::Choice c = s->Pick(mine);
  ASSERT_NE(c.transport, nullptr);
  EXPECT_EQ(c.address, mine[0].address);
  // An address is used only by a transport of its own kind.
  EXPECT_EQ(s->Pick({{"some-other-kind", mine[0].address}}).transport, nullptr);
  EXPECT_EQ(s->Pick({}).transport, nullptr);
  // A transport that cannot move the memory kind is not chosen.
  if (!c.transport->caps().device_memory) {
    EXPECT_EQ(s->Pick(mine, transport::MemKind::kDevice).transport, nullptr);
  }
  EXPECT_EQ(s->ReachesOtherHosts(), c.transport->caps().remote_hosts);
  EXPECT_EQ(s->TransportNames(), mine[0].kind);
}

// A front door of one peer that is this process itself, over its control
// endpoint (as an engine connected to itself).
struct LoopDelegate : Session::Delegate {
  std::mutex mu;
  std::map<int64_t, Session::Subscriber> subscribers;
  std::shared_ptr<PeerSession> peer;
  std::vector<std::string> notes;
  int subscriber_asks = 0;

  Result<Session::Subscriber> SubscriberFor(int64_t from) override {
    std::lock_guard lock(mu);
    ++subscriber_asks;  // a peer fetched our table over the control connection (or is asked to drop)
    auto it = subscribers.find(from);
    if (it == subscribers.end()) return Err(Errc::kInvalidRank, "unknown peer {}", from);
    return it->second;
  }
  Result<std::shared_ptr<PeerSession>> PeerFor(int64_t from) override {
    (void)from;
    std::lock_guard lock(mu);
    return peer;
  }
  Status Notified(int64_t from, std::string_view payload) override {
    (void)from;
    std::lock_guard lock(mu);
    notes.emplace_back(payload);
    return Status::Ok();
  }
  Result<std::string> Other(int64_t from, uint8_t type, std::string_view payload) override {
    (void)from, (void)payload;
    return Err(Errc::kInvalidArg, "unknown control request {}", type);
  }
};

// A session of rank 0 listening on loopback and connected to itself as
// peer 1 (d.peer), its control client subscribed as rank 5, with one
// 8 KiB region (buf) registered: a peer's view of this process's memory.
struct SelfConnected {
  void Start() {
    s = ShmSession(0);
    ASSERT_TRUE(s);
    ASSERT_TRUE(s->Listen("127.0.0.1", 0, &d).ok());
    ASSERT_NE(s->port(), 0);
    Session::Choice c = s->Pick(s->Addresses());
    ASSERT_NE(c.transport, nullptr);
    ASSERT_TRUE(c.transport->Connect(1, c.address, {}).ok());
    constexpr int kFrom = 5;
    auto control = std::make_shared<bootstrap::ControlClient>(kFrom, 1, "127.0.0.1", s->port(), "itself");
    {
      std::lock_guard lock(d.mu);
      d.subscribers[kFrom] = {"itself", control};
      d.peer = std::make_shared<PeerSession>(1, "itself", c.transport, control);
    }
    base = reinterpret_cast<uint64_t>(buf.data());
    LocalRegistry::Region r;
    r.desc.base = base;
    r.desc.len = buf.size();
    ASSERT_TRUE(s->AddRegion(r).ok());
  }
  LoopDelegate d;
  std::unique_ptr<Session> s;
  std::vector<char> buf = std::vector<char>(8192);
  uint64_t base = 0;
};

TEST(Session, RefreshesOnAMissAndEverySubscriberForgetsARemovedRegionBeforeRemoveReturns) {
  SelfConnected sc;
  ASSERT_NO_FATAL_FAILURE(sc.Start());
  auto& [d, s, buf, base] = sc;
  PeerSession& peer = *d.peer;

  // Not cached yet: the miss fetches the table (and subscribes).
  EXPECT_EQ(peer.table().Find(base, 64), nullptr);
  PeerTable::Pin pin;
  auto e = peer.Find(base + 64, 64, 10000, &pin);
  ASSERT_TRUE(e.ok()) << e.status().message();
  ASSERT_NE(e.value(), nullptr);
  EXPECT_EQ(e.value()->base, base);
  // A range outside every region stays a miss after the refresh.
  auto miss = peer.Find(base + buf.size() - 8, 64, 10000, &pin);
  ASSERT_TRUE(miss.ok());
  EXPECT_EQ(miss.value(), nullptr);
  pin.Release();  // RemoveRegion waits for the transfers that hold the table

  // The subscriber's copy forgets the region before RemoveRegion returns.
  std::optional<LocalRegistry::Region> removed;
  ASSERT_TRUE(s->RemoveRegion(base, false, &removed).ok());
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->desc.len, buf.size());
  EXPECT_EQ(peer.table().Find(base, 64), nullptr);
  EXPECT_FALSE(s->registry().Contains(base, 64));

  // Notifications reach the front door; unknown requests are refused.
  ASSERT_TRUE(peer.Call(ControlMsg::kNotify, "hello", 10000).ok());
  {
    std::lock_guard lock(d.mu);
    EXPECT_EQ(d.notes, std::vector<std::string>{"hello"});
  }
  EXPECT_FALSE(peer.Call(ControlMsg::kHello, "", 10000).ok());
  {
    std::lock_guard lock(d.mu);
    d.peer.reset();  // keys go before the transports
  }
}

// Two doors of this process (ids 0 and 1), each with a board, each the
// other's peer, as two ranks of a world on one host.
struct BoardPair {
  struct Door {
    LoopDelegate d;
    std::unique_ptr<Session> s;
  };
  void Start() {
    a.s = ShmSession(0);
    b.s = ShmSession(1);
    ASSERT_TRUE(a.s && b.s);
    for (Door* x : {&a, &b}) {
      ASSERT_TRUE(x->s->Listen("127.0.0.1", 0, &x->d).ok());
      ASSERT_TRUE(x->s->EnableBoard(2).ok());
    }
    ASSERT_NO_FATAL_FAILURE(Join(a, 0, b, 1));
    ASSERT_NO_FATAL_FAILURE(Join(b, 1, a, 0));
    a.s->ServeBoard();
    b.s->ServeBoard();
  }
  // `from` (id `from_id`) gets a peer session of `to` (id `to_id`), reading
  // its board.
  static void Join(Door& from, int from_id, Door& to, int to_id) {
    const PublishedAddresses addrs = to.s->Addresses();
    Session::Choice c = from.s->Pick(addrs);
    ASSERT_NE(c.transport, nullptr);
    ASSERT_TRUE(c.transport->Connect(to_id, c.address, {}).ok());
    auto control = std::make_shared<bootstrap::ControlClient>(from_id, to_id, "127.0.0.1", to.s->port(), "the other");
    auto peer = std::make_shared<PeerSession>(to_id, fmt::format("door {}", to_id), c.transport, control);
    bool board = false;
    for (const PublishedAddress& p : addrs) {
      if (p.kind != kBoardKind) continue;
      auto reader = BoardReader::Open(p.address, peer->who());
      ASSERT_TRUE(reader.ok()) << reader.status().message();
      ASSERT_NE(reader.value(), nullptr);
      peer->AttachBoard(std::move(reader.value()), from_id);
      board = true;
    }
    ASSERT_TRUE(board) << "no board published";
    std::lock_guard lock(from.d.mu);
    from.d.subscribers[to_id] = {peer->who(), control};
    from.d.peer = std::move(peer);
  }
  void Stop() {
    for (Door* x : {&a, &b}) {
      std::lock_guard lock(x->d.mu);
      x->d.peer.reset();  // keys go before the transports
    }
  }
  Door a, b;
};

// A miss learns the one region it needs from the owner's board (no control
// request), keeps what it learned before, and a removal still reaches it
// (it subscribed before reading) before RemoveRegion returns.
TEST(Session, AMissLearnsOneRegionFromTheBoardAndItsRemovalStillReachesUs) {
  BoardPair p;
  ASSERT_NO_FATAL_FAILURE(p.Start());
  std::vector<char> one(8192), two(4096);
  const auto b1 = reinterpret_cast<uint64_t>(one.data()), b2 = reinterpret_cast<uint64_t>(two.data());
  for (auto [base, len] : {std::pair<uint64_t, uint64_t>{b1, one.size()}, {b2, two.size()}}) {
    LocalRegistry::Region r;
    r.desc.base = base;
    r.desc.len = len;
    ASSERT_TRUE(p.b.s->AddRegion(r).ok());
  }
  PeerSession& b = *p.a.d.peer;  // door 0's view of door 1
  PeerTable::Pin pin;
  for (uint64_t base : {b1, b2}) {
    auto e = b.Find(base + 64, 64, 10000, &pin);
    ASSERT_TRUE(e.ok()) << e.status().message();
    ASSERT_NE(e.value(), nullptr);
    EXPECT_EQ(e.value()->base, base);
  }
  // Both held: learning the second kept the first.
  EXPECT_NE(b.table().Find(b1, 64), nullptr);
  EXPECT_NE(b.table().Find(b2, 64), nullptr);
  // A range in no region stays a miss, without an error.
  auto miss = b.Find(b1 + one.size() - 8, 64, 10000, &pin);
  ASSERT_TRUE(miss.ok()) << miss.status().message();
  EXPECT_EQ(miss.value(), nullptr);
  pin.Release();
  {
    std::lock_guard lock(p.b.d.mu);
    EXPECT_EQ(p.b.d.subscriber_asks, 0) << "the table was fetched over the control connection";
  }
  // The owner removes the first: our copy forgets it before RemoveRegion
  // returns, and keeps the second.
  ASSERT_TRUE(p.b.s->RemoveRegion(b1, false).ok());
  EXPECT_EQ(b.table().Find(b1, 64), nullptr);
  EXPECT_NE(b.table().Find(b2, 64), nullptr);
  p.Stop();
}

// Issue 13: an invalidation whose fence waits (a transfer into the region
// is still running) holds up no other request of the process: it waits on
// a control worker, not on the event loop.
TEST(Session, AnInvalidationWaitingForATransferHoldsUpNoOtherRequest) {
  SelfConnected sc;
  ASSERT_NO_FATAL_FAILURE(sc.Start());
  LoopDelegate& d = sc.d;
  std::unique_ptr<Session>& s = sc.s;
  const uint64_t base = sc.base;
  PeerSession& peer = *d.peer;
  // A transfer into the region is in flight: it holds the table.
  PeerTable::Pin pin;
  auto e = peer.Find(base, 64, 10000, &pin);
  ASSERT_TRUE(e.ok()) << e.status().message();
  ASSERT_NE(e.value(), nullptr);

  auto removal = std::async(std::launch::async, [&] { return s->RemoveRegion(base, false); });
  // The invalidation arrived (the cached table forgot the region on the
  // loop); its answer waits for the pin.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (peer.table().Find(base, 64) != nullptr && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_EQ(peer.table().Find(base, 64), nullptr) << "the invalidation never arrived";
  // Another peer is served meanwhile, well inside the invalidation's wait
  // (10 s): a blocked loop would time this out.
  bootstrap::ControlClient other(6, 1, "127.0.0.1", s->port(), "another");
  const auto t0 = std::chrono::steady_clock::now();
  auto note = other.Call(Wire(ControlMsg::kNotify), "meanwhile", 5000);
  ASSERT_TRUE(note.ok()) << note.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(removal.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "the removal returned while a transfer still held the region";
  // The transfer ends: the fence completes and the removal returns.
  pin.Release();
  ASSERT_EQ(removal.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  Status removed = removal.get();
  EXPECT_TRUE(removed.ok()) << removed.message();
  {
    std::lock_guard lock(d.mu);
    EXPECT_EQ(d.notes, std::vector<std::string>{"meanwhile"});
    d.peer.reset();  // keys go before the transports
  }
}

}  // namespace
}  // namespace hixl::core

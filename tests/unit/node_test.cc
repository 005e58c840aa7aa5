// The process's node (core/node.h) and the control server's listeners
// (bootstrap/control.h), driven directly.
#include "core/node.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bootstrap/control.h"
#include "core/session.h"

namespace hixl::core {
namespace {

Session::Options ShmOptions(int self_id = -1, int identity_ids = 0) {
  Session::Options o;
  o.self_id = self_id;
  o.identity_ids = identity_ids;
  o.node.timeout_ms = 10000;
  o.node.transports.only = "shm";
  return o;
}

std::unique_ptr<Session> Make(const Session::Options& o) {
  auto s = Session::Create(o);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? std::move(s.value()) : nullptr;
}

TEST(Node, FrontDoorsWithTheSameOptionsShareOneNodeOthersGetTheirOwn) {
  const int before = Node::LiveCount();  // another test's world may live on
  auto a = Make(ShmOptions());
  auto b = Make(ShmOptions());
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->node(), b->node());
  EXPECT_EQ(a->self_id(), 0);
  EXPECT_EQ(Node::LiveCount(), before + 1);
  // Peer ids are the node's: never the same twice while in use.
  const int ia = a->NewPeerId(), ib = b->NewPeerId();
  EXPECT_NE(ia, ib);
  EXPECT_NE(ia, a->self_id());
  // Other options: another node.
  Session::Options relay = ShmOptions();
  relay.node.transports.settings["shm_cma"] = "0";
  auto c = Make(relay);
  ASSERT_TRUE(c);
  EXPECT_NE(c->node(), a->node());
  EXPECT_EQ(Node::LiveCount(), before + 2);
  // A world of 3 as rank 0 needs ids 1 and 2, taken here: a node of its own.
  auto w = Make(ShmOptions(0, 3));
  ASSERT_TRUE(w);
  EXPECT_NE(w->node(), a->node());
  EXPECT_EQ(w->self_id(), 0);
  b.reset();  // its id goes back to the node, which a still holds
  EXPECT_EQ(a->NewPeerId(), ib);
  a.reset();
  c.reset();
  w.reset();
  EXPECT_EQ(Node::LiveCount(), before);
  // A world first (rank 1 of 3): its ranks are the node's ids; an engine
  // that comes later shares the node and gets an id above them.
  auto world = Make(ShmOptions(1, 3));
  auto e = Make(ShmOptions());
  ASSERT_TRUE(world && e);
  EXPECT_EQ(e->node(), world->node());
  EXPECT_EQ(e->self_id(), 1);
  EXPECT_EQ(e->NewPeerId(), 3);
  world.reset();
  e.reset();
  EXPECT_EQ(Node::LiveCount(), before);
}

// Lanes are the node's: above 0 (the default lane), never the same twice
// while in use, the lowest free one again once freed.
TEST(Node, LanesAreTheNodesAndFreedOnesComeBack) {
  auto a = Make(ShmOptions());
  auto b = Make(ShmOptions());
  ASSERT_TRUE(a && b);
  const int l1 = a->AllocateLane(), l2 = b->AllocateLane(), l3 = a->AllocateLane();
  EXPECT_EQ(l1, 1);
  EXPECT_EQ(l2, 2);
  EXPECT_EQ(l3, 3);
  a->FreeLane(l2);
  EXPECT_EQ(b->AllocateLane(), 2);
  a->FreeLane(0);  // the default lane is never freed
  EXPECT_EQ(a->AllocateLane(), 4);
}

TEST(Node, ARangeOfTwoDoorsIsRegisteredOnceAndEachDoorSeesOnlyItsOwn) {
  auto a = Make(ShmOptions());
  auto b = Make(ShmOptions());
  ASSERT_TRUE(a && b);
  std::vector<char> x(8192), y(8192);
  const auto bx = reinterpret_cast<uint64_t>(x.data()), by = reinterpret_cast<uint64_t>(y.data());
  LocalRegistry::Region rx, ry;
  rx.desc.base = bx;
  rx.desc.len = x.size();
  ry.desc.base = by;
  ry.desc.len = y.size();
  ASSERT_TRUE(a->AddRegion(rx).ok());
  ASSERT_TRUE(b->AddRegion(rx).ok());
  ASSERT_TRUE(b->AddRegion(ry).ok());
  // Overlapping ranges of different doors are each door's business.
  LocalRegistry::Region part = rx;
  part.desc.base += 4096;
  part.desc.len = 100;
  EXPECT_TRUE(a->AddRegion(ry).ok());
  EXPECT_FALSE(a->AddRegion(part).ok());  // overlaps a's own region
  EXPECT_TRUE(a->RemoveRegion(by, false).ok());
  // Each door's table holds what was registered through it.
  EXPECT_TRUE(a->registry().Contains(bx, 64));
  EXPECT_FALSE(a->registry().Contains(by, 64));
  EXPECT_TRUE(b->registry().Contains(by, 64));
  // The transports' host sees every door's memory.
  const Node& node = *a->node();
  auto covered = [&](uint64_t addr) { return node.AccessLocalRange(addr, 64, [] {}); };
  EXPECT_TRUE(covered(bx));
  EXPECT_TRUE(covered(by));
  // Removed through a: b's registration of the same range stands.
  ASSERT_TRUE(a->RemoveRegion(bx, false).ok());
  EXPECT_FALSE(a->registry().Contains(bx, 64));
  EXPECT_TRUE(b->registry().Contains(bx, 64));
  EXPECT_TRUE(covered(bx));
  b.reset();  // releases b's regions
  EXPECT_FALSE(covered(bx));
  EXPECT_FALSE(covered(by));
}

TEST(ControlServer, EachListenerServesItsOwnHandlerUntilRemoved) {
  auto server = bootstrap::ControlServer::Create();
  ASSERT_TRUE(server.ok()) << server.status().message();
  auto handler = [](std::string tag) {
    return [tag](int from, uint8_t type, std::string_view p) -> Result<std::string> {
      return tag + ":" + std::to_string(from) + ":" + std::to_string(type) + ":" + std::string(p);
    };
  };
  auto one = server.value()->AddListener("127.0.0.1", 0, handler("one"));
  auto two = server.value()->AddListener("127.0.0.1", 0, handler("two"));
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_NE(one.value().port, two.value().port);
  EXPECT_EQ(server.value()->port(), one.value().port);
  bootstrap::ControlClient c1(4, 0, "127.0.0.1", one.value().port, "one");
  bootstrap::ControlClient c2(5, 0, "127.0.0.1", two.value().port, "two");
  auto r1 = c1.Call(9, "x", 10000);
  auto r2 = c2.Call(9, "y", 10000);
  ASSERT_TRUE(r1.ok() && r2.ok()) << r1.status().message() << r2.status().message();
  EXPECT_EQ(r1.value(), "one:4:9:x");
  EXPECT_EQ(r2.value(), "two:5:9:y");
  // Removed: its connections are closed, the other listener serves on.
  server.value()->RemoveListener(one.value().id);
  EXPECT_FALSE(c1.Call(9, "x", 2000).ok());
  auto again = c2.Call(9, "z", 10000);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again.value(), "two:5:9:z");
}

}  // namespace
}  // namespace hixl::core

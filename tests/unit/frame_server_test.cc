// The framed-connection server (base/frame_server.h) on the process's
// event loop (base/event_loop.h), against clients that misbehave: partial
// frames, oversized headers, replies never read, too many connections,
// half-open connections.
#include "base/frame_server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/auth.h"
#include "base/event_loop.h"
#include "base/socket.h"

namespace hixl::net {
namespace {

using std::chrono::milliseconds;

// Polls cond until it holds or the bound passes (no fixed sleeps).
template <typename Cond>
bool Eventually(Cond cond, int64_t ms = 10000) {
  const Deadline end = DeadlineIn(ms);
  while (Clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return cond();
}

// An echo server: every frame is answered with itself; the first byte
// 'B' binds the connection, 'P' pauses it and 'U' unpauses the others.
struct Echo {
  std::mutex mu;
  std::vector<std::string> closed;  // why, per closed connection; guarded by mu
  std::vector<FrameServer::ConnId> paused;
  FrameServer::Listener l;
  std::unique_ptr<FrameServer> fs;  // last: gone first, with the handlers that use the above

  explicit Echo(FrameServerOptions o, uint32_t cap = 1000) {
    auto s = FrameServer::Create(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status().message();
    fs = std::move(s.value());
    auto lfd = Listen("127.0.0.1", 0);
    EXPECT_TRUE(lfd.ok());
    FrameServer::Handlers h;
    h.max_frame = [cap](const uint8_t*) { return cap; };
    h.on_frame = [this](FrameServer::ConnId id, std::string_view f) {
      if (!f.empty() && f[0] == 'B') fs->Bind(id);
      if (!f.empty() && f[0] == 'P') {
        paused.push_back(id);
        fs->Pause(id, true);
      }
      if (!f.empty() && f[0] == 'U') {
        for (auto p : paused) fs->Pause(p, false);
        paused.clear();
      }
      fs->Send(id, f);
    };
    h.on_close = [this](FrameServer::ConnId, const std::string& why) {
      std::lock_guard lock(mu);
      closed.push_back(why);
    };
    auto added = fs->AddListener(std::move(lfd.value()), std::move(h));
    EXPECT_TRUE(added.ok()) << added.status().message();
    l = added.value();
  }
  bool Closed(const std::string& part) {
    std::lock_guard lock(mu);
    for (auto& w : closed) {
      if (w.find(part) != std::string::npos) return true;
    }
    return false;
  }
};

Fd Dial(uint16_t port) {
  auto fd = Connect("127.0.0.1", port, DeadlineIn(5000));
  EXPECT_TRUE(fd.ok()) << fd.status().message();
  Status s = auth::ClientHandshake(fd->get(), std::nullopt, auth::Kind::kControl, DeadlineIn(5000), "test server");
  EXPECT_TRUE(s.ok()) << s.message();
  return std::move(fd.value());
}

std::string RoundTrip(int fd, const std::string& m) {
  EXPECT_TRUE(SendFrame(fd, m, DeadlineIn(5000)).ok());
  auto r = RecvFrame(fd, DeadlineIn(5000));
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value() : std::string();
}

// True when the server closed fd (EOF or reset) within the bound.
bool ClosedByServer(int fd, int64_t ms = 10000) {
  const Deadline end = DeadlineIn(ms);
  char buf[4096];
  while (Clock::now() < end) {
    ssize_t k = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
    if (k < 0) std::this_thread::sleep_for(milliseconds(2));
  }
  return false;
}

TEST(FrameServer, PartialFramesOfSomeClientsDoNotDelayOthers) {
  Echo e({});
  std::vector<Fd> slow;
  for (int i = 0; i < 6; ++i) {
    slow.push_back(Dial(e.l.port));
    ASSERT_EQ(::send(slow.back().get(), "\x05\x00", 2, MSG_NOSIGNAL), 2);  // 2 bytes of a header, then nothing
  }
  Fd ok = Dial(e.l.port);
  const auto t0 = Clock::now();
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(RoundTrip(ok.get(), "hello " + std::to_string(i)), "hello " + std::to_string(i));
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
  EXPECT_LT(took, 1000) << "20 round trips took " << took << " ms beside 6 stalled clients";
  // The stalled clients still finish their frames: a frame may come in pieces.
  ASSERT_EQ(::send(slow[0].get(), "\x00\x00hello", 7, MSG_NOSIGNAL), 7);
  auto r = RecvFrame(slow[0].get(), DeadlineIn(5000));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value(), "hello");
}

TEST(FrameServer, AnOversizedHeaderIsRefusedBeforeItsBody) {
  Echo e({}, 100);
  Fd c = Dial(e.l.port);
  const uint32_t n = 1u << 20;
  char head[5];
  std::memcpy(head, &n, 4);
  head[4] = 'x';
  ASSERT_EQ(::send(c.get(), head, 5, MSG_NOSIGNAL), 5);  // no body follows
  EXPECT_TRUE(ClosedByServer(c.get()));
  EXPECT_TRUE(Eventually([&] { return e.Closed("frame of 1048576 bytes of type 120 (at most 100)"); }));
  // The server goes on.
  Fd d = Dial(e.l.port);
  EXPECT_EQ(RoundTrip(d.get(), "still"), "still");
}

TEST(FrameServer, AClientThatDoesNotReadItsRepliesIsDropped) {
  FrameServerOptions o;
  o.max_out = 256 << 10;
  Echo e(o, 64 << 10);
  Fd c = Dial(e.l.port);
  // The client's receive buffer keeps its default size: one smaller than a
  // loopback segment makes the client drop the server's segments, and Linux
  // may then ignore the server's window updates, so that the client's sends
  // stall for good while the server has read everything (seen once in 1000
  // runs under load).  The kernel's buffers hold a few MiB of replies.
  const std::string big(60 << 10, 'x');
  // Requests, never a read: the replies pile up in the server until its cap.
  for (int i = 0; i < 1000 && !e.Closed("does not read its replies"); ++i) {
    if (!SendFrame(c.get(), big, DeadlineIn(10000)).ok()) break;
  }
  EXPECT_TRUE(Eventually([&] { return e.Closed("does not read its replies"); }));
  Fd d = Dial(e.l.port);
  EXPECT_EQ(RoundTrip(d.get(), "still"), "still");
}

TEST(FrameServer, PastTheCapTheOldestUnboundGoesThenNewcomersAreClosedAtOnce) {
  FrameServerOptions o;
  o.max_conns = 4;
  Echo e(o);
  std::vector<Fd> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(Dial(e.l.port));
  ASSERT_TRUE(Eventually([&] { return e.fs->Connections(e.l.id) == 4; }));
  // A fifth: the oldest idle one (never identified itself) makes room.
  Fd fifth = Dial(e.l.port);
  EXPECT_EQ(RoundTrip(fifth.get(), "B"), "B");
  EXPECT_TRUE(ClosedByServer(idle[0].get()));
  EXPECT_EQ(e.fs->Connections(e.l.id), 4u);
  // All bound: the next newcomer is closed at once, the others are served.
  for (int i = 1; i < 4; ++i) EXPECT_EQ(RoundTrip(idle[i].get(), "B"), "B");
  for (int i = 0; i < 50; ++i) {
    auto fd = Connect("127.0.0.1", e.l.port, DeadlineIn(5000));
    ASSERT_TRUE(fd.ok());
    EXPECT_TRUE(ClosedByServer(fd->get()));
  }
  EXPECT_EQ(e.fs->Connections(e.l.id), 4u);
  EXPECT_EQ(RoundTrip(fifth.get(), "B again"), "B again");
}

TEST(FrameServer, HalfOpenConnectionsAreClosedAfterTheirTimeout) {
  FrameServerOptions o;
  o.partial_frame_ms = 300;
  o.handshake_ms = 300;
  o.unbound_ms = 300;
  o.secret = auth::Secret{};  // a handshake to stall in
  o.secret->key.fill(7);
  Echo e(o);
  // Connected, never answered the greeting.
  auto mute = Connect("127.0.0.1", e.l.port, DeadlineIn(5000));
  ASSERT_TRUE(mute.ok());
  EXPECT_TRUE(ClosedByServer(mute->get()));
  // Authenticated, half a frame, then nothing.
  auto half = Connect("127.0.0.1", e.l.port, DeadlineIn(5000));
  ASSERT_TRUE(half.ok());
  ASSERT_TRUE(auth::ClientHandshake(half->get(), o.secret, auth::Kind::kControl, DeadlineIn(5000), "s").ok());
  ASSERT_TRUE(SendFrame(half->get(), "B", DeadlineIn(5000)).ok());  // bound: only the partial frame counts
  ASSERT_TRUE(RecvFrame(half->get(), DeadlineIn(5000)).ok());
  ASSERT_EQ(::send(half->get(), "\x09\x00\x00", 3, MSG_NOSIGNAL), 3);
  EXPECT_TRUE(ClosedByServer(half->get()));
  EXPECT_TRUE(Eventually([&] { return e.Closed("part of a frame"); }));
  // Authenticated, never identified itself.
  auto anon = Connect("127.0.0.1", e.l.port, DeadlineIn(5000));
  ASSERT_TRUE(anon.ok());
  ASSERT_TRUE(auth::ClientHandshake(anon->get(), o.secret, auth::Kind::kControl, DeadlineIn(5000), "s").ok());
  EXPECT_TRUE(ClosedByServer(anon->get()));
  EXPECT_TRUE(Eventually([&] { return e.Closed("did not identify itself"); }));
  // Bound and idle (well past the timeouts) stays.
  auto idle = Connect("127.0.0.1", e.l.port, DeadlineIn(5000));
  ASSERT_TRUE(idle.ok());
  ASSERT_TRUE(auth::ClientHandshake(idle->get(), o.secret, auth::Kind::kControl, DeadlineIn(5000), "s").ok());
  EXPECT_EQ(RoundTrip(idle->get(), "B"), "B");
  EXPECT_FALSE(ClosedByServer(idle->get(), 1000));
  EXPECT_EQ(RoundTrip(idle->get(), "B later"), "B later");
}

TEST(FrameServer, APausedConnectionIsServedInOrderAfterwards) {
  Echo e({});
  Fd a = Dial(e.l.port);
  Fd b = Dial(e.l.port);
  EXPECT_EQ(RoundTrip(a.get(), "P"), "P");  // a is paused now
  ASSERT_TRUE(SendFrame(a.get(), "one", DeadlineIn(5000)).ok());
  ASSERT_TRUE(SendFrame(a.get(), "two", DeadlineIn(5000)).ok());
  EXPECT_FALSE(RecvFrame(a.get(), DeadlineIn(200)).ok());  // nothing while paused
  EXPECT_EQ(RoundTrip(b.get(), "U"), "U");
  auto one = RecvFrame(a.get(), DeadlineIn(5000));
  auto two = RecvFrame(a.get(), DeadlineIn(5000));
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_EQ(one.value(), "one");
  EXPECT_EQ(two.value(), "two");
}

TEST(EventLoop, OneThreadForEveryHolderAndCallRunsInlineOnIt) {
  auto a = ev::EventLoop::Acquire();
  auto b = ev::EventLoop::Acquire();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  std::atomic<bool> inner{false};
  a.value()->Call([&] {
    EXPECT_TRUE(a.value()->OnLoopThread());
    a.value()->Call([&] { inner = true; });  // would deadlock if not inline
  });
  EXPECT_TRUE(inner);
  EXPECT_FALSE(a.value()->OnLoopThread());
}

// The last holder's release wakes the loop to end it.  A wake that was
// already pending (a Post whose work an earlier turn ran) used to let the
// loop end first, and then the release's wake-up wrote to the loop's closed
// pipe: libuv aborts the process there.  Many short lives, each released
// with such a wake in flight.
TEST(EventLoop, ReleasingItWhileAWakeIsPendingIsSafe) {
  for (int i = 0; i < 3000; ++i) {
    auto l = ev::EventLoop::Acquire();
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    std::shared_ptr<ev::EventLoop> mine = std::move(l).value();
    std::thread poster([o = mine]() mutable {
      for (int k = 0; k < 3; ++k) o->Post([] {});
      o.reset();
    });
    int ran = 0;
    mine->Call([&] { ++ran; });
    EXPECT_EQ(ran, 1);
    mine.reset();  // the last holder is this thread or the poster
    poster.join();
  }
}

}  // namespace
}  // namespace hixl::net

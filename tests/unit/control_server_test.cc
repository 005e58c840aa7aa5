// The control server on the event loop (bootstrap/control_server.cc): the
// identity a connection claims is kept, and clients that stall cost the
// others nothing.
#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/auth.h"
#include "base/socket.h"
#include "bootstrap/control.h"

namespace hixl::bootstrap {
namespace {

std::unique_ptr<ControlServer> Echo() {
  auto s = ControlServer::Start("127.0.0.1", [](int64_t from, uint8_t, std::string_view p) -> Result<std::string> {
    return std::to_string(from) + ":" + std::string(p);
  });
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? std::move(s.value()) : nullptr;
}

net::Fd Raw(uint16_t port) {
  auto fd = net::Connect("127.0.0.1", port, net::DeadlineIn(5000));
  EXPECT_TRUE(fd.ok());
  EXPECT_TRUE(auth::ClientHandshake(fd->get(), std::nullopt, auth::Kind::kControl, net::DeadlineIn(5000), "test").ok());
  return std::move(fd.value());
}

// One request as `from`; the reply's payload, or the error (a closed
// connection is kPeerFailed).
Result<std::string> Ask(int fd, int64_t from, std::string_view p) {
  net::Writer w;
  w.Put<uint8_t>(7).Put<int64_t>(from).str().append(p);
  HIXL_RETURN_IF_ERROR(net::SendFrame(fd, w.str(), net::DeadlineIn(5000)));
  HIXL_ASSIGN_OR_RETURN(std::string r, net::RecvFrame(fd, net::DeadlineIn(5000)));
  if (r.size() < 4) return Err(Errc::kTransport, "short reply");
  return r.substr(4);
}

TEST(ControlServerIdentity, AConnectionKeepsTheIdOfItsFirstRequest) {
  auto server = Echo();
  ASSERT_TRUE(server);
  net::Fd a = Raw(server->port());
  auto r = Ask(a.get(), 3, "x");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value(), "3:x");
  // Another id on the same connection: dropped.
  EXPECT_FALSE(Ask(a.get(), 4, "y").ok());
  // A second live connection claiming an id bound elsewhere: dropped; the
  // first keeps it.
  ControlClient three(3, 0, "127.0.0.1", server->port());
  ASSERT_TRUE(three.Call(7, "first", 5000).ok());
  net::Fd b = Raw(server->port());
  EXPECT_FALSE(Ask(b.get(), 3, "impostor").ok());
  auto again = three.Call(7, "still", 5000);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again.value(), "3:still");
  // Once its connection is gone, the id may be claimed again.
  three.Close();
  bool reclaimed = false;
  for (int i = 0; i < 500 && !reclaimed; ++i) {  // until the server has seen the close (bounded)
    net::Fd c = Raw(server->port());
    reclaimed = Ask(c.get(), 3, "again").ok();
    if (!reclaimed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(reclaimed);
}

TEST(ControlServerIdentity, AnonymousMayBeOnManyConnections) {
  auto server = Echo();
  ASSERT_TRUE(server);
  std::vector<net::Fd> fds;
  for (int i = 0; i < 5; ++i) {
    fds.push_back(Raw(server->port()));
    auto r = Ask(fds.back().get(), -1, "hello");
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r.value(), "-1:hello");
  }
  for (auto& fd : fds) EXPECT_TRUE(Ask(fd.get(), -1, "again").ok());
}

TEST(ControlServerStall, ClientsSendingTwoBytesDelayNobody) {
  auto server = Echo();
  ASSERT_TRUE(server);
  std::vector<net::Fd> slow;
  for (int i = 0; i < 8; ++i) {
    slow.push_back(Raw(server->port()));
    ASSERT_EQ(::send(slow.back().get(), "\x20\x00", 2, MSG_NOSIGNAL), 2);
  }
  ControlClient c(1, 0, "127.0.0.1", server->port());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(c.Call(7, "x", 5000).ok());
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  // The poll loop this replaced waited up to 5 s on each partial frame.
  EXPECT_LT(ms, 1000) << "20 calls took " << ms << " ms beside 8 stalled clients";
}

// ------------------------------------------------ deferred answers (Later)

constexpr uint8_t kNow = 7;    // answered by the handler
constexpr uint8_t kLater = 8;  // answered by deferred work, once the gate opens

// What the handler and its deferred work did, in order; and the gate the
// work waits behind (bounded, so that a failed test still ends).
struct Events {
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  bool opened = false;  // the test thread's
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> log;  // guarded by mu
  std::string worker_name;       // guarded by mu: the thread of the last deferred work

  void Open() {
    if (!opened) open.set_value();
    opened = true;
  }
  void Add(std::string e) {
    {
      std::lock_guard lock(mu);
      log.push_back(std::move(e));
    }
    cv.notify_all();
  }
  // False when `e` did not happen within 10 s.
  bool WaitFor(const std::string& e) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10),
                       [&] { return std::find(log.begin(), log.end(), e) != log.end(); });
  }
  // The position of `e` in the log (-1: absent).
  int At(const std::string& e) {
    std::lock_guard lock(mu);
    auto it = std::find(log.begin(), log.end(), e);
    return it == log.end() ? -1 : static_cast<int>(it - log.begin());
  }
};

// Opens the gate when the test ends, however it ends, before the server
// (declared earlier) waits for the work behind it.
struct OpenAtEnd {
  Events* ev;
  ~OpenAtEnd() { ev->Open(); }
};

std::unique_ptr<ControlServer> Deferring(const std::shared_ptr<Events>& ev) {
  auto s = ControlServer::Start("127.0.0.1", [ev](int64_t from, uint8_t type, std::string_view p) -> ControlAnswer {
    const std::string tag = std::to_string(from) + ":" + std::string(p);
    if (type != kLater) {
      ev->Add("served " + tag);
      return tag;
    }
    ev->Add("queued " + tag);
    return ControlAnswer::Later([ev, tag]() -> Result<std::string> {
      char name[16] = {};
      ::pthread_getname_np(::pthread_self(), name, sizeof(name));
      {
        std::lock_guard lock(ev->mu);
        ev->worker_name = name;
      }
      ev->Add("started " + tag);
      if (ev->gate.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
        return Err(Errc::kTimeout, "the gate never opened");
      }
      ev->Add("done " + tag);
      return "late " + tag;
    });
  });
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? std::move(s.value()) : nullptr;
}

bool SendReq(int fd, uint8_t type, int64_t from, std::string_view p) {
  net::Writer w;
  w.Put<uint8_t>(type).Put<int64_t>(from).str().append(p);
  return net::SendFrame(fd, w.str(), net::DeadlineIn(5000)).ok();
}

Result<std::string> RecvReply(int fd) {
  HIXL_ASSIGN_OR_RETURN(std::string r, net::RecvFrame(fd, net::DeadlineIn(5000)));
  if (r.size() < 4) return Err(Errc::kTransport, "short reply");
  return r.substr(4);
}

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

TEST(ControlServerDeferred, OneConnectionWaitsForItsAnswerWhileOthersAreServed) {
  auto ev = std::make_shared<Events>();
  auto server = Deferring(ev);
  ASSERT_TRUE(server);
  OpenAtEnd open_at_end{ev.get()};
  net::Fd a = Raw(server->port());
  ASSERT_TRUE(SendReq(a.get(), kLater, 1, "x"));
  ASSERT_TRUE(ev->WaitFor("started 1:x"));
  // A's next request waits behind its deferred one.
  ASSERT_TRUE(SendReq(a.get(), kNow, 1, "y"));
  // Others are served meanwhile, answered at once or deferred too (on a
  // second worker: the first is still busy).
  ControlClient b(2, 0, "127.0.0.1", server->port());
  for (int i = 0; i < 3; ++i) {
    auto r = b.Call(kNow, "z", 5000);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r.value(), "2:z");
  }
  net::Fd c = Raw(server->port());
  ASSERT_TRUE(SendReq(c.get(), kLater, 3, "w"));
  ASSERT_TRUE(ev->WaitFor("started 3:w"));
  EXPECT_FALSE(Readable(a.get())) << "A was answered before its deferred work ended";
  {
    std::lock_guard lock(ev->mu);
    EXPECT_EQ(ev->worker_name, "hixl-deferred");
  }
  ev->Open();
  auto x = RecvReply(a.get());
  ASSERT_TRUE(x.ok()) << x.status().message();
  EXPECT_EQ(x.value(), "late 1:x");
  auto y = RecvReply(a.get());
  ASSERT_TRUE(y.ok()) << y.status().message();
  EXPECT_EQ(y.value(), "1:y");
  auto w = RecvReply(c.get());
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w.value(), "late 3:w");
  // A's second request reached the handler only after its first's answer.
  EXPECT_LT(ev->At("done 1:x"), ev->At("served 1:y"));
  EXPECT_LT(ev->At("served 2:z"), ev->At("done 1:x"));
}

TEST(ControlServerDeferred, AnAnswerToAConnectionClosedMeanwhileIsDropped) {
  auto ev = std::make_shared<Events>();
  auto server = Deferring(ev);
  ASSERT_TRUE(server);
  OpenAtEnd open_at_end{ev.get()};
  net::Fd a = Raw(server->port());
  ASSERT_TRUE(SendReq(a.get(), kLater, 1, "x"));
  ASSERT_TRUE(ev->WaitFor("started 1:x"));
  a.Reset();
  // A new connection may claim id 1 once the server saw A's end (it looks
  // when the id is claimed): the server knows A is gone before the answer.
  net::Fd a2 = Raw(server->port());
  ASSERT_TRUE(SendReq(a2.get(), kNow, 1, "again"));
  auto again = RecvReply(a2.get());
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again.value(), "1:again");
  ev->Open();
  ASSERT_TRUE(ev->WaitFor("done 1:x"));
  // The new connection hears its own answers only.
  ASSERT_TRUE(SendReq(a2.get(), kLater, 1, "z"));
  auto z = RecvReply(a2.get());
  ASSERT_TRUE(z.ok()) << z.status().message();
  EXPECT_EQ(z.value(), "late 1:z");
  ASSERT_TRUE(SendReq(a2.get(), kNow, 1, "last"));
  auto last = RecvReply(a2.get());
  ASSERT_TRUE(last.ok()) << last.status().message();
  EXPECT_EQ(last.value(), "1:last");
  EXPECT_FALSE(Readable(a2.get()));
}

// Fills the server's workers with work that waits on the gate, then queues
// one more request (from 20, "q") behind them; returns the connections.
std::vector<net::Fd> FillWorkers(ControlServer& server, Events& ev) {
  std::vector<net::Fd> fds;
  for (size_t i = 0; i < kControlWorkers; ++i) {
    fds.push_back(Raw(server.port()));
    const int64_t from = 10 + static_cast<int64_t>(i);
    EXPECT_TRUE(SendReq(fds.back().get(), kLater, from, "busy"));
    EXPECT_TRUE(ev.WaitFor("started " + std::to_string(from) + ":busy"));
  }
  fds.push_back(Raw(server.port()));
  EXPECT_TRUE(SendReq(fds.back().get(), kLater, 20, "q"));
  EXPECT_TRUE(ev.WaitFor("queued 20:q"));
  // The loop finished that request's handling (queued it) before it
  // served this one.
  ControlClient other(30, 0, "127.0.0.1", server.port());
  EXPECT_TRUE(other.Call(kNow, "sync", 5000).ok());
  return fds;
}

TEST(ControlServerDeferred, QueuedWorkOfAClosedConnectionNeverRuns) {
  auto ev = std::make_shared<Events>();
  auto server = Deferring(ev);
  ASSERT_TRUE(server);
  OpenAtEnd open_at_end{ev.get()};
  std::vector<net::Fd> fds = FillWorkers(*server, *ev);
  ASSERT_FALSE(HasFailure());
  fds.back().Reset();
  // The server sees that end when id 20 is claimed again.
  net::Fd again = Raw(server->port());
  ASSERT_TRUE(SendReq(again.get(), kNow, 20, "again"));
  auto r = RecvReply(again.get());
  ASSERT_TRUE(r.ok()) << r.status().message();
  ev->Open();
  for (size_t i = 0; i < kControlWorkers; ++i) {
    auto busy = RecvReply(fds[i].get());
    ASSERT_TRUE(busy.ok()) << busy.status().message();
    EXPECT_EQ(busy.value(), "late " + std::to_string(10 + i) + ":busy");
  }
  // Work queued after 20's would have come after it (the queue is in order).
  ASSERT_TRUE(SendReq(again.get(), kLater, 20, "after"));
  auto after = RecvReply(again.get());
  ASSERT_TRUE(after.ok()) << after.status().message();
  server.reset();  // waits for any work running
  EXPECT_EQ(ev->At("started 20:q"), -1) << "the work of a closed connection ran";
}

TEST(ControlServerDeferred, DestroyingTheServerWaitsForRunningWorkAndDropsQueuedWork) {
  auto ev = std::make_shared<Events>();
  auto server = Deferring(ev);
  ASSERT_TRUE(server);
  OpenAtEnd open_at_end{ev.get()};
  std::vector<net::Fd> fds = FillWorkers(*server, *ev);
  ASSERT_FALSE(HasFailure());
  std::thread destroyer([&] { server.reset(); });
  // The destructor closes the connections (and drops the queued work)
  // before it waits for the running work.
  auto end = RecvReply(fds[0].get());
  EXPECT_FALSE(end.ok());
  ev->Open();
  destroyer.join();
  for (size_t i = 0; i < kControlWorkers; ++i) {
    EXPECT_GE(ev->At("done " + std::to_string(10 + i) + ":busy"), 0) << "the destructor did not wait for work " << i;
  }
  EXPECT_EQ(ev->At("started 20:q"), -1) << "queued work ran after its server closed";
}

}  // namespace
}  // namespace hixl::bootstrap

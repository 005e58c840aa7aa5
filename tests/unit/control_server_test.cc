// The control server on the event loop (bootstrap/control_server.cc): the
// identity a connection claims is kept, and clients that stall cost the
// others nothing.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
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

}  // namespace
}  // namespace hixl::bootstrap

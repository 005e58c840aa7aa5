// The store server on the event loop (bootstrap/store_server.cc): started
// on a socket the caller bound, and served while strangers stall.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>
#include <vector>

#include "base/auth.h"
#include "base/socket.h"
#include "bootstrap/store.h"

namespace hixl::bootstrap {
namespace {

TEST(StoreOnTheLoop, StartsOnASocketTheCallerBound) {
  auto lfd = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(lfd.ok());
  auto port = net::LocalPort(lfd->get());
  ASSERT_TRUE(port.ok());
  auto server = TcpStoreServer::StartOn(std::move(lfd.value()), 2);
  ASSERT_TRUE(server.ok()) << server.status().message();
  EXPECT_EQ((*server)->port(), port.value());
  auto a = TcpStoreClient::Connect("127.0.0.1", port.value(), 0, 5000);
  auto b = TcpStoreClient::Connect("127.0.0.1", port.value(), 1, 5000);
  ASSERT_TRUE(a.ok() && b.ok());
  std::thread waiter([&] { EXPECT_TRUE((*b)->WaitAtLeast("n", 1, 10000).ok()); });
  ASSERT_TRUE((*a)->Add("n", 1).ok());
  waiter.join();
  auto v = (*b)->Get("n", 1000);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v.value(), "1");
  EXPECT_TRUE((*a)->Close().ok());
  EXPECT_TRUE((*b)->Close().ok());
}

TEST(StoreOnTheLoop, RefusesASocketThatDoesNotListen) {
  net::Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  auto server = TcpStoreServer::StartOn(std::move(s), 1);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("not a listening socket"), std::string::npos) << server.status().message();
}

TEST(StoreOnTheLoop, ClientsStalledMidFrameDelayNobody) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0, 1);
  ASSERT_TRUE(server.ok());
  const uint16_t port = (*server)->port();
  std::vector<net::Fd> slow;
  for (int i = 0; i < 8; ++i) {
    auto fd = net::Connect("127.0.0.1", port, net::DeadlineIn(5000));
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(
        auth::ClientHandshake(fd->get(), std::nullopt, auth::Kind::kStore, net::DeadlineIn(5000), "store").ok());
    ASSERT_EQ(::send(fd->get(), "\x05\x00", 2, MSG_NOSIGNAL), 2);  // 2 bytes of a HELLO's header
    slow.push_back(std::move(fd.value()));
  }
  auto c = TcpStoreClient::Connect("127.0.0.1", port, 0, 5000);
  ASSERT_TRUE(c.ok()) << c.status().message();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE((*c)->Add("k", 1).ok());
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 1000) << "50 requests took " << ms << " ms beside 8 stalled clients";
  EXPECT_TRUE((*c)->Close().ok());
}

}  // namespace
}  // namespace hixl::bootstrap

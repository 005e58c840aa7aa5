// The frame server's options for the shm transport's Unix socket
// (base/frame_server.h): fixed-size frames without a length prefix,
// descriptors passed with SCM_RIGHTS both ways, the same-user check; and
// that a client stalled half-way through a fixed frame delays no one.
// The client side is the shm transport's own (transport/shm/fd_channel.h).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/auth.h"
#include "base/fd_passing.h"
#include "base/frame_server.h"
#include "base/socket.h"
#include "transport/shm/fd_channel.h"

namespace hixl::net {
namespace {

using std::chrono::milliseconds;
using transport::shm::Msg;

// A memfd of n bytes.
Fd MemFd(size_t n) {
  Fd fd(::memfd_create("hixl-test", MFD_CLOEXEC));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(::ftruncate(fd.get(), static_cast<off_t>(n)), 0);
  return fd;
}

uint64_t SizeOf(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// Answers each Msg with: a = the size of the descriptor passed with it (0
// when none), b = how many descriptors the server got in all; and when
// m.a != 0, a memfd of m.a bytes passed back.
struct FdEcho {
  std::mutex mu;
  std::condition_variable closed_cv;
  std::vector<std::string> closed;  // guarded by mu
  std::string name;
  std::unique_ptr<FrameServer> fs;
  uint64_t fds_seen = 0;  // loop thread only

  explicit FdEcho(int64_t partial_ms = 10000) {
    std::random_device rd;
    name = "hixl-fs-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
    FrameServerOptions o;
    o.name = "test shm socket";
    o.kind = auth::Kind::kShm;
    o.fixed_frame = sizeof(Msg);
    o.pass_fds = true;
    o.same_user = true;
    o.partial_frame_ms = partial_ms;
    auto s = FrameServer::Create(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status().message();
    fs = std::move(s.value());
    auto lfd = transport::shm::ListenAt(name);
    EXPECT_TRUE(lfd.ok()) << lfd.status().message();
    FrameServer::Handlers h;
    h.on_frame_fd = [this](FrameServer::ConnId id, std::string_view f, Fd fd) {
      EXPECT_EQ(f.size(), sizeof(Msg));
      Msg m, reply;
      std::memcpy(&m, f.data(), sizeof(m));
      if (fd.valid()) ++fds_seen;
      reply.type = m.type;
      reply.a = fd.valid() ? SizeOf(fd.get()) : 0;
      reply.b = fds_seen;
      Fd back = m.a ? MemFd(m.a) : Fd();
      fs->Send(id, std::string_view(reinterpret_cast<const char*>(&reply), sizeof(reply)), back.get());
    };
    h.on_close = [this](FrameServer::ConnId, const std::string& why) {
      {
        std::lock_guard lock(mu);
        closed.push_back(why);
      }
      closed_cv.notify_all();
    };
    auto added = fs->AddListener(std::move(lfd.value()), std::move(h));
    EXPECT_TRUE(added.ok()) << added.status().message();
    EXPECT_EQ(added->port, 0);
  }
  // Whether a connection was closed for a reason containing part, waiting
  // (bounded) for it: the server closes the socket before on_close runs,
  // so a client that saw the close may ask before the reason is in.
  bool Closed(const std::string& part, int64_t ms = 10000) {
    std::unique_lock lock(mu);
    return closed_cv.wait_for(lock, milliseconds(ms), [&] {
      return std::any_of(closed.begin(), closed.end(),
                         [&](const std::string& w) { return w.find(part) != std::string::npos; });
    });
  }
  Fd Dial() const {
    auto fd = transport::shm::ConnectTo(name);
    EXPECT_TRUE(fd.ok()) << fd.status().message();
    Status s = auth::ClientHandshake(fd->get(), std::nullopt, auth::Kind::kShm, DeadlineIn(5000), "test server");
    EXPECT_TRUE(s.ok()) << s.message();
    return std::move(fd.value());
  }
};

// One request, its reply and the descriptor passed back (if any).
Msg Ask(int sock, uint64_t want_back, int pass, Fd* back) {
  Msg m, reply;
  m.type = 7;
  m.a = want_back;
  EXPECT_TRUE(transport::shm::SendMsg(sock, m, pass, DeadlineIn(5000)).ok());
  Status s = transport::shm::RecvMsg(sock, &reply, back, DeadlineIn(5000));
  EXPECT_TRUE(s.ok()) << s.message();
  return reply;
}

bool ClosedByServer(int fd, int64_t ms = 10000) {
  const Deadline end = DeadlineIn(ms);
  char buf[256];
  while (Clock::now() < end) {
    ssize_t k = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
    if (k < 0) std::this_thread::sleep_for(milliseconds(2));
  }
  return false;
}

TEST(FrameServerFds, FixedFramesCarryDescriptorsBothWays) {
  FdEcho e;
  Fd c = e.Dial();
  Fd back;
  Msg r = Ask(c.get(), 0, -1, &back);  // no descriptor either way
  EXPECT_EQ(r.type, 7u);
  EXPECT_EQ(r.a, 0u);
  EXPECT_FALSE(back.valid());
  Fd mine = MemFd(12345);
  r = Ask(c.get(), 8192, mine.get(), &back);
  EXPECT_EQ(r.a, 12345u);  // the server saw the memfd passed with the frame
  EXPECT_EQ(r.b, 1u);
  ASSERT_TRUE(back.valid());
  EXPECT_EQ(SizeOf(back.get()), 8192u);  // and passed one back with the reply
  // Several requests in one write, the descriptor with the second: each
  // frame gets what came with it.
  Msg two[2];
  two[0].type = two[1].type = 7;
  ASSERT_EQ(::send(c.get(), &two[0], sizeof(Msg), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(Msg)));
  ASSERT_TRUE(transport::shm::SendMsg(c.get(), two[1], mine.get(), DeadlineIn(5000)).ok());
  Msg r1, r2;
  ASSERT_TRUE(transport::shm::RecvMsg(c.get(), &r1, nullptr, DeadlineIn(5000)).ok());
  ASSERT_TRUE(transport::shm::RecvMsg(c.get(), &r2, nullptr, DeadlineIn(5000)).ok());
  EXPECT_EQ(r1.a, 0u);
  EXPECT_EQ(r2.a, 12345u);
}

TEST(FrameServerFds, TwoDescriptorsWithOneFrameDropTheConnection) {
  FdEcho e;
  Fd c = e.Dial();
  Fd a = MemFd(10), b = MemFd(20);
  Msg m;
  iovec iov{&m, sizeof(m)};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char ctrl[CMSG_SPACE(2 * sizeof(int))] = {};
  h.msg_control = ctrl;
  h.msg_controllen = sizeof(ctrl);
  cmsghdr* cm = CMSG_FIRSTHDR(&h);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(2 * sizeof(int));
  const int two[2] = {a.get(), b.get()};
  std::memcpy(CMSG_DATA(cm), two, sizeof(two));
  ASSERT_EQ(::sendmsg(c.get(), &h, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(m)));
  EXPECT_TRUE(ClosedByServer(c.get()));
  EXPECT_TRUE(e.Closed("more than one file descriptor with a frame"));
  Fd ok = e.Dial();  // the server goes on
  Fd back;
  EXPECT_EQ(Ask(ok.get(), 0, -1, &back).type, 7u);
}

TEST(FrameServerFds, ClientsStalledHalfWayThroughAFrameDelayNoOne) {
  FdEcho e(/*partial_ms=*/400);
  std::vector<Fd> stalled;
  Fd mine = MemFd(64);
  for (int i = 0; i < 8; ++i) {
    stalled.push_back(e.Dial());
    Msg m;
    // Half a message; every other one with a descriptor.
    if (i % 2 == 0) {
      ASSERT_EQ(::send(stalled.back().get(), &m, sizeof(m) / 2, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(m) / 2));
    } else {
      ASSERT_EQ(net::SendWithFd(stalled.back().get(), reinterpret_cast<const char*>(&m), sizeof(m) / 2, mine.get()),
                static_cast<ssize_t>(sizeof(m) / 2));
    }
  }
  Fd ok = e.Dial();
  const auto t0 = Clock::now();
  Fd back;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(Ask(ok.get(), 0, -1, &back).type, 7u);
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
  EXPECT_LT(took, 2000) << "50 round trips took " << took << " ms beside 8 stalled clients";
  // The stalled ones are closed after their partial-frame timeout; the
  // good one stays.
  for (auto& s : stalled) EXPECT_TRUE(ClosedByServer(s.get()));
  EXPECT_TRUE(e.Closed("sent part of a frame and nothing more for 400 ms"));
  EXPECT_EQ(Ask(ok.get(), 0, -1, &back).type, 7u);
}

// A peer that dies with our request unread resets the connection: the
// receive fails as the peer's failure (the engine then reports the peer
// dead), not as a transport error (CI's soak: "shm socket receive failed:
// Connection reset by peer" for a killed engine).
TEST(ShmFdChannel, AResetByAPeerThatDiedIsThePeersFailure) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  Fd mine(sv[0]), theirs(sv[1]);
  Msg m;
  ASSERT_TRUE(transport::shm::SendMsg(mine.get(), m, -1, DeadlineIn(5000)).ok());
  theirs.Reset();  // it dies with our request unread
  Msg reply;
  Status s = transport::shm::RecvMsg(mine.get(), &reply, nullptr, DeadlineIn(5000));
  EXPECT_EQ(s.code(), Errc::kPeerFailed) << s.message();
}

}  // namespace
}  // namespace hixl::net

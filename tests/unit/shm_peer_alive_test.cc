// Peer::CheckAlive over many peers (transport/shm/peer.h): one system call
// for a flush after copies into the mapped memory of many peers, and the
// same answer as asking each peer alone.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <memory>
#include <vector>

#include "transport/shm/peer.h"

namespace hixl::transport::shm {
namespace {

// A child that waits for a signal, as a peer's process.
struct Child {
  pid_t pid = -1;
  explicit Child() {
    pid = ::fork();
    if (pid == 0) {
      ::pause();
      ::_exit(0);
    }
  }
  void Kill() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  ~Child() { Kill(); }
};

std::shared_ptr<Peer> PeerOf(int rank, pid_t pid) {
  auto p = std::make_shared<Peer>();
  p->rank = rank;
  p->pid = pid;
  p->pidfd = net::Fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  return p;
}

TEST(ShmPeerAlive, ManyPeersAreAskedTogetherAndTheFirstExitedIsNamed) {
  std::vector<std::unique_ptr<Child>> kids;
  std::vector<std::shared_ptr<Peer>> peers;
  for (int r = 0; r < 5; ++r) {
    kids.push_back(std::make_unique<Child>());
    ASSERT_GT(kids.back()->pid, 0);
    peers.push_back(PeerOf(r + 1, kids.back()->pid));
    if (!peers.back()->pidfd.valid()) GTEST_SKIP() << "pidfd_open is refused here";
  }
  EXPECT_TRUE(Peer::CheckAlive(peers).ok());
  const pid_t third = kids[3]->pid, second = kids[1]->pid;
  kids[3]->Kill();
  kids[1]->Kill();
  // Found alive just now: asked again only after the window (a death is
  // seen as if it had come that much later).
  for (auto& p : peers) p->alive_at_ns.store(Peer::NowNs() - Peer::kAliveWindowNs - 1);
  Status s = Peer::CheckAlive(peers);
  EXPECT_EQ(s.code(), Errc::kPeerFailed);
  EXPECT_NE(s.message().find("rank 2 (pid " + std::to_string(second) + ") has exited"), std::string::npos)
      << s.message();
  // The same answer as each peer asked alone.
  EXPECT_EQ(peers[3]->CheckAlive().code(), Errc::kPeerFailed) << third;
  EXPECT_TRUE(peers[0]->CheckAlive().ok());
  // Without the dead, alive again.
  std::vector<std::shared_ptr<Peer>> living = {peers[0], peers[2], peers[4]};
  for (auto& p : living) p->alive_at_ns.store(Peer::NowNs() - Peer::kAliveWindowNs - 1);
  EXPECT_TRUE(Peer::CheckAlive(living).ok());
  EXPECT_TRUE(Peer::CheckAlive({}).ok());
}

TEST(ShmPeerAlive, APeerWithoutAPidfdIsTakenForAlive) {
  Child kid;
  auto known = PeerOf(1, kid.pid);
  auto unknown = std::make_shared<Peer>();  // pidfd_open refused at Connect
  unknown->rank = 2;
  EXPECT_TRUE(Peer::CheckAlive({known, unknown}).ok());
}

}  // namespace
}  // namespace hixl::transport::shm

// The UCX transport's progress thread beside callers that progress the
// worker themselves (worker.h).  While a caller waits for its own request
// (here a loop of remote atomics), the thread stands aside, so that it
// neither is woken by each reply, which the caller takes itself, nor waits
// for the worker's mutex (bench/ucx_vs_perftest measures that, across
// network namespaces).  Once the caller is done, the thread must serve the
// network again, so that a peer's requests are answered while this process
// calls nothing.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "transport_fixture.h"
#ifdef HIXL_TEST_HAVE_UCX
#include "transport/ucx/ucx_transport.h"
#endif

namespace hixl::transport::test {
namespace {

#ifdef HIXL_TEST_HAVE_UCX
constexpr int kCalls = 400;

// How often this process's UCX progress thread ("hixl-ucx") has gone to
// sleep (its voluntary context switches: each time it was woken and slept
// again counts, also within one poll); -1 if there is not exactly one.
int64_t ProgressThreadSleeps() {
  int64_t found = -1;
  int threads = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (!std::getline(comm, name) || name != "hixl-ucx") continue;
    ++threads;
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) found = std::stoll(line.substr(line.find(':') + 1));
    }
  }
  return threads == 1 ? found : -1;
}

// kCalls atomics from rank 0 on rank 1's word, each checked.
void AddInALoop(Transport& t, const RemoteKey& key, uint64_t addr, uint64_t first) {
  for (int i = 0; i < kCalls; ++i) {
    uint64_t old = 0;
    Status s = t.Atomic(1, key, AtomicOp::kAdd, addr, 1, 0, &old);
    ASSERT_TRUE(s.ok()) << "call " << i << ": " << s.message();
    ASSERT_EQ(old, first + static_cast<uint64_t>(i)) << "call " << i;
  }
}

// kCalls puts of 8 bytes from rank 0 into rank 1's word, each followed by
// a flush (a world's put + hixl_fence).
void PutAndFlushInALoop(Transport& t, const RemoteKey& key, uint64_t addr) {
  for (int i = 0; i < kCalls; ++i) {
    const uint64_t v = static_cast<uint64_t>(i);
    Status s = t.Put(1, key, &v, addr, sizeof v);
    ASSERT_TRUE(s.ok()) << "call " << i << ": " << s.message();
    s = t.Flush();
    ASSERT_TRUE(s.ok()) << "flush " << i << ": " << s.message();
  }
}

// Across processes, as between hosts (within one process the difference
// seldom shows): rank 0 makes kCalls calls of `loop` on a peer process's
// word, and its progress thread must sleep through them.
template <typename Loop>
void ExpectTheThreadSleepsThrough(const char* calls, Loop loop) {
  UcxPeerProcess peer;
  // The peer's thread stays awake between requests (100 ms after each), so
  // that its replies come in time and the caller seldom sleeps.
  ASSERT_TRUE(peer.Start({{"ucx_spin_us", "100000"}}));
  TestHost h0(0);
  Options options;
  options.only = "ucx";
  auto t0 = CreateTransports(&h0, options);
  ASSERT_TRUE(t0.ok()) << t0.status().message();
  Transport& t = *t0.value()[0];
  ASSERT_TRUE(t.Connect(1, peer.address, {}).ok());
  auto k = t.UnpackKey(1, peer.addr, UcxPeerProcess::kPeerBytes, peer.blob);
  ASSERT_TRUE(k.ok()) << k.status().message();
  uint64_t old = 0;
  ASSERT_TRUE(t.Atomic(1, *k.value(), AtomicOp::kAdd, peer.addr, 1, 0, &old).ok());  // the endpoint is wired up
  const int64_t slept_before = ProgressThreadSleeps();
  const ucx::ProgressCounts before = ucx::CountProgress(t);
  const auto start = std::chrono::steady_clock::now();
  loop(t, *k.value(), peer.addr);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  const ucx::ProgressCounts after = ucx::CountProgress(t);
  const int64_t slept = ProgressThreadSleeps() - slept_before;
  ASSERT_GE(slept_before, 0) << "not one thread named hixl-ucx in /proc/self/task";
  const int64_t asides = after.aside_sleeps - before.aside_sleeps;
  const int64_t sleeps = after.caller_sleeps - before.caller_sleeps;
  // Standing aside while the caller spins, the thread sleeps once per
  // stand-aside, more where the caller slept (a reply slow to come, as on a
  // loaded machine: the thread then serves the network again), and a few
  // times around the loop's start and end.  Asleep on the worker's event
  // fd instead, it is woken by every reply (and sleeps again, the reply
  // taken), or by every drop of the worker's mutex that it waits for.
  EXPECT_LE(slept - asides, 3 * sleeps + kCalls / 10)
      << "the caller's progress thread slept " << slept << " times (" << asides << " standing aside) in " << kCalls
      << " " << calls << "; the caller slept " << sleeps << " times";
  // Standing aside, it naps 1 ms at a time, and is woken early only by a
  // caller about to sleep (and, before, by a kick after every flush).
  EXPECT_LE(asides, 2 * ms.count() + 2 * sleeps + 10)
      << "the caller's progress thread was woken " << asides << " times standing aside in " << kCalls << " " << calls
      << " that took " << ms.count() << " ms; the caller slept " << sleeps << " times";
  k = Status(Errc::kInternal, "released");  // the key goes before its transport
  t.Shutdown();
}

TEST(UcxProgressThread, SleepsThroughItsCallersReplies) {
  ExpectTheThreadSleepsThrough("atomics",
                               [](Transport& t, const RemoteKey& key, uint64_t addr) { AddInALoop(t, key, addr, 1); });
}

TEST(UcxProgressThread, SleepsThroughItsCallersFlushes) {
  ExpectTheThreadSleepsThrough("puts and flushes", PutAndFlushInALoop);
}

TEST_P(TransportTest, UcxProgressThreadServesPeersAfterItsCallerIsDone) {
  if (GetParam().transport != "ucx") GTEST_SKIP() << "the UCX progress thread";
  ConnectBoth();
  Memory theirs(Backing::kPrivate, 4096, 32), mine(Backing::kPrivate, 1 << 20, 33);
  auto key = Expose(1, theirs, 0);
  auto back = Expose(0, mine, 1);
  ASSERT_TRUE(key && back);
  AddInALoop(*t_[0], *key, theirs.addr(), 0);
  // Rank 0 now calls nothing: its progress thread alone serves rank 1's
  // atomic and put (over TCP, UCX emulates the put with messages that the
  // target must progress).
  uint64_t old = 0;
  Status s = t_[1]->Atomic(0, *back, AtomicOp::kAdd, mine.addr(), 5, 0, &old);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(old, 0u);
  std::vector<uint8_t> src(mine.len() - 8);
  Fill(src.data(), src.size(), 34);
  ASSERT_TRUE(t_[1]->Put(0, *back, src.data(), mine.addr() + 8, src.size()).ok());
  s = t_[1]->Flush();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(FirstDifference(mine.data() + 8, src.data(), src.size()), src.size());
  key.reset();
  back.reset();
  Unexpose(1, theirs);
  Unexpose(0, mine);
}
#endif

}  // namespace
}  // namespace hixl::transport::test

// Conformance of every transport built into the library, driven through the
// Transport interface directly (no core, no store): data movement.  One test
// class (transport_fixture.h), instantiated over every transport
// configuration, and a case is skipped only where the transport's
// capabilities say it cannot do the thing: capabilities, addresses, put and
// get of every size, both directions, batches, flush, atomics (and the
// sleepers they wake), loopback and put_signal.  Connect/disconnect and
// shutdown are in transport_lifecycle_test.cc, forged messages in
// transport_forged_test.cc.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "support/in_futex.h"
#include "transport_fixture.h"

namespace hixl::transport::test {
namespace {

// What a transport says it can do, it does; what it says it cannot, it refuses.
TEST_P(TransportTest, CapabilitiesTellTheTruth) {
  ConnectBoth();
  const Capabilities& c = caps();
  EXPECT_EQ(&c, &t_[1]->caps());
  EXPECT_TRUE(c.host_memory) << "every transport moves host memory";
  Memory m(Backing::kPrivate, 1 << 16, 1);
  LocalRegion device = m.region();
  device.kind = MemKind::kDevice;
  auto r = t_[1]->RegisterRegion(device);
  if (!c.device_memory) {
    ASSERT_FALSE(r.ok()) << "a transport without device memory registered a device region";
    EXPECT_EQ(r.status().code(), Errc::kUnsupported);
  }
  // Atomic: implemented exactly when the caps say so.
  auto key = Expose(1, m, 0);
  ASSERT_TRUE(key);
  uint64_t old = 0;
  Status s = t_[0]->Atomic(1, *key, AtomicOp::kFetch, m.addr(), 0, 0, &old);
  if (c.atomics) {
    EXPECT_TRUE(s.ok()) << s.message();
  } else {
    EXPECT_EQ(s.code(), Errc::kUnsupported);
  }
  key.reset();
  Unexpose(1, m);
}

TEST_P(TransportTest, AddressesAreCheckedAndReachable) {
  const std::string a0 = t_[0]->LocalAddress(), a1 = t_[1]->LocalAddress();
  EXPECT_FALSE(a0.empty());
  EXPECT_NE(a0, a1);
  EXPECT_TRUE(t_[0]->CanReach(a1));
  EXPECT_TRUE(t_[1]->CanReach(a0));
  EXPECT_FALSE(t_[0]->CanReach(""));
  EXPECT_FALSE(t_[0]->CanReach("not an address"));
  EXPECT_FALSE(t_[0]->Connect(1, "not an address", {}).ok());
  // Nothing connected: no key can be unpacked, and nothing is in flight.
  EXPECT_FALSE(t_[0]->UnpackKey(1, 4096, 64, "").ok());
  EXPECT_TRUE(t_[0]->Flush().ok());
  EXPECT_TRUE(t_[0]->Flush(1).ok());
  t_[0]->Disconnect(1);  // a no-op
}

TEST_P(TransportTest, PutGetSizesPrivateMemory) {
  ConnectBoth();
  Memory m(Backing::kPrivate, kRegionBytes, 1);
  auto key = Expose(1, m, 0);
  ASSERT_TRUE(key);
  const size_t sizes[] = {1, 7, 8, 4096, 65536 + 3, size_t{1} << 20, (size_t{1} << 20) + 1, (size_t{9} << 20) + 5};
  uint32_t seed = 1;
  for (size_t n : sizes) {
    PutGetRoundTrip(*key, m, kGuard + (seed % 8), n, seed);
    if (HasFatalFailure()) return;
    ++seed;
  }
  key.reset();
  Unexpose(1, m);
}

TEST_P(TransportTest, PutGetSizesSharedSegment) {
  ConnectBoth();
  Memory m(Backing::kSegment, kRegionBytes, 2);
  auto key = Expose(1, m, 0);
  ASSERT_TRUE(key);
  const size_t sizes[] = {1, 7, 8, 4096, 65536 + 3, size_t{1} << 20, (size_t{9} << 20) + 5};
  uint32_t seed = 100;
  for (size_t n : sizes) {
    PutGetRoundTrip(*key, m, kGuard + (seed % 8), n, seed);
    if (HasFatalFailure()) return;
    ++seed;
  }
  key.reset();
  Unexpose(1, m);
}

// Both directions at once: each side writes into the other's memory.
TEST_P(TransportTest, BothDirections) {
  ConnectBoth();
  Memory m0(Backing::kPrivate, 1 << 20, 3), m1(Backing::kPrivate, 1 << 20, 4);
  auto k0 = Expose(0, m0, 1);  // rank 1's key for rank 0's memory
  auto k1 = Expose(1, m1, 0);
  ASSERT_TRUE(k0 && k1);
  std::vector<uint8_t> a(100000), b(100000);
  Fill(a.data(), a.size(), 7);
  Fill(b.data(), b.size(), 8);
  ASSERT_TRUE(t_[0]->Put(1, *k1, a.data(), m1.addr() + 8, a.size()).ok());
  ASSERT_TRUE(t_[1]->Put(0, *k0, b.data(), m0.addr() + 16, b.size()).ok());
  ASSERT_TRUE(t_[0]->Flush().ok());
  ASSERT_TRUE(t_[1]->Flush().ok());
  EXPECT_EQ(std::memcmp(m1.data() + 8, a.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(m0.data() + 16, b.data(), b.size()), 0);
  k0.reset();
  k1.reset();
  Unexpose(0, m0);
  Unexpose(1, m1);
}

TEST_P(TransportTest, BatchWritesAndReadsEveryPiece) {
  ConnectBoth();
  Memory priv(Backing::kPrivate, 4 << 20, 5), seg(Backing::kSegment, 4 << 20, 6);
  auto kp = Expose(1, priv, 0);
  auto ks = Expose(1, seg, 0);
  ASSERT_TRUE(kp && ks);
  std::memset(priv.data(), 0, priv.len());
  std::memset(seg.data(), 0, seg.len());
  // 150 pieces (more than one system call's worth where a transport
  // gathers them), alternating between the two regions, of varied sizes.
  constexpr size_t kPieces = 150;
  std::vector<std::vector<uint8_t>> local(kPieces), back(kPieces);
  std::vector<Transport::Piece> out, in;
  uint64_t offset = 64;
  for (size_t i = 0; i < kPieces; ++i) {
    const size_t n = 1 + (i * 977) % 20000;
    local[i].resize(n);
    back[i].assign(n, 0);
    Fill(local[i].data(), n, static_cast<uint32_t>(i + 1));
    const Memory& m = i % 2 ? seg : priv;
    const RemoteKey* k = i % 2 ? ks.get() : kp.get();
    out.push_back({k, m.addr() + offset, local[i].data(), n});
    in.push_back({k, m.addr() + offset, back[i].data(), n});
    offset += n + 8;
  }
  ASSERT_LE(offset, priv.len());
  Status s = t_[0]->Batch(1, /*write=*/true, out.data(), out.size());
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(t_[0]->Flush(1).ok());
  for (size_t i = 0; i < kPieces; ++i) {
    ASSERT_EQ(std::memcmp(reinterpret_cast<void*>(out[i].remote), local[i].data(), local[i].size()), 0)
        << "piece " << i;
  }
  s = t_[0]->Batch(1, /*write=*/false, in.data(), in.size());
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(t_[0]->Flush(1).ok());
  for (size_t i = 0; i < kPieces; ++i) ASSERT_EQ(back[i], local[i]) << "piece " << i;
  kp.reset();
  ks.reset();
  Unexpose(1, priv);
  Unexpose(1, seg);
}

// Flush(peer) completes what went to that peer; a peer never connected has
// nothing in flight.
TEST_P(TransportTest, FlushOnePeer) {
  ConnectBoth();
  Memory m(Backing::kPrivate, 4 << 20, 7);
  auto key = Expose(1, m, 0);
  ASSERT_TRUE(key);
  std::vector<uint8_t> src(3 << 20);
  for (uint32_t round = 0; round < 3; ++round) {
    Fill(src.data(), src.size(), 40 + round);
    ASSERT_TRUE(t_[0]->Put(1, *key, src.data(), m.addr() + round, src.size()).ok());
    Status s = t_[0]->Flush(1);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(FirstDifference(m.data() + round, src.data(), src.size()), src.size()) << "round " << round;
  }
  EXPECT_TRUE(t_[0]->Flush(7).ok());
  EXPECT_TRUE(t_[0]->Flush(-1).ok());
  key.reset();
  Unexpose(1, m);
}

TEST_P(TransportTest, Atomics) {
  if (!caps().atomics) GTEST_SKIP() << GetParam().transport << " has no remote atomics";
  ConnectBoth();
  for (Backing backing : {Backing::kPrivate, Backing::kSegment}) {
    SCOPED_TRACE(backing == Backing::kPrivate ? "private" : "segment");
    Memory m(backing, 8 << 20, 8);
    auto key = Expose(1, m, 0);
    ASSERT_TRUE(key);
    // Atomic accesses here too: the peer's handler thread (this process,
    // over UCX) changes the word, after a message ThreadSanitizer cannot see.
    std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(m.data() + 64));
    const uint64_t at = m.addr() + 64;
    word.store(5);
    uint64_t old = 0;
    ASSERT_TRUE(t_[0]->Atomic(1, *key, AtomicOp::kFetch, at, 0, 0, &old).ok());
    EXPECT_EQ(old, 5u);
    ASSERT_TRUE(t_[0]->Atomic(1, *key, AtomicOp::kAdd, at, 10, 0, &old).ok());
    EXPECT_EQ(old, 5u);
    EXPECT_EQ(word.load(), 15u);
    ASSERT_TRUE(t_[0]->Atomic(1, *key, AtomicOp::kSet, at, 0xdeadbeefcafeULL, 0, &old).ok());
    EXPECT_EQ(old, 15u);
    EXPECT_EQ(word.load(), 0xdeadbeefcafeULL);
    // Compare-and-swap that fails leaves the word; one that matches swaps.
    ASSERT_TRUE(t_[0]->Atomic(1, *key, AtomicOp::kCompareSwap, at, 1, 2, &old).ok());
    EXPECT_EQ(old, 0xdeadbeefcafeULL);
    EXPECT_EQ(word.load(), 0xdeadbeefcafeULL);
    ASSERT_TRUE(t_[0]->Atomic(1, *key, AtomicOp::kCompareSwap, at, 77, 0xdeadbeefcafeULL, &old).ok());
    EXPECT_EQ(old, 0xdeadbeefcafeULL);
    EXPECT_EQ(word.load(), 77u);
    // Ordered after a put issued before it to the same peer.
    std::vector<uint8_t> src(2 << 10);
    Fill(src.data(), src.size(), 9);
    ASSERT_TRUE(t_[0]->Put(1, *key, src.data(), m.addr() + 4096, src.size()).ok());
    ASSERT_TRUE(t_[0]->Atomic(1, *key, AtomicOp::kAdd, at, 1, 0, &old).ok());
    EXPECT_EQ(std::memcmp(m.data() + 4096, src.data(), src.size()), 0) << "the put had not landed";
    EXPECT_EQ(word.load(), 78u);
    // And after a put of many messages' worth.
    std::vector<uint8_t> big(4 << 20);
    Fill(big.data(), big.size(), 10);
    ASSERT_TRUE(t_[0]->Put(1, *key, big.data(), m.addr() + (1 << 20), big.size()).ok());
    ASSERT_TRUE(t_[0]->Atomic(1, *key, AtomicOp::kFetch, at, 0, 0, &old).ok());
    EXPECT_EQ(FirstDifference(m.data() + (1 << 20), big.data(), big.size()), big.size()) << "the put had not landed";
    EXPECT_EQ(old, 78u);
    ASSERT_TRUE(t_[0]->Flush().ok());
    key.reset();
    Unexpose(1, m);
  }
}

using hixl::testing_support::InFutex;

// A transport that says so wakes a thread of the target asleep in the
// kernel on the word an atomic changes (as hixl_wait_until sleeps): the
// futex returns woken, never at its (generous) time limit.
TEST_P(TransportTest, AnAtomicWakesASleeperOnItsWord) {
  if (!caps().atomics || !caps().wakes_waiters) GTEST_SKIP() << GetParam().transport << " does not wake waiters";
  ConnectBoth();
  Memory m(Backing::kPrivate, 1 << 16, 16);
  auto key = Expose(1, m, 0);
  ASSERT_TRUE(key);
  auto* word = reinterpret_cast<uint64_t*>(m.data() + 512);
  const uint64_t at = m.addr() + 512;
  constexpr uint64_t kRounds = 3;  // kSet, kAdd, kCompareSwap
  std::atomic<pid_t> tid{0};
  std::atomic<uint64_t> sleeping{0};
  std::atomic<int> timed_out{0};
  std::thread waiter([&] {
    tid = static_cast<pid_t>(::syscall(SYS_gettid));
    std::atomic_ref<uint64_t> w(*word);
    for (uint64_t r = 1; r <= kRounds; ++r) {
      for (uint64_t v = w.load(); v < r; v = w.load()) {
        sleeping = r;
        sleeping.notify_all();
        timespec limit{30, 0};  // a bound on a hang, not a timing
        if (::syscall(SYS_futex, word, FUTEX_WAIT, static_cast<uint32_t>(v), &limit, nullptr, 0) != 0 &&
            errno == ETIMEDOUT) {
          ++timed_out;
          sleeping = ~uint64_t{0};
          sleeping.notify_all();
          return;
        }
      }
    }
  });
  uint64_t old = 0;
  for (uint64_t r = 1; r <= kRounds && timed_out == 0; ++r) {
    sleeping.wait(r - 1);  // the waiter is at round r
    while (!InFutex(tid)) std::this_thread::yield();
    const AtomicOp op = r == 1 ? AtomicOp::kSet : r == 2 ? AtomicOp::kAdd : AtomicOp::kCompareSwap;
    Status s = t_[0]->Atomic(1, *key, op, at, r == 2 ? 1 : r, r - 1, &old);  // 1, then 1 + 1, then 2 -> 3
    ASSERT_TRUE(s.ok()) << s.message();
  }
  waiter.join();
  EXPECT_EQ(timed_out.load(), 0) << "a thread asleep on the word was not woken by the atomic";
  EXPECT_EQ(*word, kRounds);
  key.reset();
  Unexpose(1, m);
}

// A transport that reaches its own process: a region of rank 0 through
// rank 0's own transport.
TEST_P(TransportTest, Loopback) {
  if (!caps().loopback) GTEST_SKIP() << GetParam().transport << " cannot talk to its own process";
  const std::string self = t_[0]->LocalAddress();
  ASSERT_TRUE(t_[0]->CanReach(self));
  ASSERT_TRUE(t_[0]->Connect(0, self, {}).ok());
  Memory m(Backing::kPrivate, 1 << 20, 9);
  auto key = Expose(0, m, 0);
  ASSERT_TRUE(key);
  std::vector<uint8_t> src(300000), back(300000);
  Fill(src.data(), src.size(), 11);
  ASSERT_TRUE(t_[0]->Put(0, *key, src.data(), m.addr() + 3, src.size()).ok());
  ASSERT_TRUE(t_[0]->Flush(0).ok());
  EXPECT_EQ(std::memcmp(m.data() + 3, src.data(), src.size()), 0);
  ASSERT_TRUE(t_[0]->Get(0, *key, m.addr() + 3, back.data(), back.size()).ok());
  ASSERT_TRUE(t_[0]->Flush().ok());
  EXPECT_EQ(back, src);
  if (caps().atomics) {  // served by this process's own handlers, where the transport has them
    auto* word = reinterpret_cast<uint64_t*>(m.data() + 400000);
    *word = 41;
    uint64_t old = 0;
    Status s = t_[0]->Atomic(0, *key, AtomicOp::kAdd, m.addr() + 400000, 1, 0, &old);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(old, 41u);
    EXPECT_EQ(*word, 42u);
  }
  key.reset();
  t_[0]->Disconnect(0);
  Unexpose(0, m);
}

// put_signal: the data, then the word (SET or ADD), there once flushed;
// with no data, data that fits in one message and more.
TEST_P(TransportTest, PutSignalLandsTheDataAndTheWord) {
  if (!caps().atomics) GTEST_SKIP() << GetParam().transport << " has no remote atomics";
  ConnectBoth();
  Memory m(Backing::kPrivate, 1 << 20, 13);
  auto key = Expose(1, m, 0);
  ASSERT_TRUE(key);
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(m.data()));
  std::vector<uint8_t> src(512 << 10);
  uint64_t want = 0, round = 0;
  for (size_t n : {size_t{0}, size_t{8}, size_t{4096}, size_t{512} << 10}) {
    for (AtomicOp op : {AtomicOp::kSet, AtomicOp::kAdd}) {
      SCOPED_TRACE(std::to_string(n) + " bytes, " + (op == AtomicOp::kSet ? "set" : "add"));
      Fill(src.data(), n, ++round);
      const uint64_t value = op == AtomicOp::kSet ? 100 * round : 3;
      Status s =
          t_[0]->PutSignal(1, n ? key.get() : nullptr, src.data(), m.addr() + 4096, n, *key, m.addr(), op, value);
      ASSERT_TRUE(s.ok()) << s.message();
      want = op == AtomicOp::kSet ? value : want + value;
      s = t_[0]->Flush(1);
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(word.load(), want);
      EXPECT_EQ(FirstDifference(m.data() + 4096, src.data(), n), n);
    }
  }
}

}  // namespace
}  // namespace hixl::transport::test

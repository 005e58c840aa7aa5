// Unit tests of the dissemination barrier (src/world/barrier.h), with
// threads as ranks: each thread's flag block is plain memory, and a signal
// is SignalMapped (an atomic store into the peer's block, and a futex wake
// where the peer sleeps), as the world's signal to a mapped peer is.  The multi-process runs over
// the real transports are tests/mp/barrier_stress.cc.
#include "world/barrier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/transport.h"

namespace hixl::world {
namespace {

using Clock = std::chrono::steady_clock;

struct alignas(64) Block {
  uint64_t words[DisseminationBarrier::kBlockBytes / sizeof(uint64_t)] = {};
};

// n ranks as threads.
struct Ranks {
  explicit Ranks(int n, DisseminationBarrier::Options base = {}, bool wakes = true) : blocks(static_cast<size_t>(n)) {
    for (int r = 0; r < n; ++r) {
      DisseminationBarrier::Options o = base;
      o.rank = r;
      o.size = n;
      barriers.push_back(std::make_unique<DisseminationBarrier>(
          o, blocks[static_cast<size_t>(r)].words,
          [this, wakes](int to, size_t round, uint64_t epoch) -> Status {
            uint64_t* block = blocks[static_cast<size_t>(to)].words;
            if (wakes) {
              DisseminationBarrier::SignalMapped(block, round, epoch);
            } else {
              std::atomic_ref<uint64_t>(block[DisseminationBarrier::FlagOffset(round) / 8]).store(epoch);
            }
            ++signals;
            return Status::Ok();
          },
          [](const char*, std::chrono::milliseconds) { return Status::Ok(); }, [wakes](int) { return wakes; }));
    }
  }
  std::vector<Block> blocks;
  std::vector<std::unique_ptr<DisseminationBarrier>> barriers;
  std::atomic<uint64_t> signals{0};
};

TEST(DisseminationBarrierTest, RoundsAreCeilLog2) {
  EXPECT_EQ(DisseminationBarrier::Rounds(1), 0u);
  EXPECT_EQ(DisseminationBarrier::Rounds(2), 1u);
  EXPECT_EQ(DisseminationBarrier::Rounds(3), 2u);
  EXPECT_EQ(DisseminationBarrier::Rounds(4), 2u);
  EXPECT_EQ(DisseminationBarrier::Rounds(5), 3u);
  EXPECT_EQ(DisseminationBarrier::Rounds(8), 3u);
  EXPECT_EQ(DisseminationBarrier::Rounds(9), 4u);
  EXPECT_EQ(DisseminationBarrier::Rounds(256), 8u);
  EXPECT_LE(DisseminationBarrier::Rounds(1 << 30) * DisseminationBarrier::kLine, DisseminationBarrier::kBlockBytes);
}

// Every rank writes its slot, barriers, and checks every slot; two
// buffers alternate (as tests/mp/barrier_stress.cc does).
void OrdersMemory(int n, bool wakes, int64_t spin_us) {
  DisseminationBarrier::Options o;
  o.spin_ceiling_us = spin_us;
  o.timeout_ms = 60000;
  // As the world does: more ranks than CPUs spin with sched_yield.
  o.yield = static_cast<unsigned>(n) > std::thread::hardware_concurrency();
  Ranks ranks(n, o, wakes);
  constexpr uint64_t kIters = 300;
  std::vector<uint64_t> slots(2 * static_cast<size_t>(n), 0);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      for (uint64_t i = 1; i <= kIters; ++i) {
        const size_t buf = i % 2;
        std::atomic_ref<uint64_t>(slots[buf * static_cast<size_t>(n) + static_cast<size_t>(r)])
            .store(i * 1000 + static_cast<uint64_t>(r), std::memory_order_relaxed);
        if (!ranks.barriers[static_cast<size_t>(r)]->Run().ok()) {
          ++errors;
          return;
        }
        for (int s = 0; s < n; ++s) {
          const uint64_t v = std::atomic_ref<uint64_t>(slots[buf * static_cast<size_t>(n) + static_cast<size_t>(s)])
                                 .load(std::memory_order_relaxed);
          if (v != i * 1000 + static_cast<uint64_t>(s)) ++errors;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(ranks.signals.load(), kIters * static_cast<uint64_t>(n) * DisseminationBarrier::Rounds(n));
  for (auto& b : ranks.barriers) {
    EXPECT_GE(b->spin_us(), std::min<int64_t>(spin_us, DisseminationBarrier::kSpinFloorUs));
    EXPECT_LE(b->spin_us(), spin_us);
  }
}

TEST(DisseminationBarrierTest, OrdersMemoryAtEverySize) {
  for (int n : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE("ranks: " + std::to_string(n));
    OrdersMemory(n, true, 1000);
  }
}

TEST(DisseminationBarrierTest, SleepsAtOnceWithNoSpin) { OrdersMemory(4, true, 0); }

// Every wait sleeps at once, so every signal races with a waiter going to
// sleep: a wake that SignalMapped skipped wrongly would hang the barrier
// (until the timeout fails it).
TEST(DisseminationBarrierTest, NoWakeIsLostWhenWaitersSleepAtOnce) {
  for (int n : {2, 3}) {
    SCOPED_TRACE("ranks: " + std::to_string(n));
    OrdersMemory(n, true, 0);
  }
}

// The sleep word is set only while a waiter sleeps.
TEST(DisseminationBarrierTest, TheSleepWordIsClearAfterEveryBarrier) {
  DisseminationBarrier::Options o;
  o.spin_ceiling_us = 0;
  Ranks ranks(2, o, true);
  std::thread other([&] { ASSERT_TRUE(ranks.barriers[1]->Run().ok()); });
  ASSERT_TRUE(ranks.barriers[0]->Run().ok());
  other.join();
  for (auto& b : ranks.blocks) EXPECT_EQ(b.words[DisseminationBarrier::SleepOffset(0) / 8], 0u);
}

TEST(DisseminationBarrierTest, PeersThatDoNotWakeArePolled) { OrdersMemory(3, false, 0); }

// waited_long runs after a wait that slept (where the world moves the
// thread back to its own CPU), not after one whose signal was there.
TEST(DisseminationBarrierTest, AWaitThatSleptCallsWaitedLong) {
  DisseminationBarrier::Options o;
  o.spin_ceiling_us = 0;
  std::atomic<int> calls[2] = {0, 0};
  Ranks ranks(2, o, true);
  for (int r = 0; r < 2; ++r) {
    DisseminationBarrier::Options mine = o;
    mine.rank = r;
    mine.size = 2;
    mine.waited_long = [&calls, r] { ++calls[r]; };
    uint64_t* block = ranks.blocks[static_cast<size_t>(r)].words;
    ranks.barriers[static_cast<size_t>(r)] = std::make_unique<DisseminationBarrier>(
        mine, block,
        [&ranks](int to, size_t round, uint64_t epoch) -> Status {
          DisseminationBarrier::SignalMapped(ranks.blocks[static_cast<size_t>(to)].words, round, epoch);
          return Status::Ok();
        },
        [](const char*, std::chrono::milliseconds) { return Status::Ok(); }, [](int) { return true; });
  }
  std::thread first([&] { EXPECT_TRUE(ranks.barriers[0]->Run().ok()); });
  // Rank 1 arrives once rank 0 sleeps: its own signal is there already.
  std::atomic_ref<uint64_t> asleep(ranks.blocks[0].words[DisseminationBarrier::SleepOffset(0) / 8]);
  while (asleep.load() == 0) std::this_thread::yield();
  EXPECT_TRUE(ranks.barriers[1]->Run().ok());
  first.join();
  EXPECT_EQ(calls[0].load(), 1);
  EXPECT_EQ(calls[1].load(), 0);
}

TEST(DisseminationBarrierTest, ADeadPeerEndsTheWaitNamingIt) {
  Block block;
  DisseminationBarrier::Options o;
  o.rank = 0;
  o.size = 2;
  o.spin_ceiling_us = 0;
  o.timeout_ms = 60000;
  o.probe_every = std::chrono::milliseconds(5);
  std::atomic<int> probes{0};
  DisseminationBarrier b(
      o, block.words, [](int, size_t, uint64_t) { return Status::Ok(); },
      [&](const char*, std::chrono::milliseconds) {
        return ++probes < 3 ? Status::Ok() : Err(Errc::kPeerFailed, "hixl_barrier: rank 1 left");
      },
      [](int) { return true; });
  const auto start = Clock::now();
  Status s = b.Run();
  EXPECT_EQ(s.code(), Errc::kPeerFailed);
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
  EXPECT_EQ(probes.load(), 3);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
}

TEST(DisseminationBarrierTest, ASilentPeerTimesOutNamingIt) {
  Block block;
  DisseminationBarrier::Options o;
  o.rank = 2;
  o.size = 3;
  o.spin_ceiling_us = 100;
  o.timeout_ms = 50;
  DisseminationBarrier b(
      o, block.words, [](int, size_t, uint64_t) { return Status::Ok(); },
      [](const char*, std::chrono::milliseconds) { return Status::Ok(); }, [](int) { return true; });
  Status s = b.Run();
  EXPECT_EQ(s.code(), Errc::kTimeout);
  // Round 1: rank 2 waits for rank 1.
  EXPECT_NE(s.message().find("signal of rank 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("HIXL_TIMEOUT_MS=50"), std::string::npos) << s.message();
}

TEST(DisseminationBarrierTest, AFailedSignalNamesThePeer) {
  Block block;
  DisseminationBarrier::Options o;
  o.rank = 0;
  o.size = 4;
  DisseminationBarrier b(
      o, block.words, [](int to, size_t, uint64_t) { return Err(Errc::kTransport, "broken pipe to {}", to); },
      [](const char*, std::chrono::milliseconds) { return Status::Ok(); }, [](int) { return true; });
  Status s = b.Run();
  EXPECT_EQ(s.code(), Errc::kTransport);
  EXPECT_NE(s.message().find("cannot signal rank 1"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().rfind("hixl_barrier", 0), 0u) << s.message();
}

TEST(DisseminationBarrierTest, AFailedSignalToADeadPeerSaysItIsDead) {
  Block block;
  DisseminationBarrier::Options o;
  o.rank = 0;
  o.size = 2;
  DisseminationBarrier b(
      o, block.words, [](int, size_t, uint64_t) { return Err(Errc::kTransport, "connection reset"); },
      [](const char*, std::chrono::milliseconds) {
        return Err(Errc::kPeerFailed, "hixl_barrier: rank 1 left without finalizing");
      },
      [](int) { return true; });
  Status s = b.Run();
  EXPECT_EQ(s.code(), Errc::kPeerFailed);
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
}

// The store in rank 0 may hear of a death after a survivor's transport
// does: rank 1 learns that rank 2 died, fails its barrier and leaves; rank
// 0's signal to rank 1 then fails first, with the store still to hear of
// either (its thread had no CPU; CI saw the error name rank 1 alone).  A
// failed signal that says the peer is gone waits a little for the store's
// news, which names the rank that died.
TEST(DisseminationBarrierTest, AFailedSignalToAGonePeerWaitsForTheStoresNews) {
  Block block;
  DisseminationBarrier::Options o;
  o.rank = 0;
  o.size = 3;
  const auto known_at = Clock::now() + std::chrono::milliseconds(30);
  std::vector<std::chrono::milliseconds> waits;
  // A model of the store: it hears of rank 2's death at known_at, and a
  // probe that may wait returns as soon as it has.
  auto store = [&](const char* api, std::chrono::milliseconds wait) -> Status {
    waits.push_back(wait);
    const auto asked = Clock::now();
    if (asked < known_at && asked + wait < known_at) {
      std::this_thread::sleep_until(asked + wait);
      return Status::Ok();
    }
    std::this_thread::sleep_until(known_at);
    return Err(Errc::kPeerFailed, "{}: rank 2 left without finalizing; rank 1 failed too", api);
  };
  DisseminationBarrier b(
      o, block.words,
      [](int to, size_t, uint64_t) { return Err(Errc::kPeerFailed, "ucx: an atomic to rank {} failed", to); }, store,
      [](int) { return true; });
  Status s = b.Run();
  EXPECT_EQ(s.code(), Errc::kPeerFailed);
  EXPECT_NE(s.message().find("rank 2 left"), std::string::npos) << s.message();
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_GE(waits[0], std::chrono::milliseconds(100));
}

// A failure that does not say the peer is gone asks the store once, and
// does not wait for news.
TEST(DisseminationBarrierTest, AFailedSignalToALivePeerDoesNotWait) {
  Block block;
  DisseminationBarrier::Options o;
  o.rank = 0;
  o.size = 2;
  std::vector<std::chrono::milliseconds> waits;
  DisseminationBarrier b(
      o, block.words, [](int, size_t, uint64_t) { return Err(Errc::kTransport, "message too long"); },
      [&](const char*, std::chrono::milliseconds wait) {
        waits.push_back(wait);
        return Status::Ok();
      },
      [](int) { return true; });
  Status s = b.Run();
  EXPECT_EQ(s.code(), Errc::kTransport);
  EXPECT_NE(s.message().find("cannot signal rank 1"), std::string::npos) << s.message();
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0], std::chrono::milliseconds(0));
}

}  // namespace
}  // namespace hixl::world

// PeerTable pins: an invalidation followed by AwaitReaders is a fence for
// the operations that held the table, and only for those.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/registry.h"

namespace hixl {
namespace {

std::vector<PeerTable::Entry> OneRegion() { return {{0x1000, 0x1000, nullptr, ""}}; }

TEST(PeerTablePinTest, NoPinsReturnsAtOnce) {
  PeerTable t;
  ASSERT_TRUE(t.Install(1, OneRegion()));
  t.Invalidate(2, 0x1000, 0x1000);
  EXPECT_TRUE(t.AwaitReaders(0));
  EXPECT_EQ(t.Find(0x1000, 1), nullptr);
}

TEST(PeerTablePinTest, AHeldPinMakesAwaitTimeOut) {
  PeerTable t;
  ASSERT_TRUE(t.Install(1, OneRegion()));
  PeerTable::Pin pin = t.Hold();
  ASSERT_NE(t.Find(0x1000, 1), nullptr);
  t.Invalidate(2, 0x1000, 0x1000);
  EXPECT_FALSE(t.AwaitReaders(20));
  pin.Release();
  EXPECT_TRUE(t.AwaitReaders(0));
}

TEST(PeerTablePinTest, AwaitReturnsOnlyOnceTheReaderLetGo) {
  PeerTable t;
  ASSERT_TRUE(t.Install(1, OneRegion()));
  std::atomic<bool> holding{false}, release{false}, released{false};
  std::thread reader([&] {
    PeerTable::Pin pin = t.Hold();
    EXPECT_NE(t.Find(0x1000, 1), nullptr);
    holding = true;
    while (!release) std::this_thread::yield();
    released = true;
    pin.Release();
  });
  while (!holding) std::this_thread::yield();
  t.Invalidate(2, 0x1000, 0x1000);
  release = true;
  EXPECT_TRUE(t.AwaitReaders(60000));
  EXPECT_TRUE(released.load());
  // A pin taken after the invalidation sees the new snapshot.
  PeerTable::Pin later = t.Hold();
  EXPECT_EQ(t.Find(0x1000, 1), nullptr);
  reader.join();
}

TEST(PeerTablePinTest, MovedPinsReleaseOnce) {
  PeerTable t;
  PeerTable::Pin a = t.Hold();
  PeerTable::Pin b = std::move(a);
  a.Release();  // moved from: nothing
  EXPECT_FALSE(t.AwaitReaders(10));
  b = PeerTable::Pin();
  EXPECT_TRUE(t.AwaitReaders(0));
}

TEST(PeerTablePinTest, CloseForgetsEverythingAndRefusesInstalls) {
  PeerTable t;
  ASSERT_TRUE(t.Install(1, OneRegion()));
  t.Close();
  EXPECT_EQ(t.Find(0x1000, 1), nullptr);
  EXPECT_TRUE(t.Install(5, OneRegion()));  // accepted, and ignored
  EXPECT_EQ(t.Find(0x1000, 1), nullptr);
}

TEST(PeerTablePinTest, APinOnAnotherTableHoldsNothingUpHere) {
  PeerTable t, other;
  ASSERT_TRUE(t.Install(1, OneRegion()));
  PeerTable::Pin pin = other.Hold();
  t.Invalidate(2, 0x1000, 0x1000);
  EXPECT_TRUE(t.AwaitReaders(0));
  EXPECT_FALSE(other.AwaitReaders(10));
}

// More pins at once than a thread has reader-mark slots: every one counts.
TEST(PeerTablePinTest, ManyPinsInOneThreadAllCount) {
  PeerTable t;
  std::vector<PeerTable::Pin> pins;
  for (int i = 0; i < marks::kSlots + 3; ++i) pins.push_back(t.Hold());
  for (auto& p : pins) {
    EXPECT_FALSE(t.AwaitReaders(5));
    p.Release();
  }
  EXPECT_TRUE(t.AwaitReaders(0));
}

// The fence under load: readers pin, find the current round's region and,
// while they hold the pin, check that the writer has not retired it; the
// writer invalidates each round's region, awaits the readers and only then
// retires it.  A reader that still used a retired region would see it.
TEST(PeerTablePinTest, NoReaderUsesARegionAfterAwaitReturned) {
  constexpr int kRounds = 3000;
  constexpr uint64_t kLen = 0x1000;
  PeerTable t;
  std::vector<std::atomic<bool>> retired(kRounds);
  std::atomic<bool> stop{false};
  std::atomic<int> round{0};
  std::atomic<uint64_t> seen{0}, violations{0};
  auto reader = [&] {
    while (!stop.load(std::memory_order_relaxed)) {
      const int r = round.load(std::memory_order_acquire);
      PeerTable::Pin pin = t.Hold();
      const PeerTable::Entry* e = t.Find(0x100000 + static_cast<uint64_t>(r) * kLen, 8);
      if (e) {
        const auto found = static_cast<int>((e->base - 0x100000) / kLen);
        seen.fetch_add(1, std::memory_order_relaxed);
        for (int i = 0; i < 4; ++i) {
          if (retired[static_cast<size_t>(found)].load(std::memory_order_acquire)) violations.fetch_add(1);
          std::this_thread::yield();
        }
      }
    }
  };
  std::thread r1(reader), r2(reader);
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t base = 0x100000 + static_cast<uint64_t>(r) * kLen;
    ASSERT_TRUE(t.Install(2 * static_cast<uint64_t>(r) + 1, {{base, kLen, nullptr, ""}}));
    round.store(r, std::memory_order_release);
    if (r % 8 == 0) std::this_thread::yield();  // let the readers find it
    t.Invalidate(2 * static_cast<uint64_t>(r) + 2, base, kLen);
    ASSERT_TRUE(t.AwaitReaders(60000));
    retired[static_cast<size_t>(r)].store(true, std::memory_order_release);
  }
  stop = true;
  r1.join();
  r2.join();
  EXPECT_EQ(violations.load(), 0u);
  EXPECT_GT(seen.load(), 0u) << "the readers never found a region: the test proved nothing";
}

}  // namespace
}  // namespace hixl

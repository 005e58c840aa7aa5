// PeerTable pins: an invalidation followed by AwaitReaders is a fence for
// the operations that held the table, and only for those.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/registry.h"

namespace hixl {
namespace {

std::vector<PeerTable::Entry> OneRegion() { return {{0x1000, 0x1000, nullptr}}; }

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

}  // namespace
}  // namespace hixl

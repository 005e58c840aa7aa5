// WriteGuard (transport/shm/write_guard.h): another thread's write to a
// guarded page waits until the guard is dropped, then lands; reads go on.
// Both ways of covering pages never touched: the kernel's (Linux 6.4 and
// later) and populating them first (earlier kernels).
#include "transport/shm/write_guard.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>

namespace hixl::transport::shm {
namespace {

const uint64_t kPage = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));

class WriteGuardTest : public testing::TestWithParam<bool> {};

TEST_P(WriteGuardTest, AWriteWaitsForTheGuardAndThenLands) {
  const size_t n = 4 * kPage;
  auto* p = static_cast<uint8_t*>(::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  // Page 0 written before, page 2 never touched.
  std::memset(p, 7, kPage);
  const auto lo = reinterpret_cast<uint64_t>(p);
  {
    auto guard = WriteGuard::Hold(lo, lo + n, GetParam());
    ASSERT_TRUE(guard.ok()) << guard.status().ToString();
    std::atomic<int> wrote{0};
    std::atomic<bool> about{false};
    std::thread writer([&] {
      about = true;
      __atomic_store_n(reinterpret_cast<uint64_t*>(p), 0x1111, __ATOMIC_RELAXED);
      wrote = 1;
      __atomic_store_n(reinterpret_cast<uint64_t*>(p + 2 * kPage), 0x2222, __ATOMIC_RELAXED);
      wrote = 2;
    });
    while (!about.load()) std::this_thread::yield();
    for (int i = 0; i < 1000; ++i) std::this_thread::yield();
    // Held: neither write has landed, and reads still work.  (Atomic loads:
    // ThreadSanitizer records the writer's store before the store blocks.)
    auto at = [&](size_t i) { return __atomic_load_n(p + i, __ATOMIC_RELAXED); };
    EXPECT_EQ(wrote.load(), 0);
    EXPECT_EQ(at(0), 7);
    EXPECT_EQ(at(8), 7);
    EXPECT_EQ(at(2 * kPage), 0);
    guard = Err(Errc::kInternal, "dropped");  // releases the writer
    writer.join();
    EXPECT_EQ(wrote.load(), 2);
  }
  uint64_t v0 = 0, v2 = 0;
  std::memcpy(&v0, p, 8);
  std::memcpy(&v2, p + 2 * kPage, 8);
  EXPECT_EQ(v0, 0x1111u);
  EXPECT_EQ(v2, 0x2222u);
  // The guard is gone: writes go straight through.
  p[3 * kPage] = 9;
  EXPECT_EQ(p[3 * kPage], 9);
  ::munmap(p, n);
}

TEST_P(WriteGuardTest, RefusesMemoryItCannotProtect) {
  // A range with nothing mapped in it.
  auto* p = static_cast<uint8_t*>(::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  ::munmap(p, kPage);
  const auto lo = reinterpret_cast<uint64_t>(p);
  auto guard = WriteGuard::Hold(lo, lo + kPage, GetParam());
  EXPECT_EQ(guard.status().code(), Errc::kUnsupported) << guard.status().ToString();
  EXPECT_EQ(WriteGuard::Hold(lo, lo, GetParam()).status().code(), Errc::kInvalidArg);
}

INSTANTIATE_TEST_SUITE_P(Pages, WriteGuardTest, testing::Bool(), [](const testing::TestParamInfo<bool>& info) {
  return info.param ? "KernelProtectsUntouched" : "PopulatedFirst";
});

}  // namespace
}  // namespace hixl::transport::shm

// Deregistration and free are fences for the memory they release (README,
// "Memory lifetime"): once DeregisterMemory / Free returns on the owner, no
// byte of any peer's put lands in that memory.
//
// Rank 0 puts 1 MiB into rank 1's region in a loop, fencing only every 4th
// put (so non-blocking transports keep some in flight), until a put fails
// with NOT_REGISTERED.  Rank 1 waits until the first put has landed, releases
// the region, at once fills it with a sentinel, and after the next barrier
// (rank 0 fenced before it) counts the bytes that are no longer the
// sentinel: a late landing.  Every round must have none.  Other ranks only
// take part in the barriers.  HIXL_TEST_RELEASE_ROUNDS sets the rounds
// (default 300).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "mp_util.h"

namespace hixl::test {
namespace {

constexpr size_t kBytes = size_t{1} << 20;
constexpr uint8_t kData = 0xAB;
constexpr uint8_t kSentinel = 0x5A;
constexpr int kOwner = 1;
constexpr int kWriter = 0;

int Rounds() {
  const char* v = std::getenv("HIXL_TEST_RELEASE_ROUNDS");
  return v ? std::max(1, std::atoi(v)) : 300;
}

// Spins, then yields, until the first byte of p is not 0; false after 60 s.
bool WaitFirstByte(const uint8_t* p) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int spin = 0; __atomic_load_n(p, __ATOMIC_ACQUIRE) == 0; ++spin) {
    if (spin < 1000) continue;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// The writer's half of one round: puts into [dst, +kBytes) of the owner
// until the owner has released it; then fences.
void WriterRound(const std::vector<uint8_t>& src, uint64_t dst, int round, int* puts) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    Status s = g_world->Put(kOwner, src.data(), dst, kBytes);
    if (s.code() == Errc::kNotRegistered) break;
    ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.ToString();
    // A fence now and then bounds what is in flight (UCX queues puts faster
    // than it moves them) and leaves a few puts in flight all the time.
    if (++*puts % 4 == 0) {
      Status f = g_world->Fence();
      if (f.code() == Errc::kNotRegistered) break;  // a relayed put refused: released
      ASSERT_TRUE(f.ok()) << "round " << round << ": " << f.ToString();
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "round " << round << ": the owner never released";
  }
  // Puts started before the release either completed before it or failed;
  // a failure found only now (a relayed slot refused) is NOT_REGISTERED too.
  Status f = g_world->Fence();
  ASSERT_TRUE(f.ok() || f.code() == Errc::kNotRegistered) << "round " << round << ": " << f.ToString();
}

// Counts the bytes of the released memory that are not the sentinel.
int64_t LateBytes(const uint8_t* p) {
  int64_t late = 0;
  for (size_t i = 0; i < kBytes; ++i) late += p[i] != kSentinel;
  return late;
}

TEST(ReleaseFence, DeregisterMemory) {
  ASSERT_GE(Size(), 2);
  std::vector<uint8_t> src(kBytes, kData);
  std::vector<uint8_t> region(kBytes, 0);
  auto bases = g_world->Allgather(reinterpret_cast<uint64_t>(region.data()));
  ASSERT_TRUE(bases.ok()) << bases.status().ToString();
  const uint64_t dst = bases.value()[kOwner];
  const int rounds = Rounds();
  int late_rounds = 0, puts = 0;
  int64_t late_bytes = 0;
  for (int round = 0; round < rounds; ++round) {
    if (Rank() == kOwner) {
      std::memset(region.data(), 0, kBytes);
      HIXL_ASSERT_OK(g_world->RegisterMemory(region.data(), kBytes));
    }
    HIXL_ASSERT_OK(g_world->Barrier());
    if (Rank() == kWriter) {
      WriterRound(src, dst, round, &puts);
      if (HasFatalFailure()) return;
    } else if (Rank() == kOwner) {
      ASSERT_TRUE(WaitFirstByte(region.data())) << "round " << round << ": no put landed within 60 s";
      HIXL_ASSERT_OK(g_world->DeregisterMemory(region.data()));
      std::memset(region.data(), kSentinel, kBytes);
    }
    HIXL_ASSERT_OK(g_world->Barrier());  // the writer has fenced
    if (Rank() == kOwner) {
      const int64_t late = LateBytes(region.data());
      late_bytes += late;
      late_rounds += late != 0;
    }
  }
  if (Rank() == kOwner) {
    std::printf("deregister: %d rounds, %d with data landing after DeregisterMemory returned (%lld bytes)\n", rounds,
                late_rounds, static_cast<long long>(late_bytes));
    EXPECT_EQ(late_rounds, 0);
  }
  if (Rank() == kWriter) std::printf("deregister: %d puts of 1 MiB\n", puts);
}

// The same with symmetric memory: rank 1 frees its block (rank 0 keeps its
// own), fills the freed block (the heap keeps it mapped) with the sentinel,
// and allocates it again for the next round.
TEST(ReleaseFence, Free) {
  ASSERT_GE(Size(), 2);
  std::vector<uint8_t> src(kBytes, kData);
  auto first = g_world->Alloc(kBytes);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto* block = static_cast<uint8_t*>(first.value());
  const auto dst = reinterpret_cast<uint64_t>(block);
  const int rounds = Rounds();
  int late_rounds = 0, puts = 0;
  int64_t late_bytes = 0;
  for (int round = 0; round < rounds; ++round) {
    if (Rank() == kOwner) {
      if (round > 0) {
        auto again = g_world->Alloc(kBytes);
        ASSERT_TRUE(again.ok()) << again.status().ToString();
        ASSERT_EQ(again.value(), static_cast<void*>(block)) << "the heap must hand out the freed block again";
      }
      std::memset(block, 0, kBytes);
    }
    HIXL_ASSERT_OK(g_world->Barrier());
    if (Rank() == kWriter) {
      WriterRound(src, dst, round, &puts);
      if (HasFatalFailure()) return;
    } else if (Rank() == kOwner) {
      ASSERT_TRUE(WaitFirstByte(block)) << "round " << round << ": no put landed within 60 s";
      HIXL_ASSERT_OK(g_world->Free(block));
      std::memset(block, kSentinel, kBytes);
    }
    HIXL_ASSERT_OK(g_world->Barrier());
    if (Rank() == kOwner) {
      const int64_t late = LateBytes(block);
      late_bytes += late;
      late_rounds += late != 0;
    }
  }
  if (Rank() != kOwner) HIXL_ASSERT_OK(g_world->Free(block));
  if (Rank() == kOwner) {
    std::printf("free: %d rounds, %d with data landing after Free returned (%lld bytes)\n", rounds, late_rounds,
                static_cast<long long>(late_bytes));
    EXPECT_EQ(late_rounds, 0);
  }
  if (Rank() == kWriter) std::printf("free: %d puts of 1 MiB\n", puts);
}

}  // namespace
}  // namespace hixl::test

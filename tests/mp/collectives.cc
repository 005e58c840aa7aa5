// The collectives over whichever transport the environment selects, run by
// every rank of a world (hixlrun -n N): barrier, allgather and broadcast, on
// the data plane (the scratch after the barrier's flags and the broadcast's
// ring, world_collectives.cc) and through rank 0's store (allgather of data
// too large for the scratch), with the errors of calls that do not match
// across ranks.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "mp_util.h"

namespace hixl::test {
namespace {

// The byte `i` of what `rank` contributes in round `round`.
uint8_t Byte(int round, int rank, size_t i) {
  return PatternByte(static_cast<uint64_t>(round) * 1000003u + static_cast<uint64_t>(rank), i);
}

// Barrier is collective: nobody leaves before everyone has arrived.
TEST(Collectives, BarrierWaitsForEveryone) {
  const int n = Size(), me = Rank();
  Remote counter(Kind::kSymmetric, sizeof(uint64_t) * static_cast<size_t>(n));
  std::memset(counter.local(), 0, counter.bytes());
  HIXL_ASSERT_OK(g_world->Barrier());
  for (int round = 1; round <= 20; ++round) {
    // Everyone writes `round` into its word on every rank, then barriers;
    // after it every word everywhere must say `round`.
    uint64_t v = static_cast<uint64_t>(round);
    for (int to = 0; to < n; ++to) {
      HIXL_ASSERT_OK(g_world->Put(to, &v, counter.base(to) + static_cast<uint64_t>(me) * 8, 8));
    }
    HIXL_ASSERT_OK(g_world->Barrier());
    for (int r = 0; r < n; ++r) {
      uint64_t got;
      std::memcpy(&got, counter.local() + r * 8, 8);
      ASSERT_EQ(got, v) << "rank " << r << " in round " << round;
    }
    HIXL_ASSERT_OK(g_world->Barrier());
  }
}

TEST(Collectives, AllgatherOrdersByRank) {
  const int n = Size(), me = Rank();
  struct Item {
    int32_t rank;
    char text[28];
  } mine{me, {}};
  std::snprintf(mine.text, sizeof mine.text, "hello from %d", me);
  std::vector<Item> all(static_cast<size_t>(n));
  HIXL_ASSERT_OK(g_world->Allgather(&mine, all.data(), sizeof(Item)));
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(all[static_cast<size_t>(r)].rank, r);
    EXPECT_EQ(std::string(all[static_cast<size_t>(r)].text), "hello from " + std::to_string(r));
  }
  HIXL_ASSERT_OK(g_world->Barrier());
}

// Many rounds back to back, sizes changing between them, with bare barriers
// between some: the two scratch halves alternate and are reused without a
// reset, so a round that read the other half's data, or data left from two
// rounds before, shows here.
TEST(Collectives, AllgatherManyRoundsOfChangingSizes) {
  const int n = Size(), me = Rank();
  const size_t sizes[] = {1, 7, 8, 9, 64, 1000, 3};
  for (int round = 0; round < 300; ++round) {
    const size_t bytes = sizes[static_cast<size_t>(round) % (sizeof sizes / sizeof sizes[0])];
    std::vector<uint8_t> mine(bytes);
    for (size_t i = 0; i < bytes; ++i) mine[i] = Byte(round, me, i);
    std::vector<uint8_t> all(bytes * static_cast<size_t>(n), 0xEE);
    HIXL_ASSERT_OK(g_world->Allgather(mine.data(), all.data(), bytes));
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < bytes; ++i) {
        ASSERT_EQ(all[static_cast<size_t>(r) * bytes + i], Byte(round, r, i))
            << "round " << round << ", rank " << r << "'s byte " << i << " of " << bytes;
      }
    }
    if (round % 7 == 0) HIXL_ASSERT_OK(g_world->Barrier());
  }
}

// Larger than the scratch (64 KiB a round for all ranks together): through
// rank 0's store, and in step with the data-plane rounds around it.
TEST(Collectives, AllgatherLargerThanTheScratch) {
  const int n = Size(), me = Rank();
  for (size_t bytes : {size_t{8}, size_t{40} << 10, size_t{100} << 10, size_t{16}}) {
    std::vector<uint8_t> mine(bytes);
    Fill(mine.data(), bytes, 77u + static_cast<uint64_t>(me));
    std::vector<uint8_t> all(bytes * static_cast<size_t>(n));
    HIXL_ASSERT_OK(g_world->Allgather(mine.data(), all.data(), bytes));
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(FirstMismatch(all.data() + static_cast<size_t>(r) * bytes, bytes, 77u + static_cast<uint64_t>(r)), -1)
          << bytes << " bytes from rank " << r;
    }
  }
}

// recv may be send's own buffer's neighbour, or overlap it: the call copies
// send before anything lands in recv.
TEST(Collectives, AllgatherIntoTheSendBuffer) {
  const int n = Size(), me = Rank();
  std::vector<uint64_t> buf(static_cast<size_t>(n), 0);
  buf[0] = 1000u + static_cast<uint64_t>(me);
  HIXL_ASSERT_OK(g_world->Allgather(&buf[0], buf.data(), sizeof(uint64_t)));
  for (int r = 0; r < n; ++r) EXPECT_EQ(buf[static_cast<size_t>(r)], 1000u + static_cast<uint64_t>(r));
}

// Every root, sizes around the chunk (the scratch half less its 16-byte
// header) so that one, two and several rounds are used.
TEST(Collectives, BroadcastFromEveryRoot) {
  const int n = Size(), me = Rank();
  constexpr size_t kChunk = (size_t{64} << 10) - 16;
  const size_t sizes[] = {1, 8, 1000, kChunk - 1, kChunk, kChunk + 1, 3 * kChunk + 5, size_t{1} << 20};
  int round = 0;
  for (int root = 0; root < n; ++root) {
    for (size_t bytes : sizes) {
      ++round;
      std::vector<uint8_t> buf(bytes);
      const uint64_t seed = 5000u + static_cast<uint64_t>(round);
      if (me == root) {
        Fill(buf.data(), bytes, seed);
      } else {
        std::memset(buf.data(), 0xEE, bytes);
      }
      HIXL_ASSERT_OK(g_world->Broadcast(root, buf.data(), bytes));
      ASSERT_EQ(FirstMismatch(buf.data(), bytes, seed), -1) << bytes << " bytes from root " << root;
    }
  }
  // Size 0 is a no-op, at every rank.
  HIXL_ASSERT_OK(g_world->Broadcast(0, nullptr, 0));
}

// A root may run as far ahead as the broadcast's ring holds (16 chunks) of
// a rank that has not called yet: rank 0 broadcasts 16 times, and only then
// signals the others, which then make the 16 calls and find each one's
// bytes.  Then many back to back, the root changing every call, sizes from
// 1 byte to a few chunks (16 KiB less a header each), so that the ring
// wraps and the roots wait for room.
TEST(Collectives, BroadcastsWaitInTheRingForALateRank) {
  const int n = Size(), me = Rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  auto flag = g_world->Alloc(sizeof(uint64_t));
  HIXL_ASSERT_OK(flag.status());
  auto* sig = static_cast<uint64_t*>(flag.value());
  *sig = 0;
  HIXL_ASSERT_OK(g_world->Barrier());
  constexpr int kAhead = 16;
  for (int i = 0; i < kAhead; ++i) {
    if (me != 0 && i == 0) HIXL_ASSERT_OK(g_world->WaitUntil(sig, Cmp::kGe, 1));
    const size_t bytes = 100 + static_cast<size_t>(i);
    std::vector<uint8_t> buf(bytes, 0xEE);
    if (me == 0) Fill(buf.data(), bytes, 7000u + static_cast<uint64_t>(i));
    HIXL_ASSERT_OK(g_world->Broadcast(0, buf.data(), bytes));
    ASSERT_EQ(FirstMismatch(buf.data(), bytes, 7000u + static_cast<uint64_t>(i)), -1) << "broadcast " << i;
  }
  if (me == 0) {
    for (int r = 1; r < n; ++r) {
      HIXL_ASSERT_OK(g_world->PutSignal(r, nullptr, 0, 0, reinterpret_cast<uint64_t>(sig), 1, SignalOp::kSet));
    }
  }
  for (int i = 0; i < 300; ++i) {
    const int root = i % n;
    const size_t bytes = 1 + (static_cast<size_t>(i) * 7919u) % 50000u;
    const uint64_t seed = 8000u + static_cast<uint64_t>(i);
    std::vector<uint8_t> buf(bytes, 0xEE);
    if (me == root) Fill(buf.data(), bytes, seed);
    HIXL_ASSERT_OK(g_world->Broadcast(root, buf.data(), bytes));
    ASSERT_EQ(FirstMismatch(buf.data(), bytes, seed), -1) << "broadcast " << i << " of " << bytes << " bytes";
  }
  HIXL_ASSERT_OK(g_world->Barrier());
  HIXL_ASSERT_OK(g_world->Free(sig));
}

TEST(Collectives, BroadcastBadArgumentsAreRefusedEverywhere) {
  const int n = Size();
  uint64_t v = 0;
  Status s = g_world->Broadcast(n, &v, sizeof v);
  EXPECT_EQ(s.code(), Errc::kInvalidRank) << s.ToString();
  EXPECT_NE(s.message().find("root " + std::to_string(n)), std::string::npos) << s.ToString();
  s = g_world->Broadcast(-1, &v, sizeof v);
  EXPECT_EQ(s.code(), Errc::kInvalidRank) << s.ToString();
  s = g_world->Broadcast(0, nullptr, 8);
  EXPECT_EQ(s.code(), Errc::kInvalidArg) << s.ToString();
  // Nothing was started: the ranks are still in step.
  HIXL_ASSERT_OK(g_world->Barrier());
}

// Calls that do not match across ranks are errors naming the rank, never
// other ranks' bytes taken for this call's.
TEST(Collectives, MismatchedCallsFailAndNameTheRank) {
  const int n = Size(), me = Rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  // Broadcast: the root sends 100 bytes, the others expect 200.
  std::vector<uint8_t> buf(200, 0xEE);
  if (me == 0) Fill(buf.data(), 100, 9);
  Status s = g_world->Broadcast(0, buf.data(), me == 0 ? 100 : 200);
  if (me == 0) {
    HIXL_ASSERT_OK(s);
  } else {
    EXPECT_EQ(s.code(), Errc::kInvalidArg) << s.ToString();
    EXPECT_NE(s.message().find("root 0"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("broadcasts 100 bytes"), std::string::npos) << s.ToString();
    EXPECT_EQ(FirstNot(buf.data(), buf.size(), 0xEE), -1) << "a mismatched broadcast wrote into buf";
  }
  // Allgather: the last rank passes 16 bytes per rank, the others 8.
  const size_t bytes = me == n - 1 ? 16 : 8;
  std::vector<uint8_t> mine(bytes, static_cast<uint8_t>(me));
  std::vector<uint8_t> all(16 * static_cast<size_t>(n), 0xEE);
  s = g_world->Allgather(mine.data(), all.data(), bytes);
  EXPECT_EQ(s.code(), Errc::kInvalidArg) << s.ToString();
  EXPECT_NE(s.message().find("rank " + std::to_string(me == n - 1 ? 0 : n - 1)), std::string::npos) << s.ToString();
  EXPECT_EQ(FirstNot(all.data(), all.size(), 0xEE), -1) << "a mismatched allgather wrote into recv";
  // Both calls were one round at every rank: the next ones work.
  uint64_t v = 42u + static_cast<uint64_t>(me);
  std::vector<uint64_t> got(static_cast<size_t>(n));
  HIXL_ASSERT_OK(g_world->Allgather(&v, got.data(), sizeof v));
  for (int r = 0; r < n; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], 42u + static_cast<uint64_t>(r));
}

}  // namespace
}  // namespace hixl::test

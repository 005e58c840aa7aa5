// The conformance suite: run by every rank of a world (hixlrun -n N), over
// whichever transport the environment selects.  Every rank runs the same
// tests in the same order; collective steps keep them in step.  A failure
// ends the rank at once (fail-fast), and hixlrun then stops the others.

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "mp_util.h"

namespace hixl::test {
namespace {

class Transfer : public testing::TestWithParam<Kind> {};

// A size from the environment, or `def`; at least `min`.  The ThreadSanitizer
// build sets smaller ones (tests/mp/CMakeLists.txt): there every byte copied
// and checked is instrumented, and the full sizes take minutes.
size_t EnvBytes(const char* name, size_t def, size_t min) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  return std::max<size_t>(min, std::strtoull(v, nullptr, 10));
}

// The largest random transfer (HIXL_TEST_MAX_BYTES, default 64 MiB).
const size_t kMaxSize = EnvBytes("HIXL_TEST_MAX_BYTES", size_t{64} << 20, 4096);
constexpr size_t kGuard = 64;          // canary bytes checked around each range
const size_t kSlot = kMaxSize + 4096;  // room for one transfer plus offsets
constexpr uint8_t kCanary = 0xEE;
// The one large put and get (HIXL_TEST_LARGE_BYTES, default 1 GiB).
const size_t kLargeBytes = EnvBytes("HIXL_TEST_LARGE_BYTES", size_t{1} << 30, 4096);

// Every rank puts a random-sized block at a random offset into its own slot
// of every rank's memory (itself included); after a barrier each rank checks
// every byte it received and the canaries around it.
TEST_P(Transfer, AllToAllPutRandomSizes) {
  const int n = Size(), me = Rank();
  Remote inbox(GetParam(), kSlot * static_cast<size_t>(n));
  std::vector<uint8_t> src(kMaxSize);
  const int rounds = 5;
  for (int round = 0; round < rounds; ++round) {
    // Prepare canaries around where each sender will write.
    for (int from = 0; from < n; ++from) {
      Shape s = round == rounds - 1 ? Shape{kMaxSize, 4096 - 1 - static_cast<size_t>(from)}
                                    : RandomShape(round, from, me, kMaxSize, kSlot - 2 * kGuard);
      uint8_t* slot = inbox.local() + static_cast<size_t>(from) * kSlot;
      size_t lo = s.offset >= kGuard ? s.offset - kGuard : 0;
      std::memset(slot + lo, kCanary, std::min(kSlot, s.offset + s.size + kGuard) - lo);
    }
    HIXL_ASSERT_OK(g_world->Barrier());
    for (int to = 0; to < n; ++to) {
      Shape s = round == rounds - 1 ? Shape{kMaxSize, 4096 - 1 - static_cast<size_t>(me)}
                                    : RandomShape(round, me, to, kMaxSize, kSlot - 2 * kGuard);
      Fill(src.data(), s.size, Mix(round * 1000 + me * 10 + to));
      uint64_t dst = inbox.base(to) + static_cast<uint64_t>(me) * kSlot + s.offset;
      HIXL_ASSERT_OK(g_world->Put(to, src.data(), dst, s.size));
      HIXL_ASSERT_OK(g_world->Fence());  // src is reused for the next peer
    }
    HIXL_ASSERT_OK(g_world->Barrier());
    for (int from = 0; from < n; ++from) {
      Shape s = round == rounds - 1 ? Shape{kMaxSize, 4096 - 1 - static_cast<size_t>(from)}
                                    : RandomShape(round, from, me, kMaxSize, kSlot - 2 * kGuard);
      uint8_t* at = inbox.local() + static_cast<size_t>(from) * kSlot + s.offset;
      ASSERT_EQ(FirstMismatch(at, s.size, Mix(round * 1000 + from * 10 + me)), -1)
          << "round " << round << ": data from rank " << from << " (" << s.size << " bytes at offset " << s.offset
          << ")";
      size_t before = std::min(kGuard, s.offset);
      ASSERT_EQ(FirstNot(at - before, before, kCanary), -1) << "bytes before the range changed";
      size_t after = std::min(kGuard, kSlot - s.offset - s.size);
      ASSERT_EQ(FirstNot(at + s.size, after, kCanary), -1) << "bytes after the range changed";
    }
  }
  HIXL_ASSERT_OK(g_world->Barrier());
}

// Every rank fills its memory with its own pattern; every rank gets random
// ranges of every rank's memory into a buffer with canaries around it.
TEST_P(Transfer, AllToAllGetRandomSizes) {
  const int n = Size(), me = Rank();
  Remote mem(GetParam(), kSlot);
  Fill(mem.local(), kSlot, Mix(7777 + me));
  HIXL_ASSERT_OK(g_world->Barrier());
  std::vector<uint8_t> dst(kMaxSize + 2 * kGuard);
  for (int round = 0; round < 5; ++round) {
    for (int from = 0; from < n; ++from) {
      Shape s = round == 4 ? Shape{kMaxSize, 4095} : RandomShape(round, from, me + 100, kMaxSize, kSlot);
      std::memset(dst.data(), kCanary, s.size + 2 * kGuard);
      HIXL_ASSERT_OK(g_world->Get(from, mem.base(from) + s.offset, dst.data() + kGuard, s.size));
      HIXL_ASSERT_OK(g_world->Fence());
      ASSERT_EQ(FirstMismatch(dst.data() + kGuard, s.size, Mix(7777 + from), s.offset), -1)
          << "get of " << s.size << " bytes at offset " << s.offset << " from rank " << from;
      ASSERT_EQ(FirstNot(dst.data(), kGuard, kCanary), -1);
      ASSERT_EQ(FirstNot(dst.data() + kGuard + s.size, kGuard, kCanary), -1);
    }
  }
  HIXL_ASSERT_OK(g_world->Barrier());
}

// Puts of 1 to 64 bytes at every alignment: the small-copy edges.
TEST_P(Transfer, SmallPutsAtEveryAlignment) {
  const int n = Size(), me = Rank();
  Remote mem(GetParam(), 4096 * static_cast<size_t>(n));
  std::memset(mem.local(), 0, mem.bytes());
  HIXL_ASSERT_OK(g_world->Barrier());
  const int to = (me + 1) % n;
  uint8_t src[64];
  for (size_t len = 1; len <= 64; ++len) {
    for (size_t align = 0; align < 8; ++align) {
      Fill(src, len, Mix(len * 8 + align));
      uint64_t dst = mem.base(to) + static_cast<uint64_t>(me) * 4096 + (len - 1) * 64 + align;
      HIXL_ASSERT_OK(g_world->Put(to, src, dst, std::min<size_t>(len, 64 - align)));
    }
  }
  HIXL_ASSERT_OK(g_world->Barrier());
  const int from = (me + n - 1) % n;
  for (size_t len = 1; len <= 64; ++len) {
    // The last put to each 64-byte line (align 7) wins where they overlap;
    // check its bytes.
    size_t l = std::min<size_t>(len, 64 - 7);
    const uint8_t* at = mem.local() + static_cast<size_t>(from) * 4096 + (len - 1) * 64 + 7;
    ASSERT_EQ(FirstMismatch(at, l, Mix(len * 8 + 7)), -1) << "len " << len;
  }
  HIXL_ASSERT_OK(g_world->Barrier());
}

// After fence returns, the source buffer may be overwritten: the data put
// before it is what arrives.
TEST_P(Transfer, FenceCompletesPutsBeforeSourceReuse) {
  const int n = Size(), me = Rank();
  constexpr size_t kLen = (size_t{8} << 20) + 3;
  Remote mem(GetParam(), kLen);
  std::vector<uint8_t> src(kLen);
  const int to = (me + 1) % n;
  Fill(src.data(), kLen, Mix(4242 + me));
  HIXL_ASSERT_OK(g_world->Barrier());
  HIXL_ASSERT_OK(g_world->Put(to, src.data(), mem.base(to), kLen));
  HIXL_ASSERT_OK(g_world->Fence());
  std::memset(src.data(), 0, kLen);
  HIXL_ASSERT_OK(g_world->Barrier());
  const int from = (me + n - 1) % n;
  ASSERT_EQ(FirstMismatch(mem.local(), kLen, Mix(4242 + from)), -1);
  HIXL_ASSERT_OK(g_world->Barrier());
}

// Several threads put at once; one fence, on another thread, completes all.
TEST_P(Transfer, ThreadsShareOneFence) {
  const int n = Size(), me = Rank();
  constexpr int kThreads = 4;
  constexpr size_t kLen = size_t{1} << 20;
  Remote mem(GetParam(), kLen * kThreads * static_cast<size_t>(n));
  HIXL_ASSERT_OK(g_world->Barrier());
  std::vector<std::vector<uint8_t>> src(kThreads, std::vector<uint8_t>(kLen));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Fill(src[t].data(), kLen, Mix(me * 100 + t));
      for (int to = 0; to < n; ++to) {
        uint64_t dst = mem.base(to) + (static_cast<uint64_t>(me) * kThreads + t) * kLen;
        if (!g_world->Put(to, src[t].data(), dst, kLen).ok()) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  HIXL_ASSERT_OK(g_world->Fence());
  HIXL_ASSERT_OK(g_world->Barrier());
  for (int from = 0; from < n; ++from) {
    for (int t = 0; t < kThreads; ++t) {
      const uint8_t* at = mem.local() + (static_cast<size_t>(from) * kThreads + t) * kLen;
      ASSERT_EQ(FirstMismatch(at, kLen, Mix(from * 100 + t)), -1) << "from rank " << from << " thread " << t;
    }
  }
  HIXL_ASSERT_OK(g_world->Barrier());
}

INSTANTIATE_TEST_SUITE_P(Memory, Transfer, testing::Values(Kind::kSymmetric, Kind::kRegistered), KindName);

// One put and one get of a whole 1 GiB region (kLargeBytes) between ranks 0
// and 1.
TEST(Large, OneGiBPutAndGet) {
  if (Size() > 2) GTEST_SKIP() << "run with 2 ranks only (memory)";
  const int me = Rank(), peer = (me + 1) % Size();
  const size_t kBytes = kLargeBytes;
  for (Kind kind : {Kind::kSymmetric, Kind::kRegistered}) {
    Remote mem(kind, kBytes);
    if (me == 0) {
      std::vector<uint8_t> src(kBytes);
      Fill(src.data(), kBytes, 1234);
      HIXL_ASSERT_OK(g_world->Put(peer, src.data(), mem.base(peer), kBytes));
      HIXL_ASSERT_OK(g_world->Fence());
    }
    HIXL_ASSERT_OK(g_world->Barrier());
    if (me == 1 || Size() == 1) {
      ASSERT_EQ(FirstMismatch(mem.local(), kBytes, 1234), -1);
    }
    if (me == 1) Fill(mem.local(), kBytes, 5678);
    HIXL_ASSERT_OK(g_world->Barrier());
    if (me == 0) {
      std::vector<uint8_t> dst(kBytes);
      HIXL_ASSERT_OK(g_world->Get(peer, mem.base(peer), dst.data(), kBytes));
      HIXL_ASSERT_OK(g_world->Fence());
      ASSERT_EQ(FirstMismatch(dst.data(), kBytes, Size() == 1 ? 1234 : 5678), -1);
    }
    HIXL_ASSERT_OK(g_world->Barrier());
  }
}

// A region registered after a peer has already looked at our table is found
// on that peer's next access, with no call on our side.
TEST(Registration, LateRegistrationIsFound) {
  const int n = Size(), me = Rank();
  if (n < 2) GTEST_SKIP();
  std::vector<uint8_t> early(4096), late(4096, 0);
  HIXL_ASSERT_OK(g_world->RegisterMemory(early.data(), early.size()));
  auto early_addr = g_world->Allgather(reinterpret_cast<uint64_t>(early.data()));
  ASSERT_TRUE(early_addr.ok());
  uint8_t b = 1;
  // Rank 0 caches rank 1's table now.
  if (me == 0) {
    HIXL_ASSERT_OK(g_world->Put(1, &b, (*early_addr)[1], 1));
  }
  HIXL_ASSERT_OK(g_world->Barrier());
  HIXL_ASSERT_OK(g_world->RegisterMemory(late.data(), late.size()));
  auto late_addr = g_world->Allgather(reinterpret_cast<uint64_t>(late.data()));
  ASSERT_TRUE(late_addr.ok());
  uint8_t v[16];
  Fill(v, sizeof v, 99);
  if (me == 0) {
    HIXL_ASSERT_OK(g_world->Put(1, v, (*late_addr)[1] + 100, sizeof v));
    HIXL_ASSERT_OK(g_world->Fence());
  }
  HIXL_ASSERT_OK(g_world->Barrier());
  if (me == 1) {
    ASSERT_EQ(FirstMismatch(late.data() + 100, sizeof v, 99), -1);
  }
  HIXL_ASSERT_OK(g_world->Barrier());
  HIXL_ASSERT_OK(g_world->DeregisterMemory(early.data()));
  HIXL_ASSERT_OK(g_world->DeregisterMemory(late.data()));
  HIXL_ASSERT_OK(g_world->Barrier());
}

// Every bad access from rank 0 to rank 1 fails with its own code, the right
// message, and leaves rank 1's memory exactly as it was.
class Checked : public testing::TestWithParam<Kind> {};

void ExpectNotRegistered(const Status& s, int rank, uint64_t addr, size_t size) {
  EXPECT_EQ(s.code(), Errc::kNotRegistered) << s.ToString();
  EXPECT_EQ(s.message().rfind("Remote memory not registered", 0), 0u) << s.message();
  EXPECT_NE(s.message().find("rank " + std::to_string(rank)), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(fmt::format("{:#x}", addr)), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(std::to_string(size) + " bytes"), std::string::npos) << s.message();
}

TEST_P(Checked, BadAccessesFailAndWriteNothing) {
  const int n = Size(), me = Rank();
  if (n < 2) GTEST_SKIP();
  constexpr size_t kPage = 4096;
  // Three pages; only the middle one is reachable.  For symmetric memory the
  // outer pages are separate allocations that are freed at once, leaving holes.
  uint8_t* outer = nullptr;
  uint8_t* mid = nullptr;
  void* pre = nullptr;
  void* post = nullptr;
  std::vector<uint8_t> backing;
  if (GetParam() == Kind::kSymmetric) {
    auto a = g_world->Alloc(kPage), b = g_world->Alloc(kPage), c = g_world->Alloc(kPage);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    pre = a.value();
    mid = static_cast<uint8_t*>(b.value());
    post = c.value();
    ASSERT_EQ(static_cast<uint8_t*>(pre) + kPage, mid) << "the heap allocates contiguously";
    ASSERT_EQ(mid + kPage, post);
    outer = static_cast<uint8_t*>(pre);
    HIXL_ASSERT_OK(g_world->Free(pre));
    HIXL_ASSERT_OK(g_world->Free(post));
  } else {
    backing.resize(3 * kPage);
    outer = backing.data();
    mid = outer + kPage;
    HIXL_ASSERT_OK(g_world->RegisterMemory(mid, kPage));
  }
  std::memset(outer, kCanary, 3 * kPage);
  auto mids = g_world->Allgather(reinterpret_cast<uint64_t>(mid));
  ASSERT_TRUE(mids.ok());
  HIXL_ASSERT_OK(g_world->Barrier());

  const uint64_t m = (*mids)[1];
  std::vector<uint8_t> junk(3 * kPage, 0x11);
  if (me == 0) {
    // A good access first, so rank 1's table is cached here.
    HIXL_ASSERT_OK(g_world->Get(1, m, junk.data(), kPage));
    HIXL_ASSERT_OK(g_world->Fence());
    ASSERT_EQ(FirstNot(junk.data(), kPage, kCanary), -1);
    std::fill(junk.begin(), junk.end(), 0x11);
    struct Case {
      uint64_t addr;
      size_t size;
    } cases[] = {
        {m - 1, 2},            // straddles the start
        {m + kPage - 1, 2},    // straddles the end
        {m - kPage, kPage},    // wholly before
        {m + kPage, 16},       // wholly after
        {m, kPage + 1},        // one byte too long
        {m, size_t{1} << 40},  // far too long
    };
    for (const Case& c : cases) {
      ExpectNotRegistered(g_world->Put(1, junk.data(), c.addr, std::min<size_t>(c.size, junk.size())), 1, c.addr,
                          std::min<size_t>(c.size, junk.size()));
      if (c.size <= junk.size()) {
        ExpectNotRegistered(g_world->Get(1, c.addr, junk.data(), c.size), 1, c.addr, c.size);
      }
    }
    EXPECT_EQ(g_world->Put(-1, junk.data(), m, 8).code(), Errc::kInvalidRank);
    EXPECT_EQ(g_world->Put(n, junk.data(), m, 8).code(), Errc::kInvalidRank);
    EXPECT_EQ(g_world->Get(n + 5, m, junk.data(), 8).code(), Errc::kInvalidRank);
    EXPECT_EQ(g_world->Put(1, nullptr, m, 8).code(), Errc::kInvalidArg);
    EXPECT_EQ(g_world->Get(1, m, nullptr, 8).code(), Errc::kInvalidArg);
    EXPECT_EQ(g_world->Put(1, junk.data(), 0, 8).code(), Errc::kInvalidArg);
    EXPECT_EQ(g_world->Put(1, junk.data(), UINT64_MAX - 3, 8).code(), Errc::kInvalidArg);
    EXPECT_EQ(g_world->Get(1, UINT64_MAX - 3, junk.data(), 8).code(), Errc::kInvalidArg);
    HIXL_ASSERT_OK(g_world->Fence());
  }
  HIXL_ASSERT_OK(g_world->Barrier());
  if (me == 1) {
    ASSERT_EQ(FirstNot(outer, 3 * kPage, kCanary), -1) << "a refused access wrote into rank 1's memory";
    // Now the middle page goes away as well.
    if (GetParam() == Kind::kSymmetric) {
      HIXL_ASSERT_OK(g_world->Free(mid));
    } else {
      HIXL_ASSERT_OK(g_world->DeregisterMemory(mid));
    }
  }
  HIXL_ASSERT_OK(g_world->Barrier());
  if (me == 0) {
    // Rank 0's cached table said "registered": the deregistration reached it.
    ExpectNotRegistered(g_world->Put(1, junk.data(), m, 8), 1, m, 8);
    ExpectNotRegistered(g_world->Get(1, m + 8, junk.data(), 8), 1, m + 8, 8);
    HIXL_ASSERT_OK(g_world->Fence());
  }
  HIXL_ASSERT_OK(g_world->Barrier());
  if (me == 1) {
    ASSERT_EQ(FirstNot(outer, 3 * kPage, kCanary), -1) << "a put after deregistration wrote";
  }
  if (me != 1) {
    if (GetParam() == Kind::kSymmetric) {
      HIXL_ASSERT_OK(g_world->Free(mid));
    } else {
      HIXL_ASSERT_OK(g_world->DeregisterMemory(mid));
    }
  }
  HIXL_ASSERT_OK(g_world->Barrier());
}

INSTANTIATE_TEST_SUITE_P(Memory, Checked, testing::Values(Kind::kSymmetric, Kind::kRegistered), KindName);

}  // namespace
}  // namespace hixl::test

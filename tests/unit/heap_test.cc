// Unit tests of the symmetric heap (src/core/heap.h).
//
// The determinism test forks two children that reserve the heap at the same
// base and replay the same Alloc/Free sequence; the parent compares what they
// report through pipes.  Every wait on a child is bounded: a hung child is
// killed and the test fails.
#include "world/heap.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

namespace hixl {
// Lets GoogleTest print "HIXL_ERR_NO_MEMORY" instead of the enum's bytes.
inline void PrintTo(Errc code, std::ostream* os) { *os << ErrcName(static_cast<int>(code)); }
}  // namespace hixl

namespace hixl {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Reserves a heap at the first candidate base that works (bytes of addresses).
std::unique_ptr<SymmetricHeap> ReserveAnywhere(uint64_t bytes = SymmetricHeap::kReserveBytes) {
  for (uint64_t base : SymmetricHeap::CandidateBases()) {
    auto h = SymmetricHeap::Reserve(base, bytes);
    if (h.ok()) return std::move(h.value());
  }
  return nullptr;
}

uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// Whether [p, p+n) lies in the heap's address range.
bool InHeap(const SymmetricHeap& h, const void* p, size_t n) {
  return h.Contains(p) && Addr(p) + n - 1 >= Addr(p) && h.Contains(reinterpret_cast<const char*>(p) + n - 1);
}

SymmetricHeap::Block AllocOk(SymmetricHeap& h, size_t n) {
  Result<SymmetricHeap::Block> b = h.Alloc(n);
  EXPECT_TRUE(b.ok()) << "Alloc(" << n << "): " << b.status().ToString();
  return b.ok() ? b.value() : SymmetricHeap::Block{};
}

TEST(HeapTest, CandidateBasesAreDistinctAndAligned) {
  const std::vector<uint64_t> bases = SymmetricHeap::CandidateBases();
  ASSERT_FALSE(bases.empty());
  for (size_t i = 0; i < bases.size(); ++i) {
    EXPECT_EQ(bases[i] % (2 * kMiB), 0u) << std::hex << bases[i];
    for (size_t j = i + 1; j < bases.size(); ++j) {
      // Reservations at different candidates never overlap.
      EXPECT_TRUE(bases[i] + SymmetricHeap::kReserveBytes <= bases[j] ||
                  bases[j] + SymmetricHeap::kReserveBytes <= bases[i]);
    }
  }
}

TEST(HeapTest, ReserveAtACandidateBase) {
  std::unique_ptr<SymmetricHeap> h = ReserveAnywhere();
  ASSERT_NE(h, nullptr) << "no candidate base could be reserved";
  const std::vector<uint64_t> bases = SymmetricHeap::CandidateBases();
  EXPECT_NE(std::find(bases.begin(), bases.end(), h->base()), bases.end());
  EXPECT_TRUE(h->Contains(reinterpret_cast<void*>(h->base())));
  EXPECT_TRUE(h->Contains(reinterpret_cast<void*>(h->base() + SymmetricHeap::kReserveBytes - 1)));
  EXPECT_FALSE(h->Contains(reinterpret_cast<void*>(h->base() - 1)));
  EXPECT_FALSE(h->Contains(reinterpret_cast<void*>(h->base() + SymmetricHeap::kReserveBytes)));
  EXPECT_FALSE(h->Contains(nullptr));
}

TEST(HeapTest, ReservingATakenBaseIsNoMemory) {
  std::unique_ptr<SymmetricHeap> h = ReserveAnywhere();
  ASSERT_NE(h, nullptr);
  auto again = SymmetricHeap::Reserve(h->base());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Errc::kNoMemory);
  EXPECT_THAT(again.status().message(), HasSubstr(fmt::format("{:#x}", h->base())));
  // A smaller range overlapping the end of the first is refused as well.
  auto overlapping = SymmetricHeap::Reserve(h->base() + SymmetricHeap::kReserveBytes - 2 * kMiB, 4 * kMiB);
  ASSERT_FALSE(overlapping.ok());
  EXPECT_EQ(overlapping.status().code(), Errc::kNoMemory);
  // Once released, the base can be reserved again.
  const uint64_t base = h->base();
  h.reset();
  auto after = SymmetricHeap::Reserve(base);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after.value()->base(), base);
}

TEST(HeapTest, AllocIsAlignedInsideTheHeapAndWritable) {
  std::unique_ptr<SymmetricHeap> h = ReserveAnywhere();
  ASSERT_NE(h, nullptr);
  const size_t sizes[] = {1, 7, 63, 64, 65, 100, 4095, 4096, 4097, 65535, 65536, 65537, 1000000};
  std::vector<SymmetricHeap::Block> blocks;
  for (size_t n : sizes) {
    SymmetricHeap::Block b = AllocOk(*h, n);
    ASSERT_NE(b.ptr, nullptr);
    EXPECT_EQ(Addr(b.ptr) % 64, 0u) << "Alloc(" << n << ") = " << b.ptr;
    EXPECT_GE(b.size, n);
    EXPECT_TRUE(InHeap(*h, b.ptr, b.size)) << b.ptr;
    EXPECT_GE(b.fd, 0);
    EXPECT_LE(b.segment_offset + b.size, b.segment_size);
    EXPECT_GE(Addr(b.ptr) - b.segment_offset, h->base());
    std::memset(b.ptr, static_cast<int>(n & 0xff), n);
    blocks.push_back(b);
  }
  // No two blocks overlap, and each kept its own contents.
  std::vector<SymmetricHeap::Block> sorted = blocks;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return Addr(a.ptr) < Addr(b.ptr); });
  for (size_t i = 1; i < sorted.size(); ++i) {
    EXPECT_LE(Addr(sorted[i - 1].ptr) + sorted[i - 1].size, Addr(sorted[i].ptr));
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto* p = static_cast<const unsigned char*>(blocks[i].ptr);
    const auto want = static_cast<unsigned char>(sizes[i] & 0xff);
    EXPECT_EQ(p[0], want);
    EXPECT_EQ(p[sizes[i] - 1], want);
  }
  for (const auto& b : blocks) {
    Result<size_t> freed = h->Free(b.ptr);
    ASSERT_TRUE(freed.ok()) << freed.status().ToString();
    EXPECT_EQ(freed.value(), b.size);
  }
}

TEST(HeapTest, SegmentMemoryIsTheMemfd) {
  // The block's fd and offset describe the same bytes (what peers map).
  std::unique_ptr<SymmetricHeap> h = ReserveAnywhere();
  ASSERT_NE(h, nullptr);
  (void)AllocOk(*h, 4096);
  SymmetricHeap::Block b = AllocOk(*h, 256);
  ASSERT_NE(b.ptr, nullptr);
  std::memcpy(b.ptr, "symmetric", 10);
  void* view = ::mmap(nullptr, b.segment_size, PROT_READ, MAP_SHARED, b.fd, 0);
  ASSERT_NE(view, MAP_FAILED) << std::strerror(errno);
  EXPECT_STREQ(static_cast<const char*>(view) + b.segment_offset, "symmetric");
  ::munmap(view, b.segment_size);
}

TEST(HeapTest, AllocZeroIsInvalid) {
  std::unique_ptr<SymmetricHeap> h = ReserveAnywhere();
  ASSERT_NE(h, nullptr);
  auto r = h->Alloc(0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Errc::kInvalidArg);
  EXPECT_THAT(r.status().message(), HasSubstr("0 bytes"));
}

TEST(HeapTest, AllocBeyondTheRangeIsNoMemory) {
  std::unique_ptr<SymmetricHeap> h = ReserveAnywhere(128 * kMiB);
  ASSERT_NE(h, nullptr);
  auto r = h->Alloc(200 * kMiB);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Errc::kNoMemory);
  // Fills the first segment, then the rest of the range; then it is full.
  SymmetricHeap::Block a = AllocOk(*h, 64 * kMiB);
  SymmetricHeap::Block b = AllocOk(*h, 64 * kMiB);
  EXPECT_NE(a.ptr, nullptr);
  EXPECT_NE(b.ptr, nullptr);
  auto c = h->Alloc(1);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Errc::kNoMemory);
  EXPECT_THAT(c.status().message(), HasSubstr("exhausted"));
  // Freeing makes room again.
  ASSERT_TRUE(h->Free(a.ptr).ok());
  SymmetricHeap::Block d = AllocOk(*h, 1);
  EXPECT_EQ(d.ptr, a.ptr);
  r = h->Alloc(SIZE_MAX);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Errc::kNoMemory);
}

TEST(HeapTest, FreeOfAForeignPointerIsInvalid) {
  std::unique_ptr<SymmetricHeap> h = ReserveAnywhere();
  ASSERT_NE(h, nullptr);
  SymmetricHeap::Block b = AllocOk(*h, 256);
  int on_stack = 0;
  std::vector<char> on_heap(16);
  void* foreign[] = {&on_stack, on_heap.data(), nullptr, static_cast<char*>(b.ptr) + 64,
                     reinterpret_cast<void*>(h->base() + 100 * kMiB)};
  for (void* p : foreign) {
    Result<size_t> r = h->Free(p);
    ASSERT_FALSE(r.ok()) << p;
    EXPECT_EQ(r.status().code(), Errc::kInvalidArg) << p;
    EXPECT_THAT(r.status().message(), HasSubstr("not returned by hixl_alloc"));
  }
  // The real block is unaffected.
  EXPECT_TRUE(h->Free(b.ptr).ok());
}

TEST(HeapTest, DoubleFreeIsInvalid) {
  std::unique_ptr<SymmetricHeap> h = ReserveAnywhere();
  ASSERT_NE(h, nullptr);
  SymmetricHeap::Block a = AllocOk(*h, 1000);
  SymmetricHeap::Block b = AllocOk(*h, 1000);
  ASSERT_TRUE(h->Free(a.ptr).ok());
  Result<size_t> r = h->Free(a.ptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Errc::kInvalidArg);
  // The double free did not corrupt the free list: a's space is handed out once.
  SymmetricHeap::Block c = AllocOk(*h, 1000);
  SymmetricHeap::Block d = AllocOk(*h, 1000);
  EXPECT_EQ(c.ptr, a.ptr);
  EXPECT_NE(d.ptr, a.ptr);
  EXPECT_NE(d.ptr, b.ptr);
}

TEST(HeapTest, FreedSpaceIsReusedFirstFit) {
  std::unique_ptr<SymmetricHeap> h = ReserveAnywhere();
  ASSERT_NE(h, nullptr);
  SymmetricHeap::Block a = AllocOk(*h, 128);
  SymmetricHeap::Block b = AllocOk(*h, 128);
  ASSERT_TRUE(h->Free(a.ptr).ok());
  SymmetricHeap::Block c = AllocOk(*h, 64);  // fits in a's hole
  EXPECT_EQ(c.ptr, a.ptr);
  SymmetricHeap::Block d = AllocOk(*h, 64);  // the rest of the hole
  EXPECT_EQ(Addr(d.ptr), Addr(a.ptr) + 64);
  SymmetricHeap::Block e = AllocOk(*h, 64);  // no hole left: after b
  EXPECT_GE(Addr(e.ptr), Addr(b.ptr) + b.size);
}

TEST(HeapTest, FreeMergesNeighbours) {
  std::unique_ptr<SymmetricHeap> h = ReserveAnywhere();
  ASSERT_NE(h, nullptr);
  // a | b | c | guard: freeing a, c, then b must leave one hole of a+b+c.
  SymmetricHeap::Block a = AllocOk(*h, 3 * kMiB);
  SymmetricHeap::Block b = AllocOk(*h, 3 * kMiB);
  SymmetricHeap::Block c = AllocOk(*h, 3 * kMiB);
  SymmetricHeap::Block guard = AllocOk(*h, 4096);
  ASSERT_EQ(Addr(b.ptr), Addr(a.ptr) + a.size);
  ASSERT_EQ(Addr(c.ptr), Addr(b.ptr) + b.size);
  std::memset(a.ptr, 1, a.size);
  std::memset(c.ptr, 3, c.size);
  ASSERT_TRUE(h->Free(a.ptr).ok());
  ASSERT_TRUE(h->Free(c.ptr).ok());
  ASSERT_TRUE(h->Free(b.ptr).ok());  // merges with both sides
  SymmetricHeap::Block big = AllocOk(*h, 9 * kMiB);
  EXPECT_EQ(big.ptr, a.ptr) << "the freed blocks were not merged into one";
  EXPECT_LT(Addr(big.ptr), Addr(guard.ptr));
  // The whole merged block is usable.
  std::memset(big.ptr, 0x5a, big.size);
  EXPECT_EQ(static_cast<unsigned char*>(big.ptr)[big.size - 1], 0x5a);
}

TEST(HeapTest, FreeMergesWithTheFreeTail) {
  std::unique_ptr<SymmetricHeap> h = ReserveAnywhere();
  ASSERT_NE(h, nullptr);
  SymmetricHeap::Block a = AllocOk(*h, 1 * kMiB);
  SymmetricHeap::Block b = AllocOk(*h, 1 * kMiB);
  ASSERT_TRUE(h->Free(b.ptr).ok());  // merges with the rest of the segment
  ASSERT_TRUE(h->Free(a.ptr).ok());  // and now everything is one block
  // The whole first segment (at least 64 MiB) is one free block again.
  SymmetricHeap::Block all = AllocOk(*h, 64 * kMiB);
  EXPECT_EQ(all.ptr, a.ptr);
  EXPECT_EQ(Addr(all.ptr), h->base());
}

TEST(HeapTest, GrowsBeyondTheFirstSegment) {
  std::unique_ptr<SymmetricHeap> h = ReserveAnywhere();
  ASSERT_NE(h, nullptr);
  std::vector<SymmetricHeap::Block> blocks;
  for (int i = 0; i < 3; ++i) {
    SymmetricHeap::Block b = AllocOk(*h, 40 * kMiB);
    ASSERT_NE(b.ptr, nullptr);
    EXPECT_TRUE(InHeap(*h, b.ptr, b.size));
    EXPECT_EQ(Addr(b.ptr) % 64, 0u);
    // Touch the first and last byte of every block (commits two pages each).
    auto* p = static_cast<unsigned char*>(b.ptr);
    p[0] = static_cast<unsigned char>(i + 1);
    p[b.size - 1] = static_cast<unsigned char>(i + 101);
    blocks.push_back(b);
  }
  // 40 MiB blocks do not share a 64 MiB segment: three segments.
  EXPECT_NE(blocks[0].segment_id, blocks[1].segment_id);
  EXPECT_NE(blocks[1].segment_id, blocks[2].segment_id);
  EXPECT_NE(blocks[0].segment_id, blocks[2].segment_id);
  for (int i = 0; i < 3; ++i) {
    auto* p = static_cast<unsigned char*>(blocks[static_cast<size_t>(i)].ptr);
    EXPECT_EQ(p[0], i + 1);
    EXPECT_EQ(p[blocks[static_cast<size_t>(i)].size - 1], i + 101);
    for (int j = i + 1; j < 3; ++j) {
      const auto& x = blocks[static_cast<size_t>(i)];
      const auto& y = blocks[static_cast<size_t>(j)];
      EXPECT_TRUE(Addr(x.ptr) + x.size <= Addr(y.ptr) || Addr(y.ptr) + y.size <= Addr(x.ptr));
    }
  }
  // A block larger than any segment so far gets a segment of its own size.
  SymmetricHeap::Block huge = AllocOk(*h, 300 * kMiB);
  ASSERT_NE(huge.ptr, nullptr);
  EXPECT_GE(huge.segment_size, 300 * kMiB);
  static_cast<unsigned char*>(huge.ptr)[huge.size - 1] = 7;
  for (const auto& b : blocks) EXPECT_TRUE(h->Free(b.ptr).ok());
  EXPECT_TRUE(h->Free(huge.ptr).ok());
}

// ------------------------------------------------------ determinism (fork)

// The Alloc/Free sequence both children replay; returns the addresses seen
// (0 for a failure).
std::vector<uint64_t> ReplaySequence(SymmetricHeap& h) {
  std::vector<uint64_t> out;
  std::vector<void*> live;
  uint64_t x = 12345;
  for (int i = 0; i < 300; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    if (!live.empty() && (x >> 60) < 6) {
      // Free a pseudo-random live block.
      size_t k = static_cast<size_t>((x >> 20) % live.size());
      out.push_back(h.Free(live[k]).ok() ? 1 : 0);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    size_t n = 1 + static_cast<size_t>((x >> 30) % ((x >> 62) == 3 ? 5 * kMiB : 70000));
    auto b = h.Alloc(n);
    out.push_back(b.ok() ? Addr(b.value().ptr) : 0);
    if (b.ok()) {
      static_cast<unsigned char*>(b.value().ptr)[0] = 1;
      live.push_back(b.value().ptr);
    }
  }
  // A growth step and a big reuse.
  for (size_t n : {size_t{40} * kMiB, size_t{40} * kMiB, size_t{40} * kMiB}) {
    auto b = h.Alloc(n);
    out.push_back(b.ok() ? Addr(b.value().ptr) : 0);
  }
  return out;
}

// Writes all of buf to fd; false on failure.
bool WriteAll(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// In a forked child: reserves at base, replays, writes [count][addresses...]
// to fd and exits (never returns).
[[noreturn]] void ChildReplay(uint64_t base, int fd) {
  auto h = SymmetricHeap::Reserve(base);
  std::vector<uint64_t> seq;
  if (h.ok()) seq = ReplaySequence(*h.value());
  uint64_t count = seq.size();
  bool ok = WriteAll(fd, &count, sizeof(count)) && WriteAll(fd, seq.data(), seq.size() * sizeof(uint64_t));
  ::close(fd);
  ::_exit(h.ok() && ok ? 0 : 3);
}

// A forked child with a pipe from it.
struct Child {
  pid_t pid = -1;
  int fd = -1;  // read end
  std::string bytes;
  bool eof = false;
  int status = -1;
};

// Reads every child's output to EOF and reaps it, bounded by the deadline;
// kills and reaps children that overrun.  Returns false on timeout.
bool CollectChildren(std::vector<Child>& kids, Clock::time_point deadline) {
  bool in_time = true;
  while (true) {
    std::vector<pollfd> pfds;
    std::vector<Child*> who;
    for (Child& c : kids) {
      if (!c.eof) {
        pfds.push_back({c.fd, POLLIN, 0});
        who.push_back(&c);
      }
    }
    if (pfds.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      in_time = false;
      break;
    }
    int n = ::poll(pfds.data(), pfds.size(), static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (!pfds[i].revents) continue;
      char buf[4096];
      ssize_t k = ::read(pfds[i].fd, buf, sizeof(buf));
      if (k > 0) {
        who[i]->bytes.append(buf, static_cast<size_t>(k));
      } else if (k == 0 || errno != EINTR) {
        who[i]->eof = true;
      }
    }
  }
  for (Child& c : kids) {
    ::close(c.fd);
    c.fd = -1;
    // The pipe reached EOF, so the child is exiting; reaping is quick.  Still
    // bounded: past the deadline the child is killed.
    while (true) {
      pid_t r = ::waitpid(c.pid, &c.status, WNOHANG);
      if (r == c.pid) break;
      if (r < 0 && errno != EINTR) break;
      if (Clock::now() >= deadline) {
        in_time = false;
        ::kill(c.pid, SIGKILL);
        while (::waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      std::this_thread::yield();
    }
  }
  return in_time;
}

std::vector<uint64_t> Decode(const std::string& bytes) {
  std::vector<uint64_t> v;
  if (bytes.size() < sizeof(uint64_t)) return v;
  uint64_t count = 0;
  std::memcpy(&count, bytes.data(), sizeof(count));
  if (bytes.size() != sizeof(uint64_t) * (count + 1)) return v;
  v.resize(count);
  std::memcpy(v.data(), bytes.data() + sizeof(uint64_t), count * sizeof(uint64_t));
  return v;
}

TEST(HeapTest, SameSequenceGivesSameAddressesInTwoProcesses) {
  // Find a base that is free here (hence in the children, forked from us).
  uint64_t base = 0;
  {
    std::unique_ptr<SymmetricHeap> probe = ReserveAnywhere();
    ASSERT_NE(probe, nullptr);
    base = probe->base();
  }
  std::vector<Child> kids(2);
  for (Child& c : kids) {
    int p[2];
    ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0) << std::strerror(errno);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) {
      ::close(p[0]);
      ChildReplay(base, p[1]);
    }
    ::close(p[1]);
    c.pid = pid;
    c.fd = p[0];
  }
  const bool in_time = CollectChildren(kids, Clock::now() + std::chrono::seconds(60));
  ASSERT_TRUE(in_time) << "a child did not finish within 60 s";
  for (const Child& c : kids) {
    ASSERT_TRUE(WIFEXITED(c.status)) << "child " << c.pid << " status " << c.status;
    EXPECT_EQ(WEXITSTATUS(c.status), 0) << "child " << c.pid << " failed to reserve at " << std::hex << base;
  }
  const std::vector<uint64_t> a = Decode(kids[0].bytes), b = Decode(kids[1].bytes);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b) << "the same Alloc/Free sequence gave different addresses";
  // And the addresses are real: inside the heap, aligned, no failures.
  size_t allocs = 0;
  for (uint64_t v : a) {
    if (v == 1) continue;  // a successful Free
    ++allocs;
    EXPECT_GE(v, base);
    EXPECT_LT(v, base + SymmetricHeap::kReserveBytes);
    EXPECT_EQ(v % 64, 0u);
  }
  EXPECT_GT(allocs, 100u);

  // The parent replaying the same sequence at the same base agrees as well.
  auto h = SymmetricHeap::Reserve(base);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(ReplaySequence(*h.value()), a);
}

}  // namespace
}  // namespace hixl

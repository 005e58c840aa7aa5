// The first touch of a peer on this host (docs/scale.md, "First touch"):
// with HIXL_SHM_PROCFD on (the default) a rank reads its peers' region
// tables from their boards and opens their heap segments through /proc, so
// touching every peer opens no connection and no descriptor; with it off
// the same works over the sockets.  Either way a free reaches every peer
// that touched the block: afterwards their puts into it are refused.  The
// first put into each peer's first block takes no page fault: init made the
// page tables for it.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mp_util.h"

namespace hixl::test {
namespace {

bool ProcFd() {
  const char* v = std::getenv("HIXL_SHM_PROCFD");
  return !(v && std::string(v) == "0");
}

size_t OpenFds() {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

// Whether the page at p has a page-table entry in this process (present),
// from /proc/self/pagemap (bit 63 of the page's 8-byte entry).
bool PagePresent(const void* p) {
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  uint64_t entry = 0;
  const auto page = reinterpret_cast<uint64_t>(p) / static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const ssize_t got = ::pread(fd, &entry, sizeof entry, static_cast<off_t>(page * sizeof entry));
  ::close(fd);
  return got == static_cast<ssize_t>(sizeof entry) && (entry >> 63) != 0;
}

// How many heaps of peers mapped here (the "hixl-heap" memfd mappings but
// our own, the one holding `mine`) have a page-table entry for the page at
// the offset of `mine` in our heap (the heap is symmetric: theirs is there).
int PeerHeapsWithThePagePresent(const void* mine) {
  std::FILE* f = std::fopen("/proc/self/maps", "re");
  if (!f) return -1;
  struct Heap {
    uint64_t lo, hi;
  };
  std::vector<Heap> heaps;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long lo = 0, hi = 0, off = 0;
    if (std::strstr(line, "memfd:hixl-heap") && std::sscanf(line, "%llx-%llx %*s %llx", &lo, &hi, &off) == 3 &&
        off == 0) {
      heaps.push_back({lo, hi});
    }
  }
  std::fclose(f);
  const auto at = reinterpret_cast<uint64_t>(mine);
  uint64_t offset = UINT64_MAX;
  for (const Heap& h : heaps) {
    if (at >= h.lo && at < h.hi) offset = at - h.lo;
  }
  if (offset == UINT64_MAX) return -1;
  int present = 0;
  for (const Heap& h : heaps) {
    if ((at < h.lo || at >= h.hi) && h.lo + offset < h.hi && PagePresent(reinterpret_cast<void*>(h.lo + offset))) {
      ++present;
    }
  }
  return present;
}

TEST(FirstTouch, EveryPeerIsReachedAndOnlyTheSocketsPathOpensDescriptors) {
  const int n = Size(), me = Rank();
  auto block = g_world->Alloc(sizeof(uint64_t) * static_cast<size_t>(n));
  HIXL_ASSERT_OK(block.status());
  auto* slots = static_cast<uint64_t*>(block.value());
  for (int r = 0; r < n; ++r) slots[r] = ~uint64_t{0};
  HIXL_ASSERT_OK(g_world->Barrier());
  // Peers the barrier has touched already are not counted: from here on,
  // only the puts' first touches.
  const size_t before = OpenFds();
  // The first block from hixl_alloc: init made this process's page tables
  // for it in every peer's heap mapped here (read from their boards), so
  // its first puts take no fault.  Over the sockets the first touch maps
  // the heap.
  if (ProcFd()) {
    EXPECT_EQ(PeerHeapsWithThePagePresent(slots + me), n - 1);
  }
  const uint64_t mine = 0xf1257000u + static_cast<uint64_t>(me);
  for (int k = 1; k < n; ++k) {
    const int peer = (me + k) % n;
    HIXL_ASSERT_OK(g_world->Put(peer, &mine, reinterpret_cast<uint64_t>(slots + me), sizeof(mine)));
  }
  HIXL_ASSERT_OK(g_world->Fence());
  const size_t after = OpenFds();
  HIXL_ASSERT_OK(g_world->Barrier());
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    EXPECT_EQ(slots[r], 0xf1257000u + static_cast<uint64_t>(r)) << "slot of rank " << r;
  }
  if (ProcFd()) {
    EXPECT_EQ(after, before) << "the first touch of " << n - 1 << " peers opened descriptors";
  }
  HIXL_ASSERT_OK(g_world->Barrier());
  HIXL_ASSERT_OK(g_world->Free(slots));
}

TEST(FirstTouch, AFreeReachesEveryPeerThatTouchedTheBlock) {
  const int me = Rank();
  for (int round = 0; round < 3; ++round) {
    auto block = g_world->Alloc(4096);
    HIXL_ASSERT_OK(block.status());
    const auto addr = reinterpret_cast<uint64_t>(block.value());
    HIXL_ASSERT_OK(g_world->Barrier());
    // Everyone touches rank 0's block (reading rank 0's table, holding it).
    const uint64_t v = 7;
    if (me != 0) HIXL_ASSERT_OK(g_world->Put(0, &v, addr + 8 * static_cast<uint64_t>(me), sizeof(v)));
    HIXL_ASSERT_OK(g_world->Fence());
    HIXL_ASSERT_OK(g_world->Barrier());
    // Rank 0 alone frees it: every peer that holds its table hears of it
    // before the free returns.
    if (me == 0) HIXL_ASSERT_OK(g_world->Free(block.value()));
    HIXL_ASSERT_OK(g_world->Barrier());
    if (me != 0) {
      const Status s = g_world->Put(0, &v, addr, sizeof(v));
      EXPECT_EQ(s.code(), Errc::kNotRegistered)
          << "round " << round << ": a put into rank 0's freed block: " << s.ToString();
    }
    HIXL_ASSERT_OK(g_world->Barrier());
    if (me != 0) HIXL_ASSERT_OK(g_world->Free(block.value()));
    HIXL_ASSERT_OK(g_world->Barrier());
  }
}

}  // namespace
}  // namespace hixl::test

// Promotion of registered memory to shared memory (transport/shm/promotion.h)
// and the /proc/self/maps reading it decides with (proc_maps.h).  The tests
// of live memory hold in the plain and the sanitizer builds: where malloc
// puts a block differs between them, so they ask the maps, not the build.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/user_memory.h"
#include "transport/shm/proc_maps.h"
#include "transport/shm/promotion.h"

namespace hixl::transport::shm {
namespace {

const uint64_t kPage = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));

uint64_t U(const void* p) { return reinterpret_cast<uint64_t>(p); }

// How the maps show the page holding addr.
MapsEntry EntryOf(uint64_t addr) {
  std::vector<MapsEntry> e = ReadSelfMaps(addr, addr + 1);
  return e.empty() ? MapsEntry{} : e.front();
}

bool MappedShared(uint64_t addr) { return EntryOf(addr).shared; }

// An anonymous private mapping of n pages, unmapped at the end.
struct Anon {
  explicit Anon(size_t pages) : n(pages * kPage) {
    p = static_cast<uint8_t*>(::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  }
  ~Anon() { ::munmap(p, n); }
  Anon(const Anon&) = delete;
  Anon& operator=(const Anon&) = delete;
  uint8_t* p;
  size_t n;
};

void Fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
}
bool Holds(const uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != static_cast<uint8_t>(seed + i * 7)) return false;
  }
  return true;
}

// ------------------------------------------------------------ parsing

TEST(ProcMaps, ParsesTheKernelsLines) {
  MapsEntry e;
  ASSERT_TRUE(ParseMapsLine("7f12a0000000-7f12a0021000 rw-p 00000000 00:00 0 ", &e));
  EXPECT_EQ(e.start, 0x7f12a0000000u);
  EXPECT_EQ(e.end, 0x7f12a0021000u);
  EXPECT_TRUE(e.read && e.write && !e.exec && !e.shared);
  EXPECT_EQ(e.inode, 0u);
  EXPECT_EQ(e.path, "");
  ASSERT_TRUE(ParseMapsLine("55d0c1a00000-55d0c1a21000 rw-p 00000000 00:00 0                          [heap]", &e));
  EXPECT_EQ(e.path, "[heap]");
  ASSERT_TRUE(ParseMapsLine("7f0000001000-7f0000002000 r-xp 0001a000 fd:01 1234567   /usr/lib/libc.so.6", &e));
  EXPECT_TRUE(e.exec);
  EXPECT_EQ(e.offset, 0x1a000u);
  EXPECT_EQ(e.inode, 1234567u);
  EXPECT_EQ(e.path, "/usr/lib/libc.so.6");
  ASSERT_TRUE(ParseMapsLine("7f0000001000-7f0000002000 rw-s 00000000 00:01 99 /memfd:hixl-reg-3 (deleted)", &e));
  EXPECT_TRUE(e.shared);
  EXPECT_EQ(e.path, "/memfd:hixl-reg-3 (deleted)");
  ASSERT_TRUE(ParseMapsLine("ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]", &e));
  EXPECT_EQ(e.end, 0xffffffffff601000u);
}

TEST(ProcMaps, RefusesMalformedAndHostileLines) {
  MapsEntry e;
  for (const char* bad : {"", "-", "1000-", "1000-2000", "1000-2000 ", "1000-2000 rw-p", "1000-2000 rw-p 0 00:00",
                          "1000-2000 rw-q 0 00:00 0", "1000-2000 rwxpp 0 00:00 0", "1000-2000 zw-p 0 00:00 0",
                          "2000-1000 rw-p 0 00:00 0",                        // end before start
                          "1000-1000 rw-p 0 00:00 0",                        // empty
                          "10000000000000000-2 rw-p 0 00:00 0",              // 17 hex digits
                          "1000-20000000000000000 rw-p 0 00:00 0",           // past 64 bits
                          "1000-2000 rw-p 0 00:00 99999999999999999999999",  // inode past 64 bits
                          "1000-2000 rw-p 0 0000 0", "1000-2000 rw-p 0 00:00 12x /a", "g000-2000 rw-p 0 00:00 0",
                          " 1000-2000 rw-p 0 00:00 0"}) {
    EXPECT_FALSE(ParseMapsLine(bad, &e)) << "'" << bad << "'";
  }
  // A path may hold anything, spaces and brackets included.
  ASSERT_TRUE(ParseMapsLine("1000-2000 rw-p 0 00:00 5 /tmp/a b [heap] (deleted)", &e));
  EXPECT_EQ(e.path, "/tmp/a b [heap] (deleted)");
  // Not NUL-terminated: the parser stays inside the view.
  const std::string line = "1000-2000 rw-p 0 00:00 0XXXX";
  EXPECT_FALSE(ParseMapsLine(std::string_view(line).substr(0, line.size() - 4 - 1), &e));
}

// ------------------------------------------------------------ eligibility

MapsEntry Entry(uint64_t start, uint64_t end, const char* perms, uint64_t inode = 0, const char* path = "") {
  MapsEntry e;
  e.start = start;
  e.end = end;
  e.read = perms[0] == 'r';
  e.write = perms[1] == 'w';
  e.exec = perms[2] == 'x';
  e.shared = perms[3] == 's';
  e.inode = inode;
  e.path = path;
  return e;
}

TEST(ProcMaps, EligibleOnlyWhollyInPrivateAnonymousReadWriteMemory) {
  const uint64_t a = 0x10000, b = 0x20000, c = 0x30000;
  EXPECT_EQ(CheckPromotable({Entry(a, c, "rw-p")}, a, c), Promotable::kYes);
  // Two adjacent anonymous mappings cover it.
  EXPECT_EQ(CheckPromotable({Entry(a, b, "rw-p"), Entry(b, c, "rw-p")}, a, c), Promotable::kYes);
  EXPECT_EQ(CheckPromotable({Entry(a, b, "rw-p")}, a, c), Promotable::kNotMapped);
  EXPECT_EQ(CheckPromotable({Entry(a, b, "rw-p"), Entry(b + kPage, c, "rw-p")}, a, c), Promotable::kNotMapped);
  EXPECT_EQ(CheckPromotable({}, a, c), Promotable::kNotMapped);
  EXPECT_EQ(CheckPromotable({Entry(a, c, "rw-p", 0, "[stack]")}, a, b), Promotable::kStack);
  EXPECT_EQ(CheckPromotable({Entry(a, c, "rw-p", 0, "[heap]")}, a, b), Promotable::kHeap);
  EXPECT_EQ(CheckPromotable({Entry(a, c, "r--p", 0, "[vvar]")}, a, b), Promotable::kSpecial);
  EXPECT_EQ(CheckPromotable({Entry(a, c, "rw-p", 42, "/data/x.bin")}, a, b), Promotable::kFileBacked);
  EXPECT_EQ(CheckPromotable({Entry(a, c, "rw-p", 42, "/anon_hugepage (deleted)")}, a, b), Promotable::kFileBacked);
  EXPECT_EQ(CheckPromotable({Entry(a, c, "rw-s", 7, "/dev/zero (deleted)")}, a, b), Promotable::kFileBacked);
  EXPECT_EQ(CheckPromotable({Entry(a, c, "rw-s")}, a, b), Promotable::kShared);
  EXPECT_EQ(CheckPromotable({Entry(a, c, "r--p")}, a, b), Promotable::kNotWritable);
  EXPECT_EQ(CheckPromotable({Entry(a, c, "rwxp")}, a, b), Promotable::kNotWritable);
  // One bad mapping anywhere in the range is enough.
  EXPECT_EQ(CheckPromotable({Entry(a, b, "rw-p"), Entry(b, c, "rw-p", 0, "[heap]")}, a, c), Promotable::kHeap);
}

// ------------------------------------------------------------ live memory

TEST(Promotion, AnonymousMappingKeepsItsContentsAndBecomesShared) {
  Anon m(8);
  Fill(m.p, m.n, 1);
  ASSERT_FALSE(MappedShared(U(m.p)));
  Result<PromotedRange> pr = Promote(U(m.p), m.n);
  ASSERT_TRUE(pr.ok()) << pr.status().message();
  EXPECT_EQ(pr->lo, U(m.p));
  EXPECT_EQ(pr->hi, U(m.p) + m.n);
  EXPECT_NE(pr->segment_id & kPromotedSegmentBit, 0u);
  EXPECT_TRUE(MappedShared(U(m.p)));
  EXPECT_TRUE(IsPromoted(U(m.p)));
  EXPECT_TRUE(Holds(m.p, m.n, 1));
  // The memfd is the memory: a write through one shows in the other.
  m.p[5] = 0xAB;
  uint8_t byte = 0;
  ASSERT_EQ(::pread(pr->fd, &byte, 1, 5), 1);
  EXPECT_EQ(byte, 0xAB);
  m.p[5] = static_cast<uint8_t>(1 + 5 * 7);
  Unpromote(U(m.p), m.n);
  EXPECT_FALSE(IsPromoted(U(m.p)));
  EXPECT_FALSE(MappedShared(U(m.p)));
  EXPECT_TRUE(Holds(m.p, m.n, 1));
  Fill(m.p, m.n, 9);  // ordinary memory again, writable
  EXPECT_TRUE(Holds(m.p, m.n, 9));
}

TEST(Promotion, UnalignedRangeKeepsItsNeighboursIntactAndWritable) {
  Anon m(6);
  Fill(m.p, m.n, 3);
  // The range starts and ends inside pages: its neighbours in those pages
  // are promoted with it and keep their bytes; the pages outside are not.
  uint8_t* base = m.p + kPage + 100;
  const size_t len = 2 * kPage + 50;
  Result<PromotedRange> pr = Promote(U(base), len);
  ASSERT_TRUE(pr.ok()) << pr.status().message();
  EXPECT_EQ(pr->lo, U(m.p) + kPage);
  EXPECT_EQ(pr->hi, U(m.p) + 4 * kPage);
  EXPECT_FALSE(MappedShared(U(m.p)));
  EXPECT_TRUE(MappedShared(U(m.p) + kPage));
  EXPECT_FALSE(MappedShared(U(m.p) + 4 * kPage));
  EXPECT_TRUE(Holds(m.p, m.n, 3));
  // The owner writes the neighbours (in the promoted pages) and the range.
  m.p[kPage] = 0x11;
  base[len] = 0x22;
  base[0] = 0x33;
  Unpromote(U(base), len);
  EXPECT_EQ(m.p[kPage], 0x11);
  EXPECT_EQ(base[len], 0x22);
  EXPECT_EQ(base[0], 0x33);
  EXPECT_FALSE(MappedShared(U(m.p) + kPage));
}

TEST(Promotion, TwoRegionsInTheSamePagesShareOnePromotion) {
  Anon m(4);
  Fill(m.p, m.n, 5);
  Result<PromotedRange> a = Promote(U(m.p), 4 * kPage);
  ASSERT_TRUE(a.ok()) << a.status().message();
  Result<PromotedRange> b = Promote(U(m.p) + 10, 100);  // inside: one more reference
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(a->segment_id, b->segment_id);
  // Overlapping in part: refused, the memory left as it is.
  Result<PromotedRange> c = Promote(U(m.p) + 3 * kPage, 2 * kPage);
  EXPECT_EQ(c.status().code(), Errc::kUnsupported);
  Unpromote(U(m.p), 4 * kPage);
  EXPECT_TRUE(MappedShared(U(m.p)));  // b still holds it
  Unpromote(U(m.p) + 10, 100);
  EXPECT_FALSE(MappedShared(U(m.p)));
  EXPECT_TRUE(Holds(m.p, m.n, 5));
}

TEST(Promotion, IneligibleMemoryIsLeftAlone) {
  // A stack buffer: the main thread's stack is refused; a thread's stack
  // is anonymous memory to the kernel.  This test runs on the main thread.
  uint8_t on_stack[64];
  std::memset(on_stack, 7, sizeof(on_stack));
  const MapsEntry stack = EntryOf(U(on_stack));
  if (stack.path == "[stack]") {
    Result<PromotedRange> s = Promote(U(on_stack), sizeof(on_stack));
    EXPECT_EQ(s.status().code(), Errc::kUnsupported);
    EXPECT_NE(s.status().message().find("stack"), std::string::npos) << s.status().message();
  }
  // (Under ASan a local may live on a fake stack: then nothing is asserted
  // about it.)
  // A file-backed mapping.
  char path[] = "/tmp/hixl-promotion-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::unlink(path);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(kPage)), 0);
  void* f = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ASSERT_NE(f, MAP_FAILED);
  Result<PromotedRange> r = Promote(U(f), kPage);
  EXPECT_EQ(r.status().code(), Errc::kUnsupported);
  EXPECT_FALSE(IsPromoted(U(f)));
  ::munmap(f, kPage);
  ::close(fd);
  // Shared anonymous and read-only memory.
  void* sh = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(sh, MAP_FAILED);
  EXPECT_EQ(Promote(U(sh), kPage).status().code(), Errc::kUnsupported);
  ::munmap(sh, kPage);
  void* ro = ::mmap(nullptr, kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_EQ(Promote(U(ro), kPage).status().code(), Errc::kUnsupported);
  ::munmap(ro, kPage);
  // A range with a hole.
  Anon m(3);
  ASSERT_EQ(::munmap(m.p + kPage, kPage), 0);
  EXPECT_EQ(Promote(U(m.p), 3 * kPage).status().code(), Errc::kUnsupported);
}

TEST(Promotion, SmallMallocBlockFollowsItsMapping) {
  // Where a small block lies depends on the allocator (the brk heap with
  // glibc, the sanitizer's own anonymous regions under ASan): promoted
  // exactly when its pages are private anonymous memory outside [heap],
  // and in every case its bytes and its neighbours' stay.
  auto* block = static_cast<uint8_t*>(std::malloc(100));
  auto* next = static_cast<uint8_t*>(std::malloc(100));
  ASSERT_TRUE(block && next);
  Fill(block, 100, 4);
  Fill(next, 100, 6);
  const uint64_t lo = U(block) & ~(kPage - 1), hi = (U(block) + 100 + kPage - 1) & ~(kPage - 1);
  const Promotable expect = CheckPromotable(ReadSelfMaps(lo, hi), lo, hi);
  Result<PromotedRange> r = Promote(U(block), 100);
  EXPECT_EQ(r.ok(), expect == Promotable::kYes) << Describe(expect);
  if (EntryOf(U(block)).path == "[heap]") {
    EXPECT_EQ(r.status().code(), Errc::kUnsupported);
  }
  EXPECT_TRUE(Holds(block, 100, 4));
  EXPECT_TRUE(Holds(next, 100, 6));
  Fill(next, 100, 8);  // the allocator and the owner go on using the pages
  auto* more = static_cast<uint8_t*>(std::malloc(64));
  ASSERT_NE(more, nullptr);
  std::memset(more, 1, 64);
  if (r.ok()) Unpromote(U(block), 100);
  EXPECT_TRUE(Holds(block, 100, 4));
  EXPECT_TRUE(Holds(next, 100, 8));
  std::free(more);
  std::free(next);
  std::free(block);
}

TEST(Promotion, LargeMallocBlockIsPromotedAndFreedAfterDeregistration) {
  const size_t n = size_t{8} << 20;  // above every allocator's mmap threshold
  auto* block = static_cast<uint8_t*>(std::malloc(n));
  ASSERT_NE(block, nullptr);
  Fill(block, n, 2);
  Result<PromotedRange> r = Promote(U(block), n);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(Holds(block, n, 2));
  Unpromote(U(block), n);
  EXPECT_TRUE(Holds(block, n, 2));
  std::free(block);
}

TEST(Promotion, FreedBeforeDeregistrationIsLeftAlone) {
  auto* m =
      static_cast<uint8_t*>(::mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  Result<PromotedRange> r = Promote(U(m), 2 * kPage);
  ASSERT_TRUE(r.ok()) << r.status().message();
  // The owner unmaps it and something else is mapped there.
  ASSERT_EQ(::munmap(m, 2 * kPage), 0);
  void* again = ::mmap(m, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (again == m) std::memset(m, 0x5A, 2 * kPage);
  Unpromote(U(m), 2 * kPage);  // must not copy the old contents over it
  if (again == m) {
    EXPECT_EQ(m[0], 0x5A);
    EXPECT_FALSE(MappedShared(U(m)));
    ::munmap(m, 2 * kPage);
  }
  EXPECT_FALSE(IsPromoted(U(m)));
}

// Another thread that writes the pages while they are being promoted loses
// no write: its writes wait until the shared pages are in place (promotion
// holds them with a userfaultfd write-protect while it copies).  Without
// that, a write to a page already copied lands in the private page that the
// shared one then replaces.
TEST(Promotion, WritesByAnotherThreadDuringPromotionAreKept) {
  constexpr size_t kPages = 16384;  // 64 MiB: the copy takes milliseconds
  Anon m(kPages);
  std::memset(m.p, 0, m.n);
  std::vector<uint64_t> last(kPages, 0);  // the writer's own record of what it last wrote to each page
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> written{0};
  std::thread writer([&] {
    size_t page = 0;
    for (uint64_t v = 1; !stop.load(std::memory_order_relaxed); ++v) {
      page = (page + 4099) % kPages;  // hops across the whole range
      {
        // What orders this write after Promote's mmap is the kernel (the
        // write waits on the userfaultfd write-protect until the shared
        // pages are mapped), which ThreadSanitizer cannot see: it would
        // report the write as racing with the mmap (CI of 5b2e076).
        [[maybe_unused]] const base::UserMemory unseen;
        __atomic_store_n(reinterpret_cast<uint64_t*>(m.p + page * kPage), v, __ATOMIC_RELAXED);
      }
      last[page] = v;
      written.store(v, std::memory_order_relaxed);
    }
  });
  while (written.load() < 100000) std::this_thread::yield();
  const uint64_t before = written.load();
  auto r = Promote(U(m.p), m.n);
  const uint64_t during = written.load() - before;
  // A few more writes into the shared pages, then stop.
  while (written.load() < before + during + 1000) std::this_thread::yield();
  stop = true;
  writer.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(MappedShared(U(m.p)));
  size_t lost = 0;
  for (size_t page = 0; page < kPages; ++page) {
    if (__atomic_load_n(reinterpret_cast<uint64_t*>(m.p + page * kPage), __ATOMIC_RELAXED) != last[page]) ++lost;
  }
  EXPECT_EQ(lost, 0u) << "of " << kPages << " pages; the writer wrote " << during << " times during the promotion";
  Unpromote(U(m.p), m.n);
  EXPECT_FALSE(MappedShared(U(m.p)));
}

TEST(Promotion, ForkedChildGetsPrivateCopies) {
  Anon m(4);
  Fill(m.p, m.n, 7);
  Result<PromotedRange> r = Promote(U(m.p), m.n);
  ASSERT_TRUE(r.ok()) << r.status().message();
  int to_child[2], to_parent[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(to_parent), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child sees the contents at the fork in private memory, and its
    // writes stay its own; the parent's later writes do not reach it.
    int ok = Holds(m.p, m.n, 7) && !MappedShared(U(m.p)) && !IsPromoted(U(m.p)) ? 1 : 0;
    m.p[0] = 0x99;
    char c = 0;
    if (::write(to_parent[1], "w", 1) != 1 || ::read(to_child[0], &c, 1) != 1) ok = 0;
    if (m.p[1] != static_cast<uint8_t>(7 + 1 * 7)) ok = 0;
    ::_exit(ok ? 0 : 1);
  }
  char c = 0;
  ASSERT_EQ(::read(to_parent[0], &c, 1), 1);  // the child has written its copy
  EXPECT_EQ(m.p[0], 7);                       // not ours
  m.p[1] = 0x77;                              // not the child's
  ASSERT_EQ(::write(to_child[1], "g", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) ::close(fd);
  EXPECT_TRUE(MappedShared(U(m.p)));  // the parent's stays promoted
  m.p[1] = static_cast<uint8_t>(7 + 1 * 7);
  Unpromote(U(m.p), m.n);
  EXPECT_TRUE(Holds(m.p, m.n, 7));
}

}  // namespace
}  // namespace hixl::transport::shm

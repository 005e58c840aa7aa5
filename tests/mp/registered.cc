// Registered memory as users use it, over whichever transport the
// environment selects (run by every rank of a world, hixlrun -n N): a
// buffer written before it is registered (a tensor), registered at an
// unaligned range whose neighbours in the same pages the owner keeps
// using, written by another thread of the owner while it is being
// registered, forked after registration, and deregistered.  Where the shm
// transport promotes registered memory (HIXL_SHM_PROMOTE, the default)
// the range must be promoted, and deregistration must give ordinary private
// memory back; elsewhere it must be left private (cross-memory attach, the
// relay, UCX).
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "mp_util.h"

namespace hixl::test {
namespace {

const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

// Whether this run promotes registered memory: shm serves the peers (the
// default on one host) and promotion is not turned off.
bool ExpectPromoted() {
  const char* t = std::getenv("HIXL_TRANSPORT");
  const char* p = std::getenv("HIXL_SHM_PROMOTE");
  return (!t || std::string(t) == "shm" || std::string(t) == "auto") && !(p && std::string(p) == "0");
}

// How /proc/self/maps shows the page holding addr: promoted memory is a
// shared mapping of a memfd named hixl-reg-N.
bool MappedPromoted(const void* addr) {
  const auto a = reinterpret_cast<uint64_t>(addr);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    uint64_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
    if (lo <= a && a < hi) return line.find("/memfd:hixl-reg-") != std::string::npos;
  }
  return false;
}

// A private anonymous buffer (as a large malloc, a tensor or a numpy array
// gets), written before anything else happens to it.
struct Buffer {
  explicit Buffer(size_t n) : bytes(n) {
    p = static_cast<uint8_t*>(::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(p, MAP_FAILED);
  }
  ~Buffer() { ::munmap(p, bytes); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint8_t* p;
  size_t bytes;
};

// The region: an odd offset into the buffer's first page to an odd end in
// its last, so that its first and last pages hold the owner's other bytes.
constexpr size_t kHead = 100;
const size_t kLen = 2 * 1024 * 1024 + 37;

TEST(Registered, UnalignedRangeNeighboursStayTheOwnersAndDeregistrationGivesPrivateMemoryBack) {
  const int n = Size(), me = Rank(), next = (me + 1) % n, prev = (me + n - 1) % n;
  Buffer b(kLen + 2 * kPage);
  uint8_t* region = b.p + kHead;
  uint8_t* tail = region + kLen;
  const size_t tail_len = b.bytes - kHead - kLen;
  Fill(b.p, b.bytes, 1000u + static_cast<uint64_t>(me));  // written before it is registered
  HIXL_ASSERT_OK(g_world->RegisterMemory(region, kLen));
  EXPECT_EQ(MappedPromoted(region), ExpectPromoted());
  // The contents survived registration, the neighbours included.
  ASSERT_EQ(FirstMismatch(b.p, b.bytes, 1000u + static_cast<uint64_t>(me)), -1);
  auto all = g_world->Allgather(reinterpret_cast<uint64_t>(region));
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  HIXL_ASSERT_OK(g_world->Barrier());
  // Peers write the region while the owner writes its neighbours.
  std::vector<uint8_t> src(kLen);
  Fill(src.data(), kLen, 2000u + static_cast<uint64_t>(me));
  HIXL_ASSERT_OK(g_world->Put(next, src.data(), all.value()[static_cast<size_t>(next)], kLen));
  std::memset(b.p, 0xA1, kHead);
  std::memset(tail, 0xB2, tail_len);
  HIXL_ASSERT_OK(g_world->Barrier());
  ASSERT_EQ(FirstMismatch(region, kLen, 2000u + static_cast<uint64_t>(prev)), -1) << "the peer's put";
  ASSERT_EQ(FirstNot(b.p, kHead, 0xA1), -1) << "the bytes before the region";
  ASSERT_EQ(FirstNot(tail, tail_len, 0xB2), -1) << "the bytes after the region";
  // A get sees what the owner sees.
  std::vector<uint8_t> got(kLen);
  HIXL_ASSERT_OK(g_world->Get(next, all.value()[static_cast<size_t>(next)], got.data(), kLen));
  HIXL_ASSERT_OK(g_world->Fence());
  ASSERT_EQ(FirstMismatch(got.data(), kLen, 2000u + static_cast<uint64_t>(me)), -1) << "get from rank " << next;
  HIXL_ASSERT_OK(g_world->Barrier());
  // Deregistered: ordinary private memory again, with every byte kept.
  HIXL_ASSERT_OK(g_world->DeregisterMemory(region));
  EXPECT_FALSE(MappedPromoted(region));
  EXPECT_FALSE(MappedPromoted(b.p));
  ASSERT_EQ(FirstMismatch(region, kLen, 2000u + static_cast<uint64_t>(prev)), -1);
  ASSERT_EQ(FirstNot(b.p, kHead, 0xA1), -1);
  ASSERT_EQ(FirstNot(tail, tail_len, 0xB2), -1);
  std::memset(b.p, 0xC3, b.bytes);  // and the owner still writes it all
  ASSERT_EQ(FirstNot(b.p, b.bytes, 0xC3), -1);
  HIXL_ASSERT_OK(g_world->Barrier());
}

// Another thread of the owner keeps writing the buffer while it is being
// registered: no write is lost, and peers read exactly what the owner sees.
TEST(Registered, WritesDuringRegistrationAreKeptAndPeersSeeThem) {
  const int n = Size(), me = Rank(), next = (me + 1) % n;
  const size_t pages = 8192;  // 32 MiB: the copy of a promotion takes a while
  Buffer b(pages * kPage);
  std::memset(b.p, 0, b.bytes);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> written{0};
  std::thread writer([&] {
    size_t page = 0;
    for (uint64_t v = 1; !stop.load(std::memory_order_relaxed); ++v) {
      page = (page + 2053) % pages;
      __atomic_store_n(reinterpret_cast<uint64_t*>(b.p + page * kPage), v, __ATOMIC_RELAXED);
      written.store(v, std::memory_order_relaxed);
    }
  });
  while (written.load() < 10000) std::this_thread::yield();
  Status reg = g_world->RegisterMemory(b.p, b.bytes);
  const uint64_t after = written.load();
  while (written.load() < after + 1000) std::this_thread::yield();
  stop = true;
  writer.join();
  HIXL_ASSERT_OK(reg);
  EXPECT_EQ(MappedPromoted(b.p), ExpectPromoted());
  // The writer's last value in each page: what it wrote last there.  It
  // wrote v to page (v * 2053) mod pages; the last v per page is found by
  // walking back from its final value.
  const uint64_t last = written.load();
  std::vector<uint64_t> want(pages, 0);
  size_t found = 0;
  for (uint64_t v = last; v >= 1 && found < pages; --v) {
    const size_t page = static_cast<size_t>((v % pages) * 2053 % pages);
    if (want[page] == 0) {
      want[page] = v;
      ++found;
    }
  }
  for (size_t page = 0; page < pages; ++page) {
    uint64_t got;
    std::memcpy(&got, b.p + page * kPage, 8);
    ASSERT_EQ(got, want[page]) << "page " << page << ": a write during registration was lost";
  }
  // Peers read the same bytes: every rank checks the next one's first words.
  auto all = g_world->Allgather(reinterpret_cast<uint64_t>(b.p));
  ASSERT_TRUE(all.ok());
  std::vector<uint64_t> mine(pages), theirs(pages);
  for (size_t page = 0; page < pages; ++page) std::memcpy(&mine[page], b.p + page * kPage, 8);
  auto sums = g_world->Allgather(Mix(mine[0] ^ mine[pages / 2] ^ mine[pages - 1]));
  ASSERT_TRUE(sums.ok());
  HIXL_ASSERT_OK(g_world->Barrier());
  const uint64_t base = all.value()[static_cast<size_t>(next)];
  for (size_t page : {size_t{0}, pages / 2, pages - 1}) {
    HIXL_ASSERT_OK(g_world->Get(next, base + page * kPage, &theirs[page], 8));
  }
  HIXL_ASSERT_OK(g_world->Fence());
  EXPECT_EQ(Mix(theirs[0] ^ theirs[pages / 2] ^ theirs[pages - 1]), sums.value()[static_cast<size_t>(next)]);
  HIXL_ASSERT_OK(g_world->Barrier());
  HIXL_ASSERT_OK(g_world->DeregisterMemory(b.p));
}

// fork after registration: the child gets a private copy as it was at the
// fork; the parent's registered memory stays the peers' to write, and
// nothing the child writes reaches the parent or the peers.
TEST(Registered, AForkedChildGetsAPrivateCopy) {
  const int n = Size(), me = Rank(), next = (me + 1) % n, prev = (me + n - 1) % n;
  Buffer b(kLen + 2 * kPage);
  uint8_t* region = b.p + kHead;
  Fill(b.p, b.bytes, 3000u + static_cast<uint64_t>(me));
  HIXL_ASSERT_OK(g_world->RegisterMemory(region, kLen));
  auto all = g_world->Allgather(reinterpret_cast<uint64_t>(region));
  ASSERT_TRUE(all.ok());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: the contents at the fork, private (no hixl call here).
    int rc = FirstMismatch(b.p, b.bytes, 3000u + static_cast<uint64_t>(me)) == -1 ? 0 : 10;
    if (MappedPromoted(region)) rc |= 20;
    std::memset(b.p, 0x5C, b.bytes);
    ::_exit(rc);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: the child saw other bytes; 20: its copy was still shared";
  // The child's writes are not the parent's.
  ASSERT_EQ(FirstMismatch(b.p, b.bytes, 3000u + static_cast<uint64_t>(me)), -1);
  EXPECT_EQ(MappedPromoted(region), ExpectPromoted());
  HIXL_ASSERT_OK(g_world->Barrier());
  std::vector<uint8_t> src(kLen);
  Fill(src.data(), kLen, 4000u + static_cast<uint64_t>(me));
  HIXL_ASSERT_OK(g_world->Put(next, src.data(), all.value()[static_cast<size_t>(next)], kLen));
  HIXL_ASSERT_OK(g_world->Barrier());
  ASSERT_EQ(FirstMismatch(region, kLen, 4000u + static_cast<uint64_t>(prev)), -1);
  HIXL_ASSERT_OK(g_world->Barrier());
  HIXL_ASSERT_OK(g_world->DeregisterMemory(region));
}

}  // namespace
}  // namespace hixl::test

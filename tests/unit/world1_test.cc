// A world of one process, through the public C and C++ APIs (hixl.h,
// hixl.hpp): the init/finalize life cycle, memory, put/get to self, the
// error codes and their messages, and that finalize leaves no thread or
// socket behind.
//
// SetUp removes every variable that could make the process join a bigger
// world.  The "before hixl_init" checks need a process in which hixl was never
// initialised, so they run in a fresh copy of this binary (a "threadsafe"
// death test re-executes it), whatever ran before them here.
#include <dirent.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>
#include <uv.h>

#include <hixl/hixl.h>
#include <hixl/hixl.hpp>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"

extern char** environ;

namespace hixl {
// Lets GoogleTest print "HIXL_ERR_NOT_REGISTERED" instead of the enum's bytes.
inline void PrintTo(Errc code, std::ostream* os) { *os << ErrcName(static_cast<int>(code)); }
}  // namespace hixl

namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string LastError() { return hixl_last_error(); }
uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// Entries of a /proc directory (".", ".." excluded); -1 if unreadable.
int CountEntries(const char* dir) {
  DIR* d = ::opendir(dir);
  if (!d) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++n;
  }
  ::closedir(d);
  return n;
}

int CountThreads() { return CountEntries("/proc/self/task"); }

// Open file descriptors of this process that are sockets.
int CountSockets() {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[256] = {};
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    ssize_t k = ::readlink(path.c_str(), target, sizeof(target) - 1);
    if (k > 0 && std::strncmp(target, "socket:", 7) == 0) ++n;
  }
  ::closedir(d);
  return n;
}

// What each open descriptor of this process is ("fd -> target", one a line):
// a leak is named, not just counted.
std::string OpenFds() {
  std::string out;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[256] = {};
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    ::readlink(path.c_str(), target, sizeof(target) - 1);
    out += std::string(e->d_name) + " -> " + target + "\n";
  }
  ::closedir(d);
  return out;
}

class World1Test : public ::testing::Test {
 protected:
  void SetUp() override {
    // Nothing may describe a bigger world.
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "MPI_LOCALRANKID",
                          "HIXL_TRANSPORT", "HIXL_SHM_CMA", "HIXL_LOG_LEVEL", "HIXL_TIMEOUT_MS"}) {
      ::unsetenv(v);
    }
    std::vector<std::string> names;
    for (char** e = environ; e && *e; ++e) {
      std::string kv = *e;
      std::string name = kv.substr(0, kv.find('='));
      if (name.rfind("OMPI_", 0) == 0 || name.rfind("PMI_", 0) == 0 || name.rfind("SLURM_", 0) == 0) {
        names.push_back(name);
      }
    }
    for (const std::string& n : names) ::unsetenv(n.c_str());
  }

  void TearDown() override {
    // Leave no world behind for the next test, even when this one failed.
    if (hixl_rank() >= 0) {
      EXPECT_EQ(hixl_finalize(), HIXL_SUCCESS) << LastError();
    }
  }

  static void Init() { ASSERT_EQ(hixl_init(), HIXL_SUCCESS) << LastError(); }
};

// ------------------------------------------------------------ life cycle

// Every C entry point that needs a world, called without one.  Returns the
// mismatches in words ("" if none); `when` is "before hixl_init" or "after
// hixl_finalize".
std::string CheckAllNotInitialized(const std::string& when) {
  std::string bad;
  auto expect = [&](const char* api, int rc) {
    const std::string msg = hixl_last_error();
    if (rc != HIXL_ERR_NOT_INITIALIZED) bad += fmt::format("{} returned {}, not HIXL_ERR_NOT_INITIALIZED\n", api, rc);
    if (msg.find(api) == std::string::npos || msg.find(when) == std::string::npos) {
      bad += fmt::format("{}: hixl_last_error() is '{}', which does not name {} and '{}'\n", api, msg, api, when);
    }
  };
  char buf[64] = {};
  char out[64] = {};
  expect("hixl_rank", hixl_rank());
  expect("hixl_world_size", hixl_world_size());
  void* p = hixl_alloc(64);
  expect("hixl_alloc", p == nullptr ? HIXL_ERR_NOT_INITIALIZED : 0);
  expect("hixl_free", hixl_free(buf));
  expect("hixl_register_memory", hixl_register_memory(buf, sizeof(buf)));
  expect("hixl_deregister_memory", hixl_deregister_memory(buf));
  expect("hixl_put", hixl_put(0, out, Addr(buf), sizeof(buf)));
  expect("hixl_get", hixl_get(0, Addr(buf), out, sizeof(out)));
  expect("hixl_fence", hixl_fence());
  expect("hixl_barrier", hixl_barrier());
  expect("hixl_allgather", hixl_allgather(buf, out, 8));
  return bad;
}

// The checks of EverythingFailsBeforeInit, run in a fresh process.
std::string CheckBeforeInit() {
  std::string bad = CheckAllNotInitialized("before hixl_init");
  if (hixl_finalize() != HIXL_ERR_NOT_INITIALIZED ||
      std::string(hixl_last_error()).find("hixl_finalize called before hixl_init") == std::string::npos) {
    bad += fmt::format("hixl_finalize before init: '{}'\n", hixl_last_error());
  }
  // The C++ API says the same.
  hixl::Result<hixl::Registration> reg = hixl::Registration::Make(&bad, sizeof(bad));
  if (reg.ok() || reg.status().code() != hixl::Errc::kNotInitialized ||
      reg.status().message().find("before hixl_init") == std::string::npos) {
    bad += "Registration::Make before init: " + reg.status().ToString() + "\n";
  }
  return bad;
}

TEST_F(World1Test, EverythingFailsBeforeInit) {
  // A fresh process (the threadsafe style re-executes this binary for the
  // death test): hixl has never been initialised there.  The child exits 0
  // when every check passed, else 1 after printing what failed.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const std::string bad = CheckBeforeInit();
        std::fputs(bad.c_str(), stderr);
        std::fflush(stderr);
        ::_exit(bad.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(World1Test, EverythingFailsAfterFinalize) {
  ASSERT_NO_FATAL_FAILURE(Init());
  ASSERT_EQ(hixl_finalize(), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(CheckAllNotInitialized("after hixl_finalize"), "");
  // A second finalize is refused too, and says why.
  EXPECT_EQ(hixl_finalize(), HIXL_ERR_NOT_INITIALIZED);
  EXPECT_THAT(LastError(), HasSubstr("hixl_finalize called twice"));
}

// Malformed transport settings fail hixl_init as a bad environment, naming
// the variable (HIXL_SHM_CMA is parsed by the shm transport, HIXL_TRANSPORT
// checked against the transports built in); the next try works.
TEST_F(World1Test, BadTransportVariablesFailInit) {
  ::setenv("HIXL_SHM_CMA", "maybe", 1);
  EXPECT_EQ(hixl_init(), HIXL_ERR_BOOTSTRAP);
  EXPECT_NE(std::string(LastError()).find("HIXL_SHM_CMA='maybe'"), std::string::npos) << LastError();
  ::unsetenv("HIXL_SHM_CMA");
  ::setenv("HIXL_TRANSPORT", "bogus", 1);
  EXPECT_EQ(hixl_init(), HIXL_ERR_BOOTSTRAP);
  EXPECT_NE(std::string(LastError()).find("HIXL_TRANSPORT='bogus'"), std::string::npos) << LastError();
  EXPECT_NE(std::string(LastError()).find("shm"), std::string::npos) << LastError();
  ::unsetenv("HIXL_TRANSPORT");
  Init();
}

TEST_F(World1Test, InitTwiceThenReinit) {
  ASSERT_NO_FATAL_FAILURE(Init());
  EXPECT_EQ(hixl_init(), HIXL_ERR_ALREADY_INITIALIZED);
  EXPECT_THAT(LastError(), HasSubstr("hixl_init called twice"));
  // The first world is still fine.
  EXPECT_EQ(hixl_rank(), 0);
  EXPECT_EQ(hixl_barrier(), HIXL_SUCCESS) << LastError();
  ASSERT_EQ(hixl_finalize(), HIXL_SUCCESS) << LastError();

  // Init after finalize works, more than once.
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(hixl_init(), HIXL_SUCCESS) << "round " << round << ": " << LastError();
    EXPECT_EQ(hixl_rank(), 0);
    EXPECT_EQ(hixl_world_size(), 1);
    void* p = hixl_alloc(256);
    ASSERT_NE(p, nullptr) << LastError();
    std::memset(p, round, 256);
    EXPECT_EQ(hixl_free(p), HIXL_SUCCESS) << LastError();
    ASSERT_EQ(hixl_finalize(), HIXL_SUCCESS) << LastError();
    EXPECT_EQ(hixl_rank(), HIXL_ERR_NOT_INITIALIZED);
  }
}

TEST_F(World1Test, WorldOfOne) {
  ASSERT_NO_FATAL_FAILURE(Init());
  EXPECT_EQ(hixl_rank(), 0);
  EXPECT_EQ(hixl_world_size(), 1);
  EXPECT_EQ(hixl_fence(), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_barrier(), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_barrier(), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_fence(), HIXL_SUCCESS) << LastError();
}

// --------------------------------------------------------------- memory

TEST_F(World1Test, AllocAndFree) {
  ASSERT_NO_FATAL_FAILURE(Init());
  std::vector<void*> blocks;
  for (size_t n : {size_t{1}, size_t{64}, size_t{1000}, size_t{1} << 20}) {
    void* p = hixl_alloc(n);
    ASSERT_NE(p, nullptr) << n << ": " << LastError();
    EXPECT_EQ(Addr(p) % 64, 0u) << p;
    std::memset(p, 0x33, n);
    EXPECT_EQ(static_cast<unsigned char*>(p)[n - 1], 0x33);
    blocks.push_back(p);
  }
  for (void* p : blocks) EXPECT_EQ(hixl_free(p), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_free(nullptr), HIXL_SUCCESS);

  EXPECT_EQ(hixl_alloc(0), nullptr);
  EXPECT_THAT(LastError(), HasSubstr("hixl_alloc"));
  EXPECT_THAT(LastError(), HasSubstr("0 bytes"));
}

TEST_F(World1Test, FreeRefusesWhatItDidNotAllocate) {
  ASSERT_NO_FATAL_FAILURE(Init());
  void* p = hixl_alloc(512);
  ASSERT_NE(p, nullptr) << LastError();
  // Inside a block, but not its start.
  EXPECT_EQ(hixl_free(static_cast<char*>(p) + 64), HIXL_ERR_INVALID_ARG);
  EXPECT_THAT(LastError(), HasSubstr("hixl_free"));
  // Registered (not symmetric) memory.
  std::vector<char> buf(256);
  ASSERT_EQ(hixl_register_memory(buf.data(), buf.size()), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_free(buf.data()), HIXL_ERR_INVALID_ARG);
  EXPECT_THAT(LastError(), HasSubstr("hixl_free"));
  EXPECT_THAT(LastError(), HasSubstr("not symmetric memory"));
  // The registration survived the refused free.
  const char src[8] = "regmem";
  EXPECT_EQ(hixl_put(0, src, Addr(buf.data()), sizeof(src)), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_fence(), HIXL_SUCCESS);
  EXPECT_STREQ(buf.data(), "regmem");
  EXPECT_EQ(hixl_deregister_memory(buf.data()), HIXL_SUCCESS) << LastError();
  // Double free.
  EXPECT_EQ(hixl_free(p), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_free(p), HIXL_ERR_INVALID_ARG);
  EXPECT_THAT(LastError(), HasSubstr(fmt::format("{}", p)));
}

// Puts a pattern into [dst, dst+n) of rank 0 (this process) through the
// API, reads it back with get, and checks both; also that the bytes just
// outside the range were not touched (guard bytes of 0xEE around it).
void PutGetSelf(char* dst, size_t n, unsigned char seed) {
  std::vector<unsigned char> src(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(seed + i * 7);
  ASSERT_EQ(hixl_put(0, src.data(), Addr(dst), n), HIXL_SUCCESS) << LastError();
  ASSERT_EQ(hixl_fence(), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(std::memcmp(dst, src.data(), n), 0);
  ASSERT_EQ(hixl_get(0, Addr(dst), back.data(), n), HIXL_SUCCESS) << LastError();
  ASSERT_EQ(hixl_fence(), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(back, src);
}

TEST_F(World1Test, PutGetSelfSymmetricMemory) {
  ASSERT_NO_FATAL_FAILURE(Init());
  auto* p = static_cast<char*>(hixl_alloc(4096));
  ASSERT_NE(p, nullptr) << LastError();
  std::memset(p, 0xEE, 4096);
  PutGetSelf(p + 100, 1000, 1);
  EXPECT_EQ(static_cast<unsigned char>(p[99]), 0xEE);
  EXPECT_EQ(static_cast<unsigned char>(p[1100]), 0xEE);
  PutGetSelf(p, 4096, 2);  // the whole block
  EXPECT_EQ(hixl_free(p), HIXL_SUCCESS) << LastError();
}

TEST_F(World1Test, PutGetSelfMallocStackAndMmapMemory) {
  ASSERT_NO_FATAL_FAILURE(Init());
  // malloc'd memory.
  std::vector<char> heap(8192, static_cast<char>(0xEE));
  ASSERT_EQ(hixl_register_memory(heap.data() + 1024, 4096), HIXL_SUCCESS) << LastError();
  PutGetSelf(heap.data() + 1024, 4096, 3);
  PutGetSelf(heap.data() + 2000, 100, 4);
  EXPECT_EQ(static_cast<unsigned char>(heap[1023]), 0xEE);
  EXPECT_EQ(static_cast<unsigned char>(heap[1024 + 4096]), 0xEE);

  // Stack memory.
  std::array<char, 512> stack;
  stack.fill(static_cast<char>(0xEE));
  ASSERT_EQ(hixl_register_memory(stack.data() + 128, 256), HIXL_SUCCESS) << LastError();
  PutGetSelf(stack.data() + 128, 256, 5);
  EXPECT_EQ(static_cast<unsigned char>(stack[127]), 0xEE);
  EXPECT_EQ(static_cast<unsigned char>(stack[384]), 0xEE);

  // An anonymous mapping.
  const size_t len = 3 * 4096;
  void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED) << std::strerror(errno);
  std::memset(m, 0xEE, len);
  ASSERT_EQ(hixl_register_memory(m, len), HIXL_SUCCESS) << LastError();
  PutGetSelf(static_cast<char*>(m), len, 6);
  PutGetSelf(static_cast<char*>(m) + 4000, 200, 7);  // across a page boundary

  // Get from registered memory into unregistered local memory is fine: only
  // the remote side must be registered.
  char local[16] = {};
  EXPECT_EQ(hixl_get(0, Addr(m), local, sizeof(local)), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(std::memcmp(local, m, sizeof(local)), 0);

  EXPECT_EQ(hixl_deregister_memory(m), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_deregister_memory(stack.data() + 128), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_deregister_memory(heap.data() + 1024), HIXL_SUCCESS) << LastError();
  ::munmap(m, len);
}

TEST_F(World1Test, PutToUnregisteredMemoryIsNotRegistered) {
  ASSERT_NO_FATAL_FAILURE(Init());
  std::vector<unsigned char> target(256, 0xEE);
  const unsigned char src[32] = {1, 2, 3};
  const uint64_t addr = Addr(target.data() + 64);
  EXPECT_EQ(hixl_put(0, src, addr, sizeof(src)), HIXL_ERR_NOT_REGISTERED);
  const std::string msg = LastError();
  EXPECT_THAT(msg, StartsWith("Remote memory not registered"));
  EXPECT_THAT(msg, HasSubstr("rank 0"));
  EXPECT_THAT(msg, HasSubstr(fmt::format("{:#x}", addr)));
  EXPECT_THAT(msg, HasSubstr("32 bytes"));
  EXPECT_THAT(msg, HasSubstr("hixl_put"));
  EXPECT_EQ(hixl_fence(), HIXL_SUCCESS);
  for (unsigned char c : target) ASSERT_EQ(c, 0xEE) << "a refused put wrote memory";

  // A get from there is refused the same way, and leaves dst alone.
  std::vector<unsigned char> dst(32, 0x11);
  EXPECT_EQ(hixl_get(0, addr, dst.data(), dst.size()), HIXL_ERR_NOT_REGISTERED);
  EXPECT_THAT(LastError(), StartsWith("Remote memory not registered"));
  EXPECT_THAT(LastError(), HasSubstr("hixl_get"));
  for (unsigned char c : dst) ASSERT_EQ(c, 0x11);
}

TEST_F(World1Test, RangeMustLieInsideOneRegion) {
  ASSERT_NO_FATAL_FAILURE(Init());
  std::vector<unsigned char> target(512, 0xEE);
  unsigned char* a = target.data() + 64;   // [64, 192)
  unsigned char* b = target.data() + 192;  // [192, 320), adjacent
  ASSERT_EQ(hixl_register_memory(a, 128), HIXL_SUCCESS) << LastError();
  ASSERT_EQ(hixl_register_memory(b, 128), HIXL_SUCCESS) << LastError();
  std::vector<unsigned char> src(64, 0x42);
  // Straddles the end of b, the start of a, and the boundary between them.
  for (unsigned char* at : {b + 100, a - 16, a + 100}) {
    EXPECT_EQ(hixl_put(0, src.data(), Addr(at), src.size()), HIXL_ERR_NOT_REGISTERED) << at - target.data();
    EXPECT_THAT(LastError(), StartsWith("Remote memory not registered"));
    EXPECT_THAT(LastError(), HasSubstr(fmt::format("{:#x}", Addr(at))));
  }
  EXPECT_EQ(hixl_fence(), HIXL_SUCCESS);
  for (unsigned char c : target) ASSERT_EQ(c, 0xEE) << "a refused put wrote memory";
  // Exactly each region is fine.
  EXPECT_EQ(hixl_put(0, src.data(), Addr(b + 64), 64), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_fence(), HIXL_SUCCESS);
  EXPECT_EQ(b[64], 0x42);
  EXPECT_EQ(b[127], 0x42);
  EXPECT_EQ(b[63], 0xEE);
  EXPECT_EQ(b[128], 0xEE);
  EXPECT_EQ(hixl_deregister_memory(a), HIXL_SUCCESS);
  EXPECT_EQ(hixl_deregister_memory(b), HIXL_SUCCESS);
}

TEST_F(World1Test, PutAfterDeregisterIsNotRegistered) {
  ASSERT_NO_FATAL_FAILURE(Init());
  std::vector<char> buf(128, 0);
  const char src[4] = {'a', 'b', 'c', 'd'};
  ASSERT_EQ(hixl_register_memory(buf.data(), buf.size()), HIXL_SUCCESS) << LastError();
  ASSERT_EQ(hixl_put(0, src, Addr(buf.data() + 8), 4), HIXL_SUCCESS) << LastError();
  ASSERT_EQ(hixl_fence(), HIXL_SUCCESS);
  EXPECT_EQ(buf[8], 'a');
  ASSERT_EQ(hixl_deregister_memory(buf.data()), HIXL_SUCCESS) << LastError();
  buf[8] = 0;
  EXPECT_EQ(hixl_put(0, src, Addr(buf.data() + 8), 4), HIXL_ERR_NOT_REGISTERED);
  EXPECT_THAT(LastError(), StartsWith("Remote memory not registered"));
  EXPECT_EQ(hixl_fence(), HIXL_SUCCESS);
  EXPECT_EQ(buf[8], 0);
  // Registering again brings it back.
  ASSERT_EQ(hixl_register_memory(buf.data(), buf.size()), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_put(0, src, Addr(buf.data() + 8), 4), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_fence(), HIXL_SUCCESS);
  EXPECT_EQ(buf[8], 'a');
  EXPECT_EQ(hixl_deregister_memory(buf.data()), HIXL_SUCCESS) << LastError();
}

TEST_F(World1Test, PutAfterFreeIsNotRegistered) {
  ASSERT_NO_FATAL_FAILURE(Init());
  auto* p = static_cast<char*>(hixl_alloc(1024));
  ASSERT_NE(p, nullptr) << LastError();
  const char src[4] = {'w', 'x', 'y', 'z'};
  ASSERT_EQ(hixl_put(0, src, Addr(p + 16), 4), HIXL_SUCCESS) << LastError();
  ASSERT_EQ(hixl_fence(), HIXL_SUCCESS);
  EXPECT_EQ(p[16], 'w');
  ASSERT_EQ(hixl_free(p), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_put(0, src, Addr(p + 16), 4), HIXL_ERR_NOT_REGISTERED);
  EXPECT_THAT(LastError(), StartsWith("Remote memory not registered"));
  EXPECT_THAT(LastError(), HasSubstr(fmt::format("{:#x}", Addr(p + 16))));
  char back[4] = {};
  EXPECT_EQ(hixl_get(0, Addr(p + 16), back, 4), HIXL_ERR_NOT_REGISTERED);
}

TEST_F(World1Test, DuplicateRegistrationCountsReferences) {
  ASSERT_NO_FATAL_FAILURE(Init());
  std::vector<char> buf(64, 0);
  const char src[2] = {'o', 'k'};
  ASSERT_EQ(hixl_register_memory(buf.data(), buf.size()), HIXL_SUCCESS) << LastError();
  ASSERT_EQ(hixl_register_memory(buf.data(), buf.size()), HIXL_SUCCESS) << LastError();
  ASSERT_EQ(hixl_deregister_memory(buf.data()), HIXL_SUCCESS) << LastError();
  // One reference is left: still reachable.
  EXPECT_EQ(hixl_put(0, src, Addr(buf.data()), 2), HIXL_SUCCESS) << LastError();
  ASSERT_EQ(hixl_deregister_memory(buf.data()), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_put(0, src, Addr(buf.data()), 2), HIXL_ERR_NOT_REGISTERED);
  EXPECT_EQ(hixl_deregister_memory(buf.data()), HIXL_ERR_INVALID_ARG);
}

TEST_F(World1Test, BadRanks) {
  ASSERT_NO_FATAL_FAILURE(Init());
  std::vector<char> buf(64, 0);
  ASSERT_EQ(hixl_register_memory(buf.data(), buf.size()), HIXL_SUCCESS) << LastError();
  char src[8] = {};
  for (int rank : {-1, 1, 2, std::numeric_limits<int>::max(), std::numeric_limits<int>::min()}) {
    EXPECT_EQ(hixl_put(rank, src, Addr(buf.data()), 8), HIXL_ERR_INVALID_RANK) << rank;
    EXPECT_THAT(LastError(), HasSubstr(fmt::format("rank {}", rank)));
    EXPECT_THAT(LastError(), HasSubstr("[0, 1)"));
    EXPECT_EQ(hixl_get(rank, Addr(buf.data()), src, 8), HIXL_ERR_INVALID_RANK) << rank;
    // Even a transfer of no bytes names a bad rank.
    EXPECT_EQ(hixl_put(rank, src, Addr(buf.data()), 0), HIXL_ERR_INVALID_RANK) << rank;
    EXPECT_EQ(hixl_get(rank, Addr(buf.data()), src, 0), HIXL_ERR_INVALID_RANK) << rank;
  }
  EXPECT_EQ(hixl_deregister_memory(buf.data()), HIXL_SUCCESS);
}

TEST_F(World1Test, BadArguments) {
  ASSERT_NO_FATAL_FAILURE(Init());
  std::vector<char> buf(64, 0);
  ASSERT_EQ(hixl_register_memory(buf.data(), buf.size()), HIXL_SUCCESS) << LastError();
  char local[16] = {};
  EXPECT_EQ(hixl_put(0, nullptr, Addr(buf.data()), 8), HIXL_ERR_INVALID_ARG);
  EXPECT_THAT(LastError(), HasSubstr("NULL"));
  EXPECT_EQ(hixl_get(0, Addr(buf.data()), nullptr, 8), HIXL_ERR_INVALID_ARG);
  EXPECT_THAT(LastError(), HasSubstr("NULL"));
  // dst_addr + size wraps around.
  const uint64_t top = std::numeric_limits<uint64_t>::max() - 4;
  EXPECT_EQ(hixl_put(0, local, top, sizeof(local)), HIXL_ERR_INVALID_ARG);
  EXPECT_THAT(LastError(), HasSubstr("wraps around"));
  EXPECT_EQ(hixl_get(0, top, local, sizeof(local)), HIXL_ERR_INVALID_ARG);
  EXPECT_THAT(LastError(), HasSubstr("wraps around"));
  EXPECT_EQ(hixl_put(0, local, Addr(buf.data()), std::numeric_limits<size_t>::max()), HIXL_ERR_INVALID_ARG);
  EXPECT_EQ(hixl_put(0, local, 0, 8), HIXL_ERR_INVALID_ARG);  // remote address 0
  EXPECT_EQ(hixl_deregister_memory(buf.data()), HIXL_SUCCESS);
}

TEST_F(World1Test, ZeroByteTransfersAreNoOps) {
  ASSERT_NO_FATAL_FAILURE(Init());
  char local[4] = {};
  EXPECT_EQ(hixl_put(0, local, 0x1000, 0), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_get(0, 0x1000, local, 0), HIXL_SUCCESS) << LastError();
}

TEST_F(World1Test, RegisterBadArguments) {
  ASSERT_NO_FATAL_FAILURE(Init());
  std::vector<char> buf(256, 0);
  EXPECT_EQ(hixl_register_memory(nullptr, 16), HIXL_ERR_INVALID_ARG);
  EXPECT_THAT(LastError(), HasSubstr("NULL"));
  EXPECT_EQ(hixl_register_memory(buf.data(), 0), HIXL_ERR_INVALID_ARG);
  EXPECT_THAT(LastError(), HasSubstr("size is 0"));
  EXPECT_EQ(hixl_register_memory(buf.data(), std::numeric_limits<size_t>::max()), HIXL_ERR_INVALID_ARG);
  EXPECT_THAT(LastError(), HasSubstr("wraps around"));

  ASSERT_EQ(hixl_register_memory(buf.data(), 128), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_register_memory(buf.data() + 64, 128), HIXL_ERR_INVALID_ARG);  // overlaps the end
  EXPECT_THAT(LastError(), HasSubstr("overlaps"));
  EXPECT_THAT(LastError(), HasSubstr(fmt::format("{:#x}", Addr(buf.data()))));
  EXPECT_EQ(hixl_register_memory(buf.data(), 64), HIXL_ERR_INVALID_ARG);                // same start, shorter
  EXPECT_EQ(hixl_register_memory(buf.data() + 8, 8), HIXL_ERR_INVALID_ARG);             // inside
  EXPECT_EQ(hixl_register_memory(buf.data() + 128, 128), HIXL_SUCCESS) << LastError();  // adjacent

  // Symmetric memory is registered already: its range cannot be again.
  void* p = hixl_alloc(256);
  ASSERT_NE(p, nullptr) << LastError();
  EXPECT_EQ(hixl_register_memory(p, 256), HIXL_ERR_INVALID_ARG);
  EXPECT_THAT(LastError(), HasSubstr("symmetric heap"));
  EXPECT_EQ(hixl_register_memory(static_cast<char*>(p) + 64, 16), HIXL_ERR_INVALID_ARG);

  EXPECT_EQ(hixl_deregister_memory(buf.data()), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_deregister_memory(buf.data() + 128), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_free(p), HIXL_SUCCESS) << LastError();
}

TEST_F(World1Test, DeregisterBadArguments) {
  ASSERT_NO_FATAL_FAILURE(Init());
  std::vector<char> buf(128, 0);
  EXPECT_EQ(hixl_deregister_memory(nullptr), HIXL_ERR_INVALID_ARG);
  EXPECT_EQ(hixl_deregister_memory(buf.data()), HIXL_ERR_INVALID_ARG);  // never registered
  EXPECT_THAT(LastError(), HasSubstr("hixl_deregister_memory"));
  EXPECT_THAT(LastError(), HasSubstr(fmt::format("{:#x}", Addr(buf.data()))));
  ASSERT_EQ(hixl_register_memory(buf.data(), 128), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_deregister_memory(buf.data() + 8), HIXL_ERR_INVALID_ARG);  // not the start
  void* p = hixl_alloc(64);
  ASSERT_NE(p, nullptr) << LastError();
  EXPECT_EQ(hixl_deregister_memory(p), HIXL_ERR_INVALID_ARG);  // symmetric memory
  EXPECT_THAT(LastError(), HasSubstr("hixl_free"));
  EXPECT_EQ(hixl_deregister_memory(buf.data()), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_free(p), HIXL_SUCCESS) << LastError();
}

TEST_F(World1Test, AllgatherInAWorldOfOneCopies) {
  ASSERT_NO_FATAL_FAILURE(Init());
  const char send[24] = "twenty-three characters";
  char recv[24];
  std::memset(recv, 'x', sizeof(recv));
  ASSERT_EQ(hixl_allgather(send, recv, sizeof(send)), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(std::memcmp(send, recv, sizeof(send)), 0);
  // Again (a new round), with other data.
  const uint64_t v = 0x1122334455667788ull;
  uint64_t out = 0;
  ASSERT_EQ(hixl_allgather(&v, &out, sizeof(v)), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(out, v);
  EXPECT_EQ(hixl_allgather(send, recv, 0), HIXL_SUCCESS);
  EXPECT_EQ(hixl_allgather(nullptr, recv, 8), HIXL_ERR_INVALID_ARG);
  EXPECT_EQ(hixl_allgather(send, nullptr, 8), HIXL_ERR_INVALID_ARG);
}

TEST_F(World1Test, LastErrorIsPerThread) {
  ASSERT_NO_FATAL_FAILURE(Init());
  char src[8] = {};
  std::string other;
  EXPECT_EQ(hixl_put(5, src, 0x1000, 8), HIXL_ERR_INVALID_RANK);
  std::thread t([&] {
    other = hixl_last_error();  // nothing failed on this thread yet
    EXPECT_EQ(hixl_put(0, nullptr, 0x1000, 8), HIXL_ERR_INVALID_ARG);
    other.append("|").append(hixl_last_error());
  });
  t.join();
  EXPECT_THAT(LastError(), HasSubstr("rank 5"));
  EXPECT_THAT(other, StartsWith("|"));
  EXPECT_THAT(other, HasSubstr("NULL"));
}

TEST_F(World1Test, ConcurrentPutsAndGetsToSelf) {
  ASSERT_NO_FATAL_FAILURE(Init());
  constexpr int kThreads = 4;
  constexpr size_t kSlice = 4096;
  auto* sym = static_cast<unsigned char*>(hixl_alloc(kThreads * kSlice));
  ASSERT_NE(sym, nullptr) << LastError();
  std::vector<unsigned char> reg(kThreads * kSlice, 0);
  ASSERT_EQ(hixl_register_memory(reg.data(), reg.size()), HIXL_SUCCESS) << LastError();
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<unsigned char> src(kSlice), back(kSlice);
      for (int round = 0; round < 200; ++round) {
        std::memset(src.data(), t * 16 + round % 16, kSlice);
        const size_t off = static_cast<size_t>(t) * kSlice;
        if (hixl_put(0, src.data(), Addr(sym + off), kSlice) != HIXL_SUCCESS) ++failures[t];
        if (hixl_put(0, src.data(), Addr(reg.data() + off), kSlice) != HIXL_SUCCESS) ++failures[t];
        if (hixl_fence() != HIXL_SUCCESS) ++failures[t];
        if (hixl_get(0, Addr(sym + off), back.data(), kSlice) != HIXL_SUCCESS || back != src) ++failures[t];
        if (hixl_get(0, Addr(reg.data() + off), back.data(), kSlice) != HIXL_SUCCESS || back != src) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
  EXPECT_EQ(hixl_deregister_memory(reg.data()), HIXL_SUCCESS);
  EXPECT_EQ(hixl_free(sym), HIXL_SUCCESS);
}

// -------------------------------------------------------------- strerror

TEST(World1StrerrorTest, EveryCodeHasItsName) {
  const std::pair<int, const char*> codes[] = {
      {HIXL_SUCCESS, "HIXL_SUCCESS"},
      {HIXL_ERR_INVALID_ARG, "HIXL_ERR_INVALID_ARG"},
      {HIXL_ERR_NOT_INITIALIZED, "HIXL_ERR_NOT_INITIALIZED"},
      {HIXL_ERR_NOT_REGISTERED, "HIXL_ERR_NOT_REGISTERED"},
      {HIXL_ERR_INVALID_RANK, "HIXL_ERR_INVALID_RANK"},
      {HIXL_ERR_TIMEOUT, "HIXL_ERR_TIMEOUT"},
      {HIXL_ERR_PEER_FAILED, "HIXL_ERR_PEER_FAILED"},
      {HIXL_ERR_NO_MEMORY, "HIXL_ERR_NO_MEMORY"},
      {HIXL_ERR_TRANSPORT, "HIXL_ERR_TRANSPORT"},
      {HIXL_ERR_UNSUPPORTED, "HIXL_ERR_UNSUPPORTED"},
      {HIXL_ERR_ALREADY_INITIALIZED, "HIXL_ERR_ALREADY_INITIALIZED"},
      {HIXL_ERR_BOOTSTRAP, "HIXL_ERR_BOOTSTRAP"},
      {HIXL_ERR_INTERNAL, "HIXL_ERR_INTERNAL"},
  };
  for (const auto& [code, name] : codes) {
    const char* s = hixl_strerror(code);
    ASSERT_NE(s, nullptr) << code;
    // "NAME: ..." (not just a prefix of a longer name).
    EXPECT_THAT(std::string(s), StartsWith(std::string(name) + ":")) << code;
    // The C++ names agree.
    EXPECT_THAT(hixl::Status(static_cast<hixl::Errc>(code), "m").ToString(),
                code == HIXL_SUCCESS ? StartsWith("HIXL_SUCCESS") : StartsWith(std::string(name) + ": m"));
  }
  for (int unknown : {1, -13, -100, std::numeric_limits<int>::min()}) {
    ASSERT_NE(hixl_strerror(unknown), nullptr) << unknown;
    EXPECT_GT(std::strlen(hixl_strerror(unknown)), 0u);
  }
}

// --------------------------------------------------------------- C++ API

TEST_F(World1Test, CxxWorldAndRegistration) {
  hixl::Result<hixl::World> r = hixl::World::Init();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_TRUE(r.status().ok());
  hixl::World w = std::move(r).value();
  EXPECT_EQ(w.rank(), 0);
  EXPECT_EQ(w.size(), 1);

  // A second world is refused while this one lives.
  hixl::Result<hixl::World> again = hixl::World::Init();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), hixl::Errc::kAlreadyInitialized);
  EXPECT_EQ(again.status().raw_code(), HIXL_ERR_ALREADY_INITIALIZED);
  EXPECT_THAT(again.status().ToString(), StartsWith("HIXL_ERR_ALREADY_INITIALIZED: "));
  EXPECT_EQ(w.rank(), 0) << "the refused Init must not have touched the live world";

  hixl::Result<void*> mem = w.Alloc(128);
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  void* p = *mem;
  EXPECT_EQ(Addr(p) % 64, 0u);
  hixl::Result<void*> zero = w.Alloc(0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), hixl::Errc::kInvalidArg);

  std::vector<char> buf(64, 0);
  const char src[6] = "hello";
  {
    hixl::Result<hixl::Registration> reg = hixl::Registration::Make(buf.data(), buf.size());
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    EXPECT_EQ(reg->addr(), buf.data());
    // Moving the registration keeps one registration.
    hixl::Registration moved = std::move(reg).value();
    EXPECT_EQ(moved.addr(), buf.data());
    hixl::Status s = w.Put(0, src, Addr(buf.data()), sizeof(src));
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(w.Fence().ok());
    EXPECT_STREQ(buf.data(), "hello");
    char back[6] = {};
    ASSERT_TRUE(w.Get(0, Addr(buf.data()), back, sizeof(back)).ok());
    EXPECT_STREQ(back, "hello");
    // Overlapping registration through the C++ API.
    hixl::Result<hixl::Registration> overlap = hixl::Registration::Make(buf.data() + 8, 8);
    ASSERT_FALSE(overlap.ok());
    EXPECT_EQ(overlap.status().code(), hixl::Errc::kInvalidArg);
  }  // deregistered here
  hixl::Status s = w.Put(0, src, Addr(buf.data()), sizeof(src));
  EXPECT_EQ(s.code(), hixl::Errc::kNotRegistered);
  EXPECT_THAT(s.message(), StartsWith("Remote memory not registered"));
  EXPECT_THAT(s.ToString(), StartsWith("HIXL_ERR_NOT_REGISTERED: Remote memory not registered"));
  // The registration was dropped exactly once: the buffer is unknown now.
  EXPECT_EQ(w.DeregisterMemory(buf.data()).code(), hixl::Errc::kInvalidArg);

  // Move-assigning a registration releases the one it replaces.
  {
    std::vector<char> other(64, 0);
    hixl::Result<hixl::Registration> r1 = hixl::Registration::Make(buf.data(), buf.size());
    hixl::Result<hixl::Registration> r2 = hixl::Registration::Make(other.data(), other.size());
    ASSERT_TRUE(r1.ok() && r2.ok());
    *r1 = std::move(*r2);
    EXPECT_EQ(r1->addr(), other.data());
    EXPECT_EQ(r2->addr(), nullptr);
    EXPECT_EQ(w.Put(0, src, Addr(buf.data()), 1).code(), hixl::Errc::kNotRegistered);
    EXPECT_TRUE(w.Put(0, src, Addr(other.data()), 1).ok());
  }
  EXPECT_EQ(w.Put(0, src, Addr(buf.data()), 1).code(), hixl::Errc::kNotRegistered);

  ASSERT_TRUE(w.RegisterMemory(buf.data(), buf.size()).ok());
  EXPECT_TRUE(w.Put(0, src, Addr(buf.data()), 1).ok());
  ASSERT_TRUE(w.DeregisterMemory(buf.data()).ok());
  EXPECT_EQ(w.Put(-1, src, Addr(buf.data()), 1).code(), hixl::Errc::kInvalidRank);
  EXPECT_EQ(w.Get(1, Addr(buf.data()), buf.data(), 1).code(), hixl::Errc::kInvalidRank);

  hixl::Result<std::vector<int>> all = w.Allgather(1234);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, std::vector<int>{1234});
  EXPECT_TRUE(w.Barrier().ok());
  EXPECT_TRUE(w.Free(p).ok());
  EXPECT_EQ(w.Free(p).code(), hixl::Errc::kInvalidArg);
}

TEST_F(World1Test, CxxWorldDestructorFinalizes) {
  {
    hixl::Result<hixl::World> r = hixl::World::Init();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    hixl::World w = std::move(r).value();
    hixl::World w2 = std::move(w);  // the moved-from world does nothing
    EXPECT_EQ(w2.rank(), 0);
    EXPECT_EQ(hixl_rank(), 0);
  }
  EXPECT_EQ(hixl_rank(), HIXL_ERR_NOT_INITIALIZED);
  EXPECT_THAT(LastError(), HasSubstr("after hixl_finalize"));

  // Explicit Finalize, then the destructor does nothing more.
  {
    hixl::Result<hixl::World> r = hixl::World::Init();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    hixl::World w = std::move(r).value();
    EXPECT_TRUE(w.Finalize().ok());
    EXPECT_EQ(w.Finalize().code(), hixl::Errc::kNotInitialized);
    EXPECT_EQ(w.rank(), HIXL_ERR_NOT_INITIALIZED);
    hixl::Status s = w.Put(0, "x", 0x1000, 1);
    EXPECT_EQ(s.code(), hixl::Errc::kNotInitialized);
    EXPECT_THAT(s.message(), HasSubstr("after hixl_finalize"));
  }
  // The C API can start a new world afterwards.
  ASSERT_EQ(hixl_init(), HIXL_SUCCESS) << LastError();
  EXPECT_EQ(hixl_finalize(), HIXL_SUCCESS) << LastError();
}

// ------------------------------------------------------ nothing left over

TEST_F(World1Test, FinalizeLeavesNoThreadsOrSockets) {
  // ThreadSanitizer's runtime starts a thread of its own at the first
  // pthread_create and keeps it: start it before counting.
  std::thread([] {}).join();
  // libuv makes a pipe pair once per process (its signal lock) at the
  // first loop it starts and keeps it: the event loop's, not a leak.
  uv_loop_t warm;
  ASSERT_EQ(uv_loop_init(&warm), 0);
  ASSERT_EQ(uv_loop_close(&warm), 0);
  const int threads_before = CountThreads();
  const int sockets_before = CountSockets();
  const int fds_before = CountEntries("/proc/self/fd");
  const std::string fds_list_before = OpenFds();
  ASSERT_GT(threads_before, 0);
  ASSERT_GE(sockets_before, 0);
  for (int round = 0; round < 3; ++round) {
    ASSERT_NO_FATAL_FAILURE(Init());
    // The counts are real: a live world has its progress thread and the
    // shared-memory transport's listening socket.
    EXPECT_GT(CountThreads(), threads_before) << "round " << round;
    EXPECT_GT(CountSockets(), sockets_before) << "round " << round;
    void* p = hixl_alloc(1 << 20);
    ASSERT_NE(p, nullptr) << LastError();
    std::vector<char> buf(4096, 1);
    ASSERT_EQ(hixl_register_memory(buf.data(), buf.size()), HIXL_SUCCESS) << LastError();
    ASSERT_EQ(hixl_put(0, buf.data(), Addr(p), buf.size()), HIXL_SUCCESS) << LastError();
    ASSERT_EQ(hixl_get(0, Addr(buf.data()), p, buf.size()), HIXL_SUCCESS) << LastError();
    ASSERT_EQ(hixl_barrier(), HIXL_SUCCESS) << LastError();
    // Finalize without freeing or deregistering: it releases everything.
    ASSERT_EQ(hixl_finalize(), HIXL_SUCCESS) << LastError();
    EXPECT_EQ(CountThreads(), threads_before) << "round " << round << ": threads left after hixl_finalize";
    EXPECT_EQ(CountSockets(), sockets_before) << "round " << round << ": sockets left after hixl_finalize";
    EXPECT_EQ(CountEntries("/proc/self/fd"), fds_before)
        << "round " << round << ": fds left after hixl_finalize; open now:\n"
        << OpenFds() << "before:\n"
        << fds_list_before;
  }
}

}  // namespace

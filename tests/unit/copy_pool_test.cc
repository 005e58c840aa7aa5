// The copy pool (base/copy_pool.h): the split, the settings, parts run at
// once with their errors brought back, and the pool after fork; and
// cross-memory attach split into parts (transport/shm/cma.h), on this
// process itself.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/copy_pool.h"
#include "transport/shm/cma.h"
#include "transport/shm/options.h"

namespace hixl::copy {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// ThreadSanitizer cannot start threads in the child of a multi-threaded
// fork (it dies), so there the child only checks that it has no workers.
#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif
#else
constexpr bool kTsan = false;
#endif

std::vector<size_t> SplitOf(uint64_t addr, size_t n, const Plan& plan) {
  size_t b[kMaxThreads + 1];
  const int parts = Split(addr, n, plan, b);
  return std::vector<size_t>(b, b + parts + 1);
}

TEST(CopySplit, SmallTransfersAndOneThreadStayWhole) {
  EXPECT_EQ(SplitOf(0x10000, 4 * kMiB - 1, Plan{4, 4 * kMiB}), (std::vector<size_t>{0, 4 * kMiB - 1}));
  EXPECT_EQ(SplitOf(0x10000, 1 << 30, Plan{1, 4 * kMiB}), (std::vector<size_t>{0, size_t{1} << 30}));
  EXPECT_EQ(SplitOf(0x10000, 0, Plan{4, 4 * kMiB}), (std::vector<size_t>{0, 0}));
}

TEST(CopySplit, PartsFollowTheDestinationsPages) {
  for (uint64_t addr : {uint64_t{0x7f0000000000}, uint64_t{0x7f0000000123}, uint64_t{0x7f0000000fff}}) {
    for (int threads : {2, 3, 4, 64}) {
      for (size_t n : {4 * kMiB, 64 * kMiB + 3, size_t{1} << 30}) {
        const Plan plan{threads, 4 * kMiB};
        const std::vector<size_t> b = SplitOf(addr, n, plan);
        const size_t parts = b.size() - 1;
        EXPECT_EQ(parts, std::min<size_t>(static_cast<size_t>(threads), n / kMiB)) << n << " " << threads;
        EXPECT_EQ(b.front(), 0U);
        EXPECT_EQ(b.back(), n);
        for (size_t i = 1; i < parts; ++i) {
          EXPECT_EQ((addr + b[i]) % kPage, 0U) << "boundary " << i << " of " << n;
          EXPECT_GT(b[i], b[i - 1]);
          // About equal parts: each within a page of n / parts, so >= 1 MiB less a page.
          EXPECT_GE(b[i] - b[i - 1] + kPage, n / parts);
        }
        EXPECT_GE(b[parts] - b[parts - 1] + kPage, n / parts);
      }
    }
  }
}

TEST(CopySplit, ATestThresholdMakesSmallerParts) {
  EXPECT_EQ(MinPart(Plan{2, 4 * kMiB}), kMiB);
  EXPECT_EQ(MinPart(Plan{2, 64 * kMiB}), kMiB);  // never above 1 MiB
  EXPECT_EQ(MinPart(Plan{2, 64 * 1024}), 16 * 1024U);
  EXPECT_EQ(MinPart(Plan{2, kPage}), kPage);  // never below a page
  const std::vector<size_t> b = SplitOf(0x1000, 64 * 1024, Plan{8, 64 * 1024});
  EXPECT_EQ(b.size(), 5U);  // 64 KiB / 16 KiB
}

TEST(CopySettings, AutoDividesTheCoresAmongTheHostsRanksButTakesTwoWhereThereAreTwo) {
  EXPECT_EQ(AutoThreads(2, 2), 2);  // two wherever there are two cores
  EXPECT_EQ(AutoThreads(2, 4), 2);
  EXPECT_EQ(AutoThreads(2, 1), 2);
  EXPECT_EQ(AutoThreads(16, 1), kAutoMaxThreads);
  EXPECT_EQ(AutoThreads(16, 8), 2);
  EXPECT_EQ(AutoThreads(12, 4), 3);
  EXPECT_EQ(AutoThreads(8, 3), 2);
  EXPECT_EQ(AutoThreads(1, 8), 1);
  EXPECT_EQ(AutoThreads(0, 0), 1);
  EXPECT_GE(AvailableCores(), 1);
}

TEST(CopySettings, LocalRanksFromTheLauncher) {
  auto env = [](std::map<std::string, std::string> vars) {
    return [vars](const char* name) -> std::optional<std::string> {
      auto it = vars.find(name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  };
  EXPECT_EQ(LocalRanks(env({})), 1);
  EXPECT_EQ(LocalRanks(env({{"LOCAL_WORLD_SIZE", "4"}})), 4);
  EXPECT_EQ(LocalRanks(env({{"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}})), 3);
  EXPECT_EQ(LocalRanks(env({{"MPI_LOCALNRANKS", "6"}})), 6);
  EXPECT_EQ(LocalRanks(env({{"LOCAL_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "5"}})), 2);
  EXPECT_EQ(LocalRanks(env({{"LOCAL_WORLD_SIZE", "x"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "5"}})), 5);
  EXPECT_EQ(LocalRanks(env({{"LOCAL_WORLD_SIZE", "0"}})), 1);
}

TEST(CopySettings, ParseThreadsNamesTheVariableAndValue) {
  EXPECT_EQ(ParseThreads("HIXL_COPY_THREADS", "auto", 3).value(), 3);
  EXPECT_EQ(ParseThreads("HIXL_COPY_THREADS", "1", 3).value(), 1);
  EXPECT_EQ(ParseThreads("HIXL_COPY_THREADS", "64", 3).value(), 64);
  for (const char* bad : {"0", "65", "-1", "two", "", " 2", "2x", "AUTO"}) {
    Result<int> r = ParseThreads("HIXL_COPY_THREADS", bad, 3);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Errc::kInvalidArg);
    EXPECT_NE(r.status().message().find(std::string("HIXL_COPY_THREADS='") + bad + "'"), std::string::npos)
        << r.status().message();
  }
  EXPECT_EQ(ParseSplitMin("HIXL_COPY_SPLIT_MIN", "65536").value(), 65536U);
  Result<size_t> small = ParseSplitMin("HIXL_COPY_SPLIT_MIN", "100");
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("HIXL_COPY_SPLIT_MIN='100'"), std::string::npos);
}

TEST(CopySettings, TheShmTransportReadsThemFromOptionsOrVariables) {
  ::unsetenv("HIXL_COPY_THREADS");
  ::unsetenv("HIXL_COPY_SPLIT_MIN");
  ::setenv("LOCAL_WORLD_SIZE", "1", 1);
  Result<transport::shm::ShmOptions> d = transport::shm::ParseOptions(transport::Options{});
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d.value().copy.threads, AutoThreads(AvailableCores(), 1));
  EXPECT_EQ(d.value().copy.split_min, kDefaultSplitMin);
  ::setenv("HIXL_COPY_THREADS", "3", 1);
  ::setenv("HIXL_COPY_SPLIT_MIN", "65536", 1);
  Result<transport::shm::ShmOptions> e = transport::shm::ParseOptions(transport::Options{});
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e.value().copy.threads, 3);
  EXPECT_EQ(e.value().copy.split_min, 65536U);
  transport::Options o;
  o.settings["copy_threads"] = "many";
  Result<transport::shm::ShmOptions> s = transport::shm::ParseOptions(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("option copy_threads='many'"), std::string::npos) << s.status().message();
  ::setenv("HIXL_COPY_THREADS", "0", 1);
  Result<transport::shm::ShmOptions> z = transport::shm::ParseOptions(transport::Options{});
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().message().find("HIXL_COPY_THREADS='0'"), std::string::npos) << z.status().message();
  ::unsetenv("HIXL_COPY_THREADS");
  ::unsetenv("HIXL_COPY_SPLIT_MIN");
  ::unsetenv("LOCAL_WORLD_SIZE");
}

// Parts that wait for each other: they finish only when `parts` of them
// run at the same time (bounded: a part gives up after 30 s).
TEST(CopyPool, PartsRunAtOnceEachExactlyOnce) {
  constexpr int kParts = 3;
  size_t bounds[] = {0, 10, 20, 30};
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  std::multiset<size_t> seen;
  std::set<std::thread::id> threads;
  auto part = [&](size_t b, size_t e) {
    std::unique_lock lock(mu);
    seen.insert(b);
    threads.insert(std::this_thread::get_id());
    EXPECT_EQ(e, b + 10);
    if (++running == kParts) cv.notify_all();
    if (!cv.wait_for(lock, std::chrono::seconds(30), [&] { return running >= kParts; })) {
      return Status(Errc::kTimeout, "the parts did not run at once");
    }
    return Status::Ok();
  };
  Status s = RunParts(bounds, kParts, part);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(seen, (std::multiset<size_t>{0, 10, 20}));
  EXPECT_EQ(threads.size(), 3U);
  EXPECT_GE(WorkersForTesting(), 2);
}

TEST(CopyPool, TheFirstErrorComesBackAfterEveryPartFinished) {
  size_t bounds[] = {0, 1, 2, 3, 4};
  std::atomic<int> finished{0};
  std::atomic<bool> first_failed{false};
  auto part = [&](size_t b, size_t) {
    Status s;
    if (b == 1) {
      s = Status(Errc::kTransport, "part 1 failed");
      first_failed = true;
    } else if (b == 3) {
      // Fails only after part 1 did (bounded).
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!first_failed && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      s = Status(Errc::kInternal, "part 3 failed");
    }
    ++finished;
    return s;
  };
  Status s = RunParts(bounds, 4, part);
  EXPECT_EQ(finished.load(), 4);
  EXPECT_EQ(s.code(), Errc::kTransport);
  EXPECT_EQ(s.message(), "part 1 failed");
}

TEST(CopyPool, SplitCopiesAreExact) {
  const size_t n = 16 * kMiB + 12345;
  std::vector<uint8_t> src(n + 64), dst(n + 64, 0);
  std::iota(src.begin(), src.end(), uint8_t{7});
  for (int threads : {2, 4, 7}) {
    for (size_t off : {size_t{0}, size_t{3}, size_t{61}}) {
      std::fill(dst.begin(), dst.end(), 0);
      Copy(dst.data() + off, src.data() + 64 - off, n, Plan{threads, 64 * 1024});
      ASSERT_EQ(std::memcmp(dst.data() + off, src.data() + 64 - off, n), 0) << threads << " " << off;
      for (size_t i = 0; i < off; ++i) ASSERT_EQ(dst[i], 0);
      for (size_t i = off + n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0);
    }
  }
}

// Copies of up to 16 bytes go word by word (no call into libc): every
// size, at every misalignment, writes exactly its bytes.
TEST(CopyPool, SmallCopiesAreExact) {
  std::vector<uint8_t> src(64), dst(64);
  std::iota(src.begin(), src.end(), uint8_t{1});
  for (size_t n = 0; n <= 17; ++n) {
    for (size_t off = 0; off < 8; ++off) {
      std::fill(dst.begin(), dst.end(), 0);
      Copy(dst.data() + off, src.data() + 7 - off, n, Plan{1, 64 * 1024});
      ASSERT_EQ(std::memcmp(dst.data() + off, src.data() + 7 - off, n), 0) << n << " bytes at " << off;
      for (size_t i = 0; i < off; ++i) ASSERT_EQ(dst[i], 0) << n << " bytes at " << off;
      for (size_t i = off + n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0) << n << " bytes at " << off;
    }
  }
}

TEST(CopyPool, SeveralThreadsSplitAtOnce) {
  const size_t n = 8 * kMiB;
  constexpr int kThreads = 4;
  std::vector<std::vector<uint8_t>> src(kThreads), dst(kThreads);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    src[static_cast<size_t>(t)].assign(n, static_cast<uint8_t>(t + 1));
    dst[static_cast<size_t>(t)].assign(n, 0);
  }
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        Copy(dst[static_cast<size_t>(t)].data(), src[static_cast<size_t>(t)].data(), n, Plan{3, 64 * 1024});
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(dst[static_cast<size_t>(t)], src[static_cast<size_t>(t)]);
}

TEST(CopyPool, AForkedChildHasNoWorkersAndStillSplits) {
  const size_t n = 8 * kMiB;
  std::vector<uint8_t> src(n), dst(n);
  std::iota(src.begin(), src.end(), uint8_t{1});
  Copy(dst.data(), src.data(), n, Plan{3, 64 * 1024});  // the parent has workers now
  ASSERT_GE(WorkersForTesting(), 1);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(60);  // the bound on the child
    int code = WorkersForTesting() == 0 ? 0 : 2;
    if (kTsan) ::_exit(code);
    std::fill(dst.begin(), dst.end(), 0);
    Copy(dst.data(), src.data(), n, Plan{3, 64 * 1024});
    if (dst != src) code = 3;
    if (code == 0 && WorkersForTesting() < 1) code = 4;  // started again
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: workers in the child; 3: a wrong copy; 4: no workers started again";
}

// Cross-memory attach in parts, with this process as the peer.
TEST(CmaSplit, PartsMoveEveryByteAndAFaultComesBack) {
  transport::shm::Peer self;
  self.rank = 0;
  self.pid = ::getpid();
  const size_t n = 4 * kMiB + 100;
  std::vector<uint8_t> src(n), dst(n, 0);
  std::iota(src.begin(), src.end(), uint8_t{3});
  const Plan plan{4, 64 * 1024};
  Status s = transport::shm::Cma(&self, true, src.data(), reinterpret_cast<uint64_t>(dst.data()), n, plan);
  if (s.code() == Errc::kUnsupported) GTEST_SKIP() << "cross-memory attach is refused here";
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(dst, src);
  // Many pieces at once, read back.
  std::vector<uint8_t> back(n, 0);
  std::vector<transport::Transport::Piece> pieces;
  for (size_t off = 0; off < n; off += 100000) {
    pieces.push_back(
        {nullptr, reinterpret_cast<uint64_t>(dst.data() + off), back.data() + off, std::min<size_t>(100000, n - off)});
  }
  s = transport::shm::CmaV(&self, false, pieces.data(), pieces.size(), plan);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(back, src);

  // A hole in the last part: its fault is the result.
  const size_t len = 1 * kMiB;
  void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* region = static_cast<uint8_t*>(m);
  ASSERT_EQ(::munmap(region + len - 64 * 1024, 64 * 1024), 0);
  std::vector<uint8_t> from(len, 0x5a);
  s = transport::shm::Cma(&self, true, from.data(), reinterpret_cast<uint64_t>(region), len, plan);
  EXPECT_EQ(s.code(), Errc::kTransport);
  EXPECT_NE(s.message().find("cross-memory write"), std::string::npos) << s.message();
  EXPECT_EQ(region[0], 0x5a);  // the other parts moved
  EXPECT_EQ(region[len / 2], 0x5a);
  ::munmap(region, len - 64 * 1024);
}

}  // namespace
}  // namespace hixl::copy

// Signals, remote atomics and notifications, run by every rank of a world.
#include <linux/futex.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <set>
#include <thread>
#include <vector>

#include "mp_util.h"
#include "support/in_futex.h"

namespace hixl::test {
namespace {

class Signals : public testing::TestWithParam<Kind> {};

// An iteration count from the environment (at least 1), or `def`.  The
// ThreadSanitizer build sets smaller ones (tests/mp/CMakeLists.txt): every
// access is instrumented there, and UCX's emulated atomics are slow.
int EnvCount(const char* name, int def) {
  const char* v = std::getenv(name);
  return v && *v ? std::max(1, std::atoi(v)) : def;
}

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// Rank 0 streams rounds of data to every other rank with put_signal; a
// consumer that sees round r's signal must see all of round r's data.
// Consumers acknowledge with a remote atomic so rank 0 can reuse the buffer.
TEST_P(Signals, WhoeverSeesTheSignalSeesTheData) {
  const int n = Size(), me = Rank();
  if (n < 2) GTEST_SKIP();
  constexpr size_t kLen = (size_t{1} << 20) + 13;
  const auto kRounds = static_cast<uint64_t>(EnvCount("HIXL_TEST_SIGNAL_ROUNDS", 60));
  Remote data(GetParam(), kLen);
  Remote words(GetParam(), 8 * static_cast<size_t>(n));  // [0]: signal; on rank 0: acks by rank
  std::memset(words.local(), 0, words.bytes());
  HIXL_ASSERT_OK(g_world->Barrier());
  auto* w = reinterpret_cast<uint64_t*>(words.local());
  if (me == 0) {
    std::vector<uint8_t> src(kLen);
    for (uint64_t r = 1; r <= kRounds; ++r) {
      Fill(src.data(), kLen, Mix(r));
      // Alternate SET and ADD: both leave the signal at r.
      for (int to = 1; to < n; ++to) {
        if (r % 2) {
          HIXL_ASSERT_OK(g_world->PutSignal(to, src.data(), data.base(to), kLen, words.base(to), r, SignalOp::kSet));
        } else {
          HIXL_ASSERT_OK(g_world->PutSignal(to, src.data(), data.base(to), kLen, words.base(to), 1, SignalOp::kAdd));
        }
      }
      for (int from = 1; from < n; ++from) HIXL_ASSERT_OK(g_world->WaitUntil(&w[from], Cmp::kGe, r));
    }
  } else {
    for (uint64_t r = 1; r <= kRounds; ++r) {
      HIXL_ASSERT_OK(g_world->WaitUntil(&w[0], Cmp::kGe, r));
      ASSERT_EQ(w[0], r);
      ASSERT_EQ(FirstMismatch(data.local(), kLen, Mix(r)), -1) << "round " << r << ": signal seen before the data";
      HIXL_ASSERT_OK(g_world->AtomicSet(0, words.base(0) + 8 * static_cast<uint64_t>(me), r));
    }
  }
  HIXL_ASSERT_OK(g_world->Barrier());
}

// Every rank adds to one word on rank 0 many times: the total is exact, and
// the values fetch_add returned are all different.
TEST_P(Signals, ContendedFetchAddIsExact) {
  const int n = Size();
  const int kAdds = EnvCount("HIXL_TEST_ATOMIC_ITERS", 2000);
  Remote word(GetParam(), 8);
  std::memset(word.local(), 0, 8);
  HIXL_ASSERT_OK(g_world->Barrier());
  std::vector<uint64_t> seen;
  for (int i = 0; i < kAdds; ++i) {
    auto old = g_world->AtomicFetchAdd(0, word.base(0), 1);
    ASSERT_TRUE(old.ok()) << old.status().ToString();
    seen.push_back(old.value());
  }
  HIXL_ASSERT_OK(g_world->Barrier());
  auto total = g_world->AtomicFetch(0, word.base(0));
  ASSERT_TRUE(total.ok());
  EXPECT_EQ(total.value(), static_cast<uint64_t>(n) * kAdds);
  // No two adds saw the same value: gather everyone's and check.
  std::set<uint64_t> mine(seen.begin(), seen.end());
  EXPECT_EQ(mine.size(), seen.size());
  uint64_t sum = 0;
  for (uint64_t v : seen) sum += v;
  auto sums = g_world->Allgather(sum);
  ASSERT_TRUE(sums.ok());
  uint64_t all = 0;
  for (uint64_t v : sums.value()) all += v;
  const uint64_t total_adds = static_cast<uint64_t>(n) * kAdds;
  EXPECT_EQ(all, total_adds * (total_adds - 1) / 2) << "the old values are exactly 0..N-1";
  HIXL_ASSERT_OK(g_world->Barrier());
}

// A lock made of compare-and-swap protects a read-modify-write done with
// plain get and put: no increment is lost.
TEST_P(Signals, CompareSwapLockProtectsACriticalSection) {
  const int n = Size(), me = Rank();
  const int kIters = EnvCount("HIXL_TEST_LOCK_ITERS", 150);
  Remote mem(GetParam(), 16);  // [0] lock, [1] counter, on rank 0
  std::memset(mem.local(), 0, 16);
  HIXL_ASSERT_OK(g_world->Barrier());
  const uint64_t lock = mem.base(0), counter = mem.base(0) + 8;
  for (int i = 0; i < kIters; ++i) {
    while (true) {
      auto seen = g_world->AtomicCompareSwap(0, lock, 0, static_cast<uint64_t>(me) + 1);
      ASSERT_TRUE(seen.ok()) << seen.status().ToString();
      if (seen.value() == 0) break;
      std::this_thread::yield();
    }
    uint64_t v = 0;
    HIXL_ASSERT_OK(g_world->Get(0, counter, &v, 8));
    HIXL_ASSERT_OK(g_world->Fence());
    ++v;
    HIXL_ASSERT_OK(g_world->Put(0, &v, counter, 8));
    // The release is ordered after the put.
    auto held = g_world->AtomicSwap(0, lock, 0);
    ASSERT_TRUE(held.ok());
    ASSERT_EQ(held.value(), static_cast<uint64_t>(me) + 1) << "someone else held the lock";
  }
  HIXL_ASSERT_OK(g_world->Barrier());
  if (me == 0) {
    uint64_t v;
    std::memcpy(&v, mem.local() + 8, 8);
    EXPECT_EQ(v, static_cast<uint64_t>(n) * kIters);
  }
  HIXL_ASSERT_OK(g_world->Barrier());
}

using hixl::testing_support::InFutex;

// A waiter already asleep in the kernel (a futex wait with no time slice)
// is woken by put_signal itself, over every transport: for each round rank
// 1's waiter thread goes to sleep on its signal word, rank 1 tells rank 0
// so once the thread is in the futex call, and rank 0 puts data with a
// signal (sizes from none to more than one message carries).  The futex
// must return woken, never at its (generous) time limit, and the data must
// be there with the signal.
TEST_P(Signals, AWaiterAsleepInTheKernelIsWokenByThePutSignal) {
  const int n = Size(), me = Rank();
  if (n < 2) GTEST_SKIP();
  const std::vector<size_t> sizes = {0, 8, 4096, 65536, 200 << 10};
  const auto kRounds = static_cast<uint64_t>(EnvCount("HIXL_TEST_SIGNAL_ROUNDS", 60) / 3 + 5);
  Remote data(GetParam(), 200 << 10);
  Remote words(GetParam(), 16);  // [0]: rank 1's signal; [1]: on rank 0, the round rank 1's waiter sleeps in
  std::memset(words.local(), 0, words.bytes());
  HIXL_ASSERT_OK(g_world->Barrier());
  auto* w = reinterpret_cast<uint64_t*>(words.local());
  if (me == 0) {
    std::vector<uint8_t> src(data.bytes());
    for (uint64_t r = 1; r <= kRounds; ++r) {
      const size_t len = sizes[r % sizes.size()];
      Fill(src.data(), len, Mix(r));
      HIXL_ASSERT_OK(g_world->WaitUntil(&w[1], Cmp::kGe, r));
      if (r % 2) {
        HIXL_ASSERT_OK(g_world->PutSignal(1, src.data(), data.base(1), len, words.base(1), r, SignalOp::kSet));
      } else {
        HIXL_ASSERT_OK(g_world->PutSignal(1, src.data(), data.base(1), len, words.base(1), 1, SignalOp::kAdd));
      }
      HIXL_ASSERT_OK(g_world->Fence());  // src is reused next round
    }
  } else if (me == 1) {
    std::atomic<uint64_t> sleeping{0};
    std::atomic<pid_t> tid{0};
    std::atomic<int> timed_out{0}, bad_data{0};
    std::thread waiter([&] {
      tid = static_cast<pid_t>(::syscall(SYS_gettid));
      std::atomic_ref<uint64_t> sig(w[0]);
      for (uint64_t r = 1; r <= kRounds; ++r) {
        for (uint64_t v = sig.load(); v < r; v = sig.load()) {
          sleeping = r;
          sleeping.notify_all();
          timespec limit{60, 0};  // a bound on a hang, not a timing
          if (::syscall(SYS_futex, &w[0], FUTEX_WAIT, static_cast<uint32_t>(v), &limit, nullptr, 0) != 0 &&
              errno == ETIMEDOUT) {
            ++timed_out;
            sleeping = ~uint64_t{0};  // lets the main thread go on (and stop)
            sleeping.notify_all();
            return;
          }
        }
        const size_t len = sizes[r % sizes.size()];
        if (sig.load() != r || FirstMismatch(data.local(), len, Mix(r)) != -1) ++bad_data;
      }
    });
    for (uint64_t r = 1; r <= kRounds && timed_out == 0; ++r) {
      sleeping.wait(r - 1);  // the waiter is at round r
      while (tid == 0 || !InFutex(tid)) std::this_thread::yield();
      HIXL_ASSERT_OK(g_world->AtomicSet(0, words.base(0) + 8, r));
    }
    waiter.join();
    EXPECT_EQ(timed_out.load(), 0) << "a waiter asleep on the signal word was not woken by put_signal";
    EXPECT_EQ(bad_data.load(), 0) << "a waiter saw a signal before its data";
  }
  HIXL_ASSERT_OK(g_world->Barrier());
}

INSTANTIATE_TEST_SUITE_P(Memory, Signals, testing::Values(Kind::kSymmetric, Kind::kRegistered), KindName);

TEST(Atomics, EachOperationReturnsTheOldValue) {
  const int me = Rank(), peer = (Rank() + 1) % Size();
  Remote mem(Kind::kSymmetric, 8);
  std::memset(mem.local(), 0, 8);
  HIXL_ASSERT_OK(g_world->Barrier());
  const uint64_t a = mem.base(peer);
  HIXL_ASSERT_OK(g_world->AtomicSet(peer, a, 10));
  EXPECT_EQ(g_world->AtomicFetch(peer, a).value(), 10u);
  EXPECT_EQ(g_world->AtomicFetchAdd(peer, a, 5).value(), 10u);
  HIXL_ASSERT_OK(g_world->AtomicAdd(peer, a, 1));
  EXPECT_EQ(g_world->AtomicSwap(peer, a, 100).value(), 16u);
  EXPECT_EQ(g_world->AtomicCompareSwap(peer, a, 99, 7).value(), 100u);   // no swap
  EXPECT_EQ(g_world->AtomicCompareSwap(peer, a, 100, 7).value(), 100u);  // swap
  EXPECT_EQ(g_world->AtomicFetch(peer, a).value(), 7u);
  HIXL_ASSERT_OK(g_world->Barrier());
  uint64_t local;
  std::memcpy(&local, mem.local(), 8);
  EXPECT_EQ(local, 7u) << "rank " << me << "'s word as its left neighbour left it";
  HIXL_ASSERT_OK(g_world->Barrier());
}

TEST(Atomics, BadWordsFailAndWriteNothing) {
  const int n = Size(), me = Rank(), peer = (me + 1) % n;
  Remote mem(Kind::kRegistered, 64);
  std::memset(mem.local(), 0x5A, 64);
  HIXL_ASSERT_OK(g_world->Barrier());
  const uint64_t end = mem.base(peer) + 64;
  uint8_t data[32] = {1, 2, 3};
  auto s = g_world->AtomicAdd(peer, end, 1);
  EXPECT_EQ(s.code(), Errc::kNotRegistered) << s.ToString();
  EXPECT_NE(s.message().find("Remote memory not registered"), std::string::npos) << s.message();
  EXPECT_EQ(g_world->AtomicAdd(peer, mem.base(peer) + 4, 1).code(), Errc::kInvalidArg);  // misaligned
  EXPECT_EQ(g_world->AtomicAdd(n, mem.base(peer), 1).code(), Errc::kInvalidRank);
  // A bad signal word: the data must not be written either.
  auto ps = g_world->PutSignal(peer, data, mem.base(peer), sizeof data, end, 1, SignalOp::kSet);
  EXPECT_EQ(ps.code(), Errc::kNotRegistered) << ps.ToString();
  EXPECT_EQ(
      g_world->PutSignal(peer, data, mem.base(peer), sizeof data, mem.base(peer) + 40, 1, static_cast<SignalOp>(7))
          .code(),
      Errc::kInvalidArg);
  uint64_t word = 0;
  EXPECT_EQ(g_world->WaitUntil(&word, static_cast<Cmp>(42), 0, 10).code(), Errc::kInvalidArg);
  EXPECT_EQ(hixl_test(reinterpret_cast<const uint64_t*>(reinterpret_cast<uintptr_t>(&word) + 1), HIXL_CMP_EQ, 0),
            HIXL_ERR_INVALID_ARG);
  HIXL_ASSERT_OK(g_world->Barrier());
  EXPECT_EQ(FirstNot(mem.local(), 64, 0x5A), -1) << "a refused operation wrote into this rank's memory";
  HIXL_ASSERT_OK(g_world->Barrier());
}

TEST(Waiting, TimesOutWithoutBurningACore) {
  uint64_t word = 0;
  const auto start = std::chrono::steady_clock::now();
  const double cpu0 = CpuSeconds();
  Status s = g_world->WaitUntil(&word, Cmp::kNe, 0, 300);
  const double cpu = CpuSeconds() - cpu0;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(s.code(), Errc::kTimeout) << s.ToString();
  EXPECT_GE(wall, 0.3);
  EXPECT_LT(cpu, 0.5 * wall) << "waiting " << wall << " s used " << cpu << " s of CPU";
  EXPECT_EQ(hixl_test(&word, HIXL_CMP_EQ, 0), 1);
  EXPECT_EQ(hixl_test(&word, HIXL_CMP_GT, 0), 0);
  HIXL_ASSERT_OK(g_world->Barrier());
}

// A waiter that has gone to sleep is woken by the signal.
TEST(Waiting, SleepingWaiterIsWoken) {
  const int n = Size(), me = Rank();
  if (n < 2) GTEST_SKIP();
  Remote word(Kind::kSymmetric, 8);
  std::memset(word.local(), 0, 8);
  HIXL_ASSERT_OK(g_world->Barrier());
  if (me == 1) {
    const double cpu0 = CpuSeconds();
    HIXL_ASSERT_OK(g_world->WaitUntil(reinterpret_cast<uint64_t*>(word.local()), Cmp::kEq, 42, 60000));
    const double cpu = CpuSeconds() - cpu0;
    EXPECT_LT(cpu, 1.0);
  } else if (me == 0) {
    // Work long enough for the waiter to be asleep, then signal.
    std::vector<uint8_t> busy(size_t{256} << 20);
    Fill(busy.data(), busy.size(), 1);
    EXPECT_EQ(FirstMismatch(busy.data(), busy.size(), 1), -1);
    HIXL_ASSERT_OK(g_world->AtomicSet(1, word.base(1), 42));
  }
  HIXL_ASSERT_OK(g_world->Barrier());
}

// Notifications arrive after the data their sender put before them.
TEST(Notify, OrderedAfterPuts) {
  const int n = Size(), me = Rank();
  if (n < 2) GTEST_SKIP();
  constexpr size_t kLen = 256 << 10;
  constexpr int kRounds = 6;
  Remote inbox(Kind::kRegistered, kLen * static_cast<size_t>(n));
  HIXL_ASSERT_OK(g_world->Barrier());
  if (me != 0) {
    std::vector<uint8_t> src(kLen);
    for (int r = 0; r < kRounds; ++r) {
      Fill(src.data(), kLen, Mix(me * 100 + r));
      HIXL_ASSERT_OK(g_world->Put(0, src.data(), inbox.base(0) + static_cast<uint64_t>(me) * kLen, kLen));
      std::string msg = std::to_string(r);
      Status s;
      // Rank 0 drains as it goes; a full queue is retried.
      while ((s = g_world->Notify(0, msg.data(), msg.size())).code() == Errc::kQueueFull) std::this_thread::yield();
      HIXL_ASSERT_OK(s);
      // Wait for rank 0 to have checked round r before overwriting.
      auto ack = g_world->WaitNotification(60000);
      ASSERT_TRUE(ack.ok()) << ack.status().ToString();
    }
  } else {
    for (int got = 0; got < kRounds * (n - 1); ++got) {
      auto note = g_world->WaitNotification(60000);
      ASSERT_TRUE(note.ok()) << note.status().ToString();
      const int from = note->src_rank, r = std::stoi(note->data);
      ASSERT_EQ(FirstMismatch(inbox.local() + static_cast<size_t>(from) * kLen, kLen, Mix(from * 100 + r)), -1)
          << "notification " << r << " from rank " << from << " arrived before its data";
      HIXL_ASSERT_OK(g_world->Notify(from, "ok", 2));
    }
  }
  HIXL_ASSERT_OK(g_world->Barrier());
}

// A full queue refuses the sender clearly and drops nothing.
TEST(Notify, FullQueueRefusesAndKeepsEverything) {
  const int n = Size(), me = Rank();
  if (n < 2) GTEST_SKIP();
  constexpr int kDepth = 8;  // HIXL_NOTIFY_QUEUE_DEPTH in the test's environment
  if (me == 1) {
    for (int i = 0; i < kDepth; ++i) HIXL_ASSERT_OK(g_world->Notify(0, &i, sizeof i));
    int extra = 99;
    Status s = g_world->Notify(0, &extra, sizeof extra);
    EXPECT_EQ(s.code(), Errc::kQueueFull) << s.ToString();
    EXPECT_NE(s.message().find("full"), std::string::npos) << s.message();
  }
  HIXL_ASSERT_OK(g_world->Barrier());
  if (me == 0) {
    hixl_notification_t notes[16];
    int count = -1;
    ASSERT_EQ(hixl_get_notifications(notes, 16, &count), HIXL_SUCCESS);
    ASSERT_EQ(count, kDepth);
    for (int i = 0; i < kDepth; ++i) {
      int v;
      ASSERT_EQ(notes[i].src_rank, 1);
      ASSERT_EQ(notes[i].len, sizeof v);
      std::memcpy(&v, notes[i].data, sizeof v);
      EXPECT_EQ(v, i) << "in order";
    }
    ASSERT_EQ(hixl_get_notifications(notes, 16, &count), HIXL_SUCCESS);
    EXPECT_EQ(count, 0);
    EXPECT_EQ(g_world->WaitNotification(20).status().code(), Errc::kTimeout);
  }
  HIXL_ASSERT_OK(g_world->Barrier());
  std::string big(HIXL_NOTIFY_MAX_BYTES + 1, 'x');
  EXPECT_EQ(g_world->Notify(0, big.data(), big.size()).code(), Errc::kInvalidArg);
  EXPECT_EQ(g_world->Notify(n, "x", 1).code(), Errc::kInvalidRank);
  HIXL_ASSERT_OK(g_world->Barrier());
}

}  // namespace
}  // namespace hixl::test

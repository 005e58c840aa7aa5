// Unit tests of the rendezvous store (src/bootstrap/store.h).
//
// Nothing here sleeps to synchronise: threads meet through the store itself,
// joins and futures.  Every wait is bounded by a timeout, so a bug makes a
// test fail rather than hang.
#include "bootstrap/store.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.h"

namespace hixl {
// Lets GoogleTest print "HIXL_ERR_TIMEOUT" instead of the enum's bytes.
inline void PrintTo(Errc code, std::ostream* os) { *os << ErrcName(static_cast<int>(code)); }
}  // namespace hixl

namespace hixl::bootstrap {
namespace {

using Clock = std::chrono::steady_clock;

// The bound for waits that are expected to succeed.
constexpr int64_t kLongMs = 20000;
// How late a timeout may be reported and still pass (loaded CI machines,
// sanitizers).
constexpr int64_t kLateMs = 2500;

int64_t MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---------------------------------------------------------------------------
// MemoryStore

TEST(MemoryStoreTest, SetGetOverwriteDelete) {
  MemoryStore store;
  ASSERT_TRUE(store.Set("k", "v1").ok());
  Result<std::string> got = store.Get("k", 0);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "v1");
  ASSERT_TRUE(store.Set("k", "v2").ok());
  EXPECT_EQ(store.Get("k", 0).value(), "v2");
  ASSERT_TRUE(store.Delete("k").ok());
  EXPECT_EQ(store.Get("k", 0).status().code(), Errc::kTimeout);
  EXPECT_TRUE(store.Delete("never-there").ok());
}

TEST(MemoryStoreTest, BinaryKeysAndValues) {
  MemoryStore store;
  const std::string key("a\0b", 3);
  const std::string value("\0\xff\x01", 3);
  ASSERT_TRUE(store.Set(key, value).ok());
  EXPECT_EQ(store.Get(key, 0).value(), value);
  EXPECT_EQ(store.Get(std::string("a"), 0).status().code(), Errc::kTimeout);
  ASSERT_TRUE(store.Set("empty", "").ok());
  EXPECT_EQ(store.Get("empty", 0).value(), "");
}

TEST(MemoryStoreTest, GetBlocksUntilSet) {
  MemoryStore store;
  std::promise<void> started;
  auto getter = std::async(std::launch::async, [&] {
    started.set_value();
    return store.Get("late", kLongMs);
  });
  started.get_future().wait();
  ASSERT_TRUE(store.Set("late", "here").ok());
  Result<std::string> got = getter.get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "here");
}

TEST(MemoryStoreTest, GetTimesOutNamingKeyAndTimeout) {
  MemoryStore store;
  auto t0 = Clock::now();
  Result<std::string> got = store.Get("missing-key", 100);
  int64_t ms = MsSince(t0);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Errc::kTimeout);
  EXPECT_TRUE(Contains(got.status().message(), "'missing-key'")) << got.status().message();
  EXPECT_TRUE(Contains(got.status().message(), "100 ms")) << got.status().message();
  EXPECT_GE(ms, 100);
  EXPECT_LT(ms, 100 + kLateMs);
}

TEST(MemoryStoreTest, NegativeTimeoutIsInvalid) {
  MemoryStore store;
  EXPECT_EQ(store.Get("k", -1).status().code(), Errc::kInvalidArg);
  EXPECT_EQ(store.WaitAtLeast("k", 1, -1).code(), Errc::kInvalidArg);
}

TEST(MemoryStoreTest, AddStoresDecimalText) {
  MemoryStore store;
  EXPECT_EQ(store.Add("n", 5).value(), 5);
  EXPECT_EQ(store.Get("n", 0).value(), "5");
  EXPECT_EQ(store.Add("n", -7).value(), -2);
  EXPECT_EQ(store.Get("n", 0).value(), "-2");
  ASSERT_TRUE(store.Set("m", "40").ok());
  EXPECT_EQ(store.Add("m", 2).value(), 42);
  EXPECT_EQ(store.Add("m", 0).value(), 42);
}

TEST(MemoryStoreTest, AddRejectsNonIntegerAndOverflow) {
  MemoryStore store;
  ASSERT_TRUE(store.Set("s", "abc").ok());
  Result<int64_t> r = store.Add("s", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Errc::kInvalidArg);
  EXPECT_TRUE(Contains(r.status().message(), "'s'")) << r.status().message();
  EXPECT_EQ(store.Get("s", 0).value(), "abc");  // unchanged

  ASSERT_TRUE(store.Set("big", std::to_string(INT64_MAX)).ok());
  EXPECT_EQ(store.Add("big", 1).status().code(), Errc::kInvalidArg);
  EXPECT_EQ(store.Get("big", 0).value(), std::to_string(INT64_MAX));
}

TEST(MemoryStoreTest, AddFromThreadsGivesExactTotal) {
  MemoryStore store;
  constexpr int kThreads = 8, kAdds = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAdds; ++i) EXPECT_TRUE(store.Add("sum", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store.Get("sum", 0).value(), std::to_string(kThreads * kAdds));
}

TEST(MemoryStoreTest, WaitAtLeast) {
  MemoryStore store;
  EXPECT_TRUE(store.WaitAtLeast("absent", 0, 0).ok());  // absent counts as 0
  EXPECT_TRUE(store.WaitAtLeast("absent", -3, 0).ok());
  EXPECT_EQ(store.WaitAtLeast("absent", 1, 0).code(), Errc::kTimeout);

  auto waiter = std::async(std::launch::async, [&] { return store.WaitAtLeast("c", 3, kLongMs); });
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store.Add("c", 1).ok());
  Status s = waiter.get();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(MemoryStoreTest, WaitAtLeastTimeoutNamesKeyTargetAndValue) {
  MemoryStore store;
  ASSERT_TRUE(store.Add("count", 2).ok());
  auto t0 = Clock::now();
  Status s = store.WaitAtLeast("count", 3, 50);
  int64_t ms = MsSince(t0);
  EXPECT_EQ(s.code(), Errc::kTimeout);
  EXPECT_TRUE(Contains(s.message(), "'count'")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "50 ms")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "at least 3")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "'2'")) << s.message();
  EXPECT_GE(ms, 50);
  EXPECT_LT(ms, 50 + kLateMs);

  ASSERT_TRUE(store.Set("text", "x").ok());
  EXPECT_EQ(store.WaitAtLeast("text", 1, 0).code(), Errc::kInvalidArg);
}

TEST(MemoryStoreTest, WaitAtLeastAsBarrier) {
  MemoryStore store;
  constexpr int kThreads = 4, kRounds = 20;
  std::vector<std::future<void>> done;
  for (int t = 0; t < kThreads; ++t) {
    done.push_back(std::async(std::launch::async, [&store, t] {
      for (int r = 0; r < kRounds; ++r) {
        ASSERT_TRUE(store.Set(fmt::format("arrived/{}/{}", r, t), "1").ok());
        ASSERT_TRUE(store.Add("barrier", 1).ok());
        Status s = store.WaitAtLeast("barrier", int64_t{kThreads} * (r + 1), kLongMs);
        ASSERT_TRUE(s.ok()) << s.ToString();
        // Nobody passes before everyone arrived.
        for (int o = 0; o < kThreads; ++o) {
          ASSERT_TRUE(store.Get(fmt::format("arrived/{}/{}", r, o), 0).ok()) << r << " " << o;
        }
      }
    }));
  }
  for (auto& f : done) f.get();
}

// ---------------------------------------------------------------------------
// TcpStoreServer / TcpStoreClient

class TcpStoreTest : public ::testing::Test {
 protected:
  void StartWorld(int world_size) {
    Result<std::unique_ptr<TcpStoreServer>> r = TcpStoreServer::Start("127.0.0.1", 0, world_size);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    server_ = std::move(r).value();
    ASSERT_NE(server_->port(), 0);
  }

  std::unique_ptr<TcpStoreClient> Client(int rank) {
    Result<std::unique_ptr<TcpStoreClient>> r = TcpStoreClient::Connect("127.0.0.1", server_->port(), rank, 5000);
    if (!r.ok()) {
      ADD_FAILURE() << "rank " << rank << ": " << r.status().ToString();
      return nullptr;
    }
    return std::move(r).value();
  }

  // A port that nothing listens on (a moment ago a server had it).
  static uint16_t FreePort() {
    Result<std::unique_ptr<TcpStoreServer>> r = TcpStoreServer::Start("127.0.0.1", 0, 1);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)->port() : 0;
  }

  std::unique_ptr<TcpStoreServer> server_;
};

TEST_F(TcpStoreTest, StartRejectsEmptyWorld) {
  EXPECT_EQ(TcpStoreServer::Start("127.0.0.1", 0, 0).status().code(), Errc::kInvalidArg);
}

TEST_F(TcpStoreTest, SetGetAcrossClients) {
  StartWorld(2);
  auto c0 = Client(0), c1 = Client(1);
  ASSERT_TRUE(c0 && c1);
  ASSERT_TRUE(c0->Set("k", "v").ok());
  Result<std::string> got = c1->Get("k", 1000);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "v");

  const std::string key("bin\0key", 7), value("\0\x01\xff", 3);
  ASSERT_TRUE(c1->Set(key, value).ok());
  EXPECT_EQ(c0->Get(key, 0).value(), value);
  ASSERT_TRUE(c1->Set("empty", "").ok());
  EXPECT_EQ(c0->Get("empty", 0).value(), "");

  ASSERT_TRUE(c0->Delete("k").ok());
  EXPECT_EQ(c1->Get("k", 0).status().code(), Errc::kTimeout);
  EXPECT_TRUE(c1->Delete("never-there").ok());
  EXPECT_TRUE(c0->Close().ok());
  EXPECT_TRUE(c1->Close().ok());
}

TEST_F(TcpStoreTest, LargeValue) {
  StartWorld(2);
  auto c0 = Client(0), c1 = Client(1);
  ASSERT_TRUE(c0 && c1);
  std::string big(8 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + 7);
  ASSERT_TRUE(c0->Set("big", big).ok());
  Result<std::string> got = c1->Get("big", 5000);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == big);
}

TEST_F(TcpStoreTest, GetBlocksUntilAnotherThreadSets) {
  StartWorld(2);
  auto c0 = Client(0), c1 = Client(1);
  ASSERT_TRUE(c0 && c1);
  std::promise<void> started;
  auto getter = std::async(std::launch::async, [&] {
    started.set_value();
    return c1->Get("late", kLongMs);
  });
  started.get_future().wait();
  ASSERT_TRUE(c0->Set("late", "here").ok());
  Result<std::string> got = getter.get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "here");
}

TEST_F(TcpStoreTest, AddStoresDecimalText) {
  StartWorld(1);
  auto c = Client(0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->Add("n", 5).value(), 5);
  EXPECT_EQ(c->Get("n", 0).value(), "5");
  EXPECT_EQ(c->Add("n", -7).value(), -2);
  EXPECT_EQ(c->Get("n", 0).value(), "-2");

  ASSERT_TRUE(c->Set("s", "abc").ok());
  Result<int64_t> r = c->Add("s", 1);
  EXPECT_EQ(r.status().code(), Errc::kInvalidArg);
  EXPECT_TRUE(Contains(r.status().message(), "'s'")) << r.status().message();
  EXPECT_EQ(c->WaitAtLeast("s", 1, 1000).code(), Errc::kInvalidArg);
  // The connection is still fine after an error reply.
  EXPECT_EQ(c->Add("n", 2).value(), 0);
}

TEST_F(TcpStoreTest, AddFromManyClientsGivesExactTotals) {
  constexpr int kClients = 8, kAdds = 200;
  StartWorld(kClients);
  std::vector<std::future<std::vector<int64_t>>> results;
  for (int rank = 0; rank < kClients; ++rank) {
    results.push_back(std::async(std::launch::async, [this, rank] {
      std::vector<int64_t> seen;
      auto c = Client(rank);
      if (!c) return seen;
      for (int i = 0; i < kAdds; ++i) {
        Result<int64_t> r = c->Add("sum", 1);
        EXPECT_TRUE(r.ok()) << r.status().ToString();
        if (r.ok()) seen.push_back(*r);
      }
      EXPECT_TRUE(c->Close().ok());
      return seen;
    }));
  }
  std::set<int64_t> all;
  for (auto& f : results) {
    for (int64_t v : f.get()) EXPECT_TRUE(all.insert(v).second) << "value " << v << " seen twice";
  }
  // Every intermediate total was handed out exactly once.
  ASSERT_EQ(all.size(), size_t{kClients * kAdds});
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kClients * kAdds);
  auto c = Client(0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->Get("sum", 0).value(), std::to_string(kClients * kAdds));
}

TEST_F(TcpStoreTest, OneClientSharedByThreads) {
  constexpr int kThreads = 4, kAdds = 200;
  StartWorld(1);
  auto c = Client(0);
  ASSERT_TRUE(c);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAdds; ++i) EXPECT_TRUE(c->Add("sum", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->Get("sum", 0).value(), std::to_string(kThreads * kAdds));
}

TEST_F(TcpStoreTest, WaitAtLeastAsBarrierAmongFourClients) {
  constexpr int kRanks = 4, kRounds = 10;
  StartWorld(kRanks);
  std::vector<std::future<void>> done;
  for (int rank = 0; rank < kRanks; ++rank) {
    done.push_back(std::async(std::launch::async, [this, rank] {
      auto c = Client(rank);
      ASSERT_TRUE(c);
      for (int r = 0; r < kRounds; ++r) {
        ASSERT_TRUE(c->Set(fmt::format("arrived/{}/{}", r, rank), "1").ok());
        ASSERT_TRUE(c->Add("barrier", 1).ok());
        Status s = c->WaitAtLeast("barrier", int64_t{kRanks} * (r + 1), kLongMs);
        ASSERT_TRUE(s.ok()) << s.ToString();
        for (int o = 0; o < kRanks; ++o) {
          Result<std::string> got = c->Get(fmt::format("arrived/{}/{}", r, o), 0);
          ASSERT_TRUE(got.ok()) << "rank " << rank << " passed barrier " << r << " before rank " << o
                                << " arrived: " << got.status().ToString();
        }
      }
      EXPECT_TRUE(c->Close().ok());
    }));
  }
  for (auto& f : done) f.get();
}

TEST_F(TcpStoreTest, TimeoutsReturnKTimeoutInTime) {
  StartWorld(2);
  auto c = Client(1);
  ASSERT_TRUE(c);

  auto t0 = Clock::now();
  Result<std::string> got = c->Get("missing-key", 150);
  int64_t ms = MsSince(t0);
  ASSERT_EQ(got.status().code(), Errc::kTimeout) << got.status().ToString();
  EXPECT_TRUE(Contains(got.status().message(), "'missing-key'")) << got.status().message();
  EXPECT_TRUE(Contains(got.status().message(), "150 ms")) << got.status().message();
  EXPECT_TRUE(Contains(got.status().message(), "rank 1")) << got.status().message();
  EXPECT_GE(ms, 150);
  EXPECT_LT(ms, 150 + kLateMs);

  ASSERT_TRUE(c->Add("count", 2).ok());
  t0 = Clock::now();
  Status s = c->WaitAtLeast("count", 5, 150);
  ms = MsSince(t0);
  ASSERT_EQ(s.code(), Errc::kTimeout) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "'count'")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "at least 5")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "'2'")) << s.message();
  EXPECT_GE(ms, 150);
  EXPECT_LT(ms, 150 + kLateMs);

  t0 = Clock::now();
  EXPECT_EQ(c->Get("missing-key", 0).status().code(), Errc::kTimeout);
  EXPECT_LT(MsSince(t0), kLateMs);

  EXPECT_EQ(c->Get("k", -1).status().code(), Errc::kInvalidArg);
  EXPECT_EQ(c->WaitAtLeast("k", 1, -1).code(), Errc::kInvalidArg);

  // A timed-out wait leaves the connection usable, and the key can still come.
  ASSERT_TRUE(c->Set("missing-key", "now").ok());
  EXPECT_EQ(c->Get("missing-key", 0).value(), "now");
}

TEST_F(TcpStoreTest, ConcurrentDeadlinesFireEachInTime) {
  StartWorld(3);
  const int64_t timeouts[3] = {400, 100, 250};
  std::vector<std::future<std::pair<Status, int64_t>>> waits;
  for (int rank = 0; rank < 3; ++rank) {
    waits.push_back(std::async(std::launch::async, [this, rank, &timeouts] {
      auto c = Client(rank);
      if (!c) return std::make_pair(Status(Errc::kInternal, "no client"), int64_t{0});
      auto t0 = Clock::now();
      Status s = c->WaitAtLeast("never", 1, timeouts[rank]);
      int64_t ms = MsSince(t0);
      // Leave cleanly: a client dropped without Close() would fail the others.
      EXPECT_TRUE(c->Close().ok());
      return std::make_pair(s, ms);
    }));
  }
  for (int rank = 0; rank < 3; ++rank) {
    auto [s, ms] = waits[rank].get();
    EXPECT_EQ(s.code(), Errc::kTimeout) << s.ToString();
    EXPECT_GE(ms, timeouts[rank]);
    EXPECT_LT(ms, timeouts[rank] + kLateMs);
  }
}

TEST_F(TcpStoreTest, ClientDestroyedWithoutCloseFailsWaits) {
  StartWorld(4);
  auto c1 = Client(1), c2 = Client(2), c3 = Client(3);
  ASSERT_TRUE(c1 && c2 && c3);
  ASSERT_TRUE(c2->Set("present", "yes").ok());

  std::promise<void> started;
  auto t0 = Clock::now();
  auto waiter = std::async(std::launch::async, [&] {
    started.set_value();
    return c1->WaitAtLeast("never", 1, kLongMs);
  });
  started.get_future().wait();
  c3.reset();  // rank 3 dies: its connection closes without BYE

  Status s = waiter.get();
  EXPECT_EQ(s.code(), Errc::kPeerFailed) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "rank 3 left without finalizing")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "'never'")) << s.message();
  EXPECT_LT(MsSince(t0), kLongMs / 2);

  // Future waits that would block fail at once too...
  t0 = Clock::now();
  Result<std::string> got = c2->Get("absent", kLongMs);
  EXPECT_EQ(got.status().code(), Errc::kPeerFailed) << got.status().ToString();
  EXPECT_TRUE(Contains(got.status().message(), "rank 3")) << got.status().message();
  EXPECT_LT(MsSince(t0), kLongMs / 2);
  // ...but satisfiable ones and the non-blocking requests still work.
  EXPECT_EQ(c2->Get("present", kLongMs).value(), "yes");
  EXPECT_TRUE(c1->WaitAtLeast("absent", 0, kLongMs).ok());
  EXPECT_EQ(c1->Add("n", 3).value(), 3);
  EXPECT_TRUE(c1->WaitAtLeast("n", 3, kLongMs).ok());
}

// A rank that stops because another died may be seen going first: the
// error names every rank that left, so that the one that died is named too.
TEST_F(TcpStoreTest, AFailureNamesEveryRankThatLeft) {
  StartWorld(4);
  auto c1 = Client(1), c2 = Client(2), c3 = Client(3);
  ASSERT_TRUE(c1 && c2 && c3);
  c2.reset();
  Status first = c1->WaitAtLeast("never", 1, kLongMs);
  EXPECT_EQ(first.code(), Errc::kPeerFailed) << first.ToString();
  EXPECT_TRUE(Contains(first.message(), "rank 2 left without finalizing")) << first.message();
  EXPECT_FALSE(Contains(first.message(), "failed too")) << first.message();
  c3.reset();
  // The store learns of rank 3 when it reads its connection's end: ask until
  // it has (each answer is immediate: the world has failed already).
  Status both;
  for (int i = 0; i < 100000; ++i) {
    both = c1->WaitAtLeast("never", 1, 0);
    if (Contains(both.message(), "rank 3")) break;
    std::this_thread::yield();
  }
  EXPECT_EQ(both.code(), Errc::kPeerFailed) << both.ToString();
  EXPECT_TRUE(Contains(both.message(), "rank 2 left without finalizing")) << both.message();
  EXPECT_TRUE(Contains(both.message(), "; rank 3 failed too")) << both.message();
  // The world's question "has a rank died?" is told in words, not by its key.
  Status news = c1->WaitAtLeast(kDeathNewsKey, 1, kLongMs);
  EXPECT_EQ(news.code(), Errc::kPeerFailed) << news.ToString();
  EXPECT_TRUE(Contains(news.message(), "while rank 1 was waiting for news of a rank that died")) << news.message();
  EXPECT_FALSE(Contains(news.message(), kDeathNewsKey)) << news.message();
}

TEST_F(TcpStoreTest, CloseIsNotAFailure) {
  StartWorld(4);
  auto c1 = Client(1), c3 = Client(3);
  ASSERT_TRUE(c1 && c3);
  ASSERT_TRUE(c3->Set("from3", "x").ok());
  Status closed = c3->Close();
  ASSERT_TRUE(closed.ok()) << closed.ToString();
  EXPECT_TRUE(c3->Close().ok());  // twice is fine
  EXPECT_EQ(c3->Set("k", "v").code(), Errc::kNotInitialized);
  c3.reset();

  Status s = c1->WaitAtLeast("never", 1, 200);
  EXPECT_EQ(s.code(), Errc::kTimeout) << s.ToString();
  EXPECT_EQ(c1->Get("from3", 0).value(), "x");
  // The rank may come back after a clean leave.
  auto again = Client(3);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->Close().ok());
}

TEST_F(TcpStoreTest, ServerDestructionFailsClientsPromptly) {
  StartWorld(2);
  auto c0 = Client(0), c1 = Client(1);
  ASSERT_TRUE(c0 && c1);
  std::promise<void> started;
  auto waiter = std::async(std::launch::async, [&] {
    started.set_value();
    return c1->Get("never", kLongMs);
  });
  started.get_future().wait();
  auto t0 = Clock::now();
  server_.reset();
  EXPECT_LT(MsSince(t0), kLateMs);  // the destructor stops promptly

  Result<std::string> got = waiter.get();
  EXPECT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Errc::kPeerFailed) << got.status().ToString();
  EXPECT_LT(MsSince(t0), kLongMs / 2);

  t0 = Clock::now();
  Status s = c0->Set("k", "v");
  EXPECT_EQ(s.code(), Errc::kPeerFailed) << s.ToString();
  EXPECT_EQ(c0->Get("k", kLongMs).status().code(), Errc::kPeerFailed);
  EXPECT_EQ(c0->Add("k", 1).status().code(), Errc::kPeerFailed);
  EXPECT_FALSE(c0->Close().ok());
  EXPECT_FALSE(c1->Close().ok());
  EXPECT_LT(MsSince(t0), kLateMs);
}

TEST_F(TcpStoreTest, ConnectRetriesUntilTheServerStarts) {
  uint16_t port = FreePort();
  ASSERT_NE(port, 0);
  auto connecting =
      std::async(std::launch::async, [port] { return TcpStoreClient::Connect("127.0.0.1", port, 0, kLongMs); });
  Result<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start("127.0.0.1", port, 1);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Result<std::unique_ptr<TcpStoreClient>> c = connecting.get();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->Set("k", "v").ok());
  EXPECT_TRUE((*c)->Close().ok());
}

TEST_F(TcpStoreTest, ConnectTimesOutWithoutServer) {
  uint16_t port = FreePort();
  ASSERT_NE(port, 0);
  auto t0 = Clock::now();
  Result<std::unique_ptr<TcpStoreClient>> c = TcpStoreClient::Connect("127.0.0.1", port, 0, 200);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Errc::kTimeout) << c.status().ToString();
  EXPECT_TRUE(Contains(c.status().message(), std::to_string(port))) << c.status().message();
  EXPECT_LT(MsSince(t0), 200 + kLateMs);
}

TEST_F(TcpStoreTest, RejectsBadAndDuplicateRanks) {
  StartWorld(4);
  Result<std::unique_ptr<TcpStoreClient>> bad = TcpStoreClient::Connect("127.0.0.1", server_->port(), 4, 5000);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Errc::kInvalidRank);
  EXPECT_TRUE(Contains(bad.status().message(), "rank 4")) << bad.status().message();
  EXPECT_EQ(TcpStoreClient::Connect("127.0.0.1", server_->port(), -1, 5000).status().code(), Errc::kInvalidRank);

  auto c1 = Client(1);
  ASSERT_TRUE(c1);
  Result<std::unique_ptr<TcpStoreClient>> dup = TcpStoreClient::Connect("127.0.0.1", server_->port(), 1, 5000);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), Errc::kInvalidRank);
  EXPECT_TRUE(Contains(dup.status().message(), "rank 1")) << dup.status().message();

  // Rejected connections are not ranks: their closing fails nobody.
  EXPECT_EQ(c1->WaitAtLeast("never", 1, 100).code(), Errc::kTimeout);
}

TEST_F(TcpStoreTest, StalledConnectionDoesNotBlockOthers) {
  StartWorld(2);
  // A raw connection that sends half a frame and then nothing.
  Result<net::Fd> raw = net::Connect("127.0.0.1", server_->port(), net::DeadlineIn(5000));
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  // The server's greeting (base/auth.h) comes first; no secret here.
  ASSERT_TRUE(
      auth::ClientHandshake(raw->get(), std::nullopt, auth::Kind::kStore, net::DeadlineIn(5000), "the store").ok());
  const char partial[] = {static_cast<char>(200), 0, 0, 0, 1, 2, 3};
  ASSERT_TRUE(net::SendAll(raw->get(), partial, sizeof(partial), net::DeadlineIn(5000)).ok());

  auto c0 = Client(0), c1 = Client(1);
  ASSERT_TRUE(c0 && c1);
  auto getter = std::async(std::launch::async, [&] { return c1->Get("k", kLongMs); });
  ASSERT_TRUE(c0->Set("k", "v").ok());
  EXPECT_EQ(getter.get().value(), "v");
  EXPECT_EQ(c0->Add("n", 1).value(), 1);

  // It never said HELLO, so its going away is no failure.
  raw->Reset();
  EXPECT_EQ(c1->WaitAtLeast("never", 1, 100).code(), Errc::kTimeout);
}

TEST_F(TcpStoreTest, RequestBeforeHelloIsRejected) {
  StartWorld(1);
  Result<net::Fd> raw = net::Connect("127.0.0.1", server_->port(), net::DeadlineIn(5000));
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  // The server's greeting (base/auth.h) comes first; no secret here.
  ASSERT_TRUE(
      auth::ClientHandshake(raw->get(), std::nullopt, auth::Kind::kStore, net::DeadlineIn(5000), "the store").ok());
  net::Writer w;
  w.Put<uint8_t>(3);  // GET
  w.PutBytes("k");
  w.Put<int64_t>(0);
  ASSERT_TRUE(net::SendFrame(raw->get(), w.str(), net::DeadlineIn(5000)).ok());
  Result<std::string> reply = net::RecvFrame(raw->get(), net::DeadlineIn(5000));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  net::Reader r(*reply);
  int32_t code = 0;
  std::string message;
  ASSERT_TRUE(r.Get(&code) && r.GetBytes(&message));
  EXPECT_EQ(code, static_cast<int32_t>(Errc::kBootstrap));
  EXPECT_TRUE(Contains(message, "HELLO")) << message;
}

TEST_F(TcpStoreTest, IdleServerDoesNotSpin) {
  StartWorld(2);
  auto c = Client(0);
  ASSERT_TRUE(c);
  auto cpu_ms = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1000;
  };
  auto cpu0 = cpu_ms();
  auto t0 = Clock::now();
  EXPECT_EQ(c->WaitAtLeast("never", 1, 600).code(), Errc::kTimeout);
  int64_t wall = MsSince(t0);
  auto cpu = cpu_ms() - cpu0;
  EXPECT_GE(wall, 600);
  EXPECT_LT(cpu, 200) << "the process used " << cpu << " ms of CPU during a " << wall << " ms wait";
}

}  // namespace
}  // namespace hixl::bootstrap

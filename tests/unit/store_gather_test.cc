// Store::Gather: every key of a prefix in one request (the world's init and
// hixl_allgather use it), over MemoryStore and the TCP store; and the GATHER
// message's encoding (what a hostile peer may send is bounded).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/store.h"
#include "bootstrap/store_protocol.h"

namespace hixl::bootstrap {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kLongMs = 20000;

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class GatherTest : public ::testing::TestWithParam<bool> {  // true: TCP store
 protected:
  void SetUp() override {
    if (!GetParam()) {
      memory_ = std::make_shared<MemoryStore>();
      return;
    }
    auto server = TcpStoreServer::Start("127.0.0.1", 0, 4);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }
  // The store as rank `rank` sees it.
  std::shared_ptr<Store> As(int rank) {
    if (memory_) return memory_;
    auto c = TcpStoreClient::Connect("127.0.0.1", server_->port(), rank, 5000);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::shared_ptr<Store>(std::move(c).value()) : nullptr;
  }

  std::shared_ptr<MemoryStore> memory_;
  std::unique_ptr<TcpStoreServer> server_;
};

TEST_P(GatherTest, ReturnsEveryValueInKeyOrderOnceAllAreSet) {
  auto a = As(0), b = As(1);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->Set("rec/2", "two").ok());
  // Parked until rec/0 and rec/1 come, set out of order by another rank.
  auto waiter = std::async(std::launch::async, [&] { return a->Gather("rec/", 3, kLongMs); });
  ASSERT_TRUE(b->Set("rec/1", std::string("o\0ne", 4)).ok());
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  ASSERT_TRUE(b->Set("rec/0", "").ok());
  Result<std::vector<std::string>> got = waiter.get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got.value(), (std::vector<std::string>{"", std::string("o\0ne", 4), "two"}));
  // Other keys with the prefix are not part of it; a second gather answers at once.
  ASSERT_TRUE(b->Set("rec/3", "extra").ok());
  got = b->Gather("rec/", 3, 0);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got.value().size(), 3u);
  got = a->Gather("rec/", 0, 0);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got.value().empty());
}

TEST_P(GatherTest, ManyGatherersAndSettersAtOnce) {
  std::vector<std::shared_ptr<Store>> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(As(r));
  for (int round = 0; round < 20; ++round) {
    std::vector<std::future<Result<std::vector<std::string>>>> all;
    for (int r = 0; r < 4; ++r) {
      all.push_back(std::async(std::launch::async, [&, r] {
        const std::string prefix = "g/" + std::to_string(round) + "/";
        Status s = ranks[static_cast<size_t>(r)]->Set(prefix + std::to_string(r), "v" + std::to_string(r));
        if (!s.ok()) return Result<std::vector<std::string>>(s);
        return ranks[static_cast<size_t>(r)]->Gather(prefix, 4, kLongMs);
      }));
    }
    for (auto& f : all) {
      Result<std::vector<std::string>> got = f.get();
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(got.value(), (std::vector<std::string>{"v0", "v1", "v2", "v3"}));
    }
  }
}

TEST_P(GatherTest, TimeoutNamesTheFirstMissingKey) {
  auto a = As(0);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->Set("t/0", "x").ok());
  ASSERT_TRUE(a->Set("t/2", "x").ok());
  Result<std::vector<std::string>> got = a->Gather("t/", 3, 30);
  EXPECT_EQ(got.status().code(), Errc::kTimeout) << got.status().ToString();
  EXPECT_TRUE(Contains(got.status().message(), "'t/1' is not")) << got.status().message();
  EXPECT_TRUE(Contains(got.status().message(), "3 keys")) << got.status().message();
}

TEST_P(GatherTest, RefusesBadCountsAndOversizedReplies) {
  auto a = As(0);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->Gather("x/", -1, 0).status().code(), Errc::kInvalidArg);
  EXPECT_EQ(a->Gather("x/", int64_t{1} << 21, 0).status().code(), Errc::kInvalidArg);
  EXPECT_EQ(a->Gather("x/", 1, -5).status().code(), Errc::kInvalidArg);
  // Two values of 40 MiB: each fits the store, together not one reply.
  const std::string big(40u << 20, 'b');
  ASSERT_TRUE(a->Set("big/0", big).ok());
  ASSERT_TRUE(a->Set("big/1", big).ok());
  Result<std::vector<std::string>> got = a->Gather("big/", 2, 0);
  EXPECT_EQ(got.status().code(), Errc::kInvalidArg) << got.status().ToString();
  EXPECT_TRUE(Contains(got.status().message(), "larger")) << got.status().message();
  // The store still serves the connection afterwards.
  EXPECT_TRUE(a->Set("after", "ok").ok());
}

TEST_P(GatherTest, AFailedRankEndsAParkedGather) {
  if (!GetParam()) GTEST_SKIP() << "a MemoryStore has no ranks";
  auto a = As(0);
  auto dying = As(3);
  ASSERT_TRUE(a && dying);
  auto waiter = std::async(std::launch::async, [&] { return a->Gather("never/", 2, kLongMs); });
  EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  dying.reset();  // closes without BYE
  Result<std::vector<std::string>> got = waiter.get();
  EXPECT_EQ(got.status().code(), Errc::kPeerFailed) << got.status().ToString();
  EXPECT_TRUE(Contains(got.status().message(), "rank 3")) << got.status().message();
  EXPECT_TRUE(Contains(got.status().message(), "'never/0' is not")) << got.status().message();
}

INSTANTIATE_TEST_SUITE_P(Stores, GatherTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Tcp" : "Memory"; });

TEST(GatherProtocol, RequestRoundTripsAndHostileCountsAreRefused) {
  detail::Request q;
  q.op = detail::Op::kGather;
  q.key = "peer/";
  q.target = 256;
  q.timeout_ms = 1000;
  detail::Request back;
  ASSERT_EQ(detail::DecodeRequest(detail::EncodeRequest(q), &back), detail::Decoded::kOk);
  EXPECT_EQ(back.key, "peer/");
  EXPECT_EQ(back.target, 256);
  EXPECT_EQ(back.timeout_ms, 1000);
  for (int64_t bad : {int64_t{-1}, detail::kMaxGather + 1, INT64_MIN}) {
    q.target = bad;
    EXPECT_EQ(detail::DecodeRequest(detail::EncodeRequest(q), &back), detail::Decoded::kBadFields) << bad;
  }
}

TEST(GatherProtocol, ReplyDecodingChecksCountLengthsAndTrailingBytes) {
  const std::string a = "alpha", b;
  std::optional<std::string> fields = detail::EncodeValues({&a, &b});
  ASSERT_TRUE(fields);
  std::vector<std::string> out;
  ASSERT_TRUE(detail::DecodeValues(*fields, 2, &out));
  EXPECT_EQ(out, (std::vector<std::string>{"alpha", ""}));
  EXPECT_FALSE(detail::DecodeValues(*fields, 3, &out));               // another count
  EXPECT_FALSE(detail::DecodeValues(*fields + "x", 2, &out));         // trailing bytes
  EXPECT_FALSE(detail::DecodeValues(fields->substr(0, 9), 2, &out));  // cut
  std::string lying = *fields;
  lying[4] = '\xff';  // the first value claims to be longer than what follows
  EXPECT_FALSE(detail::DecodeValues(lying, 2, &out));
  // A count far beyond what the bytes can hold is refused before anything
  // is reserved for it (the fuzzer found the out-of-memory).
  std::string huge("\x00\x00\x00\x2a", 4);
  huge += std::string(14, '\0');
  EXPECT_FALSE(detail::DecodeValues(huge, 0x2a000000, &out));
}

}  // namespace
}  // namespace hixl::bootstrap

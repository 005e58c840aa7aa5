// Conformance of every transport built in: lanes (transport.h), the
// transfers a front door completes apart from the rest (an OpenSHMEM
// context's).  On every transport a lane carries puts, gets and puts with
// signal, its flush completes them, and a peer's flush or the whole flush
// completes every lane's; lanes close and open again, and Disconnect takes
// them with the peer.  Over UCX each lane has an endpoint of its own, and
// one lane's flush leaves the others' transfers to their own flushes.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "transport_fixture.h"
#ifdef HIXL_TEST_HAVE_UCX
#include "transport/ucx/endpoint.h"
#endif

namespace hixl::transport::test {
namespace {

constexpr size_t kBytes = size_t{256} << 10;

// Puts kBytes of seed's bytes at `at` on `lane`; false (with a failure
// recorded) when the call fails.
bool PutOnLane(Transport& t, int lane, const RemoteKey& key, Memory& m, uint64_t at, std::vector<uint8_t>* src,
               uint32_t seed) {
  src->resize(kBytes);
  Fill(src->data(), src->size(), seed);
  Status s = t.PutOn(lane, 1, key, src->data(), m.addr() + at, src->size());
  EXPECT_TRUE(s.ok()) << "lane " << lane << ": " << s.message();
  return s.ok();
}

TEST_P(TransportTest, LanesCarryTransfersAndTheirFlushesCompleteThem) {
  ConnectBoth();
  Memory m(Backing::kPrivate, 4 << 20, 21);
  auto key = Expose(1, m, 0);
  ASSERT_TRUE(key);
  Transport& t = *t_[0];
  for (int cycle = 0; cycle < 2; ++cycle) {
    SCOPED_TRACE(cycle == 0 ? "lanes new" : "lanes closed and opened again");
    std::vector<uint8_t> a, b, c;
    ASSERT_TRUE(PutOnLane(t, 1, *key, m, 0, &a, 70 + cycle));
    ASSERT_TRUE(PutOnLane(t, 2, *key, m, kBytes, &b, 80 + cycle));
    Status s = t.FlushLane(1, 1);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(FirstDifference(m.data(), a.data(), kBytes), kBytes) << "lane 1's put after lane 1's flush";
    s = t.FlushLane(1, 2);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(FirstDifference(m.data() + kBytes, b.data(), kBytes), kBytes) << "lane 2's put after lane 2's flush";

    // A get on a lane lands by its flush.
    std::vector<uint8_t> back(kBytes, 0);
    Fill(m.data() + 2 * kBytes, kBytes, 90 + cycle);
    ASSERT_TRUE(t.GetOn(2, 1, *key, m.addr() + 2 * kBytes, back.data(), kBytes).ok());
    ASSERT_TRUE(t.FlushLane(1, 2).ok());
    EXPECT_EQ(FirstDifference(back.data(), m.data() + 2 * kBytes, kBytes), kBytes) << "lane 2's get";

    // A put with signal on a lane: the signal's word and its data, and a
    // put before it on the same lane, by the lane's flush.
    std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(m.data() + 3 * kBytes));
    word.store(0);
    ASSERT_TRUE(PutOnLane(t, 3, *key, m, 4 * kBytes, &c, 100 + cycle));
    Fill(a.data(), kBytes, 105 + cycle);
    ASSERT_TRUE(
        t.PutSignalOn(3, 1, key.get(), a.data(), m.addr(), kBytes, *key, m.addr() + 3 * kBytes, AtomicOp::kAdd, 7)
            .ok());
    ASSERT_TRUE(t.FlushLane(1, 3).ok());
    EXPECT_EQ(word.load(), 7u);
    EXPECT_EQ(FirstDifference(m.data(), a.data(), kBytes), kBytes) << "the signal's data";
    EXPECT_EQ(FirstDifference(m.data() + 4 * kBytes, c.data(), kBytes), kBytes) << "lane 3's put before the signal";

    // The peer's flush and the whole flush complete every lane's.
    ASSERT_TRUE(PutOnLane(t, 3, *key, m, 0, &a, 110 + cycle));
    ASSERT_TRUE(t.Flush(1).ok());
    EXPECT_EQ(FirstDifference(m.data(), a.data(), kBytes), kBytes) << "lane 3's put after the peer's flush";
    ASSERT_TRUE(PutOnLane(t, 2, *key, m, kBytes, &b, 120 + cycle));
    ASSERT_TRUE(t.Flush().ok());
    EXPECT_EQ(FirstDifference(m.data() + kBytes, b.data(), kBytes), kBytes) << "lane 2's put after the whole flush";

    for (int lane : {1, 2, 3}) t.CloseLane(lane);
  }
  // A lane never used, a peer never connected: nothing in flight.
  EXPECT_TRUE(t.FlushLane(1, 9).ok());
  EXPECT_TRUE(t.FlushLane(7, 1).ok());
  t.CloseLane(9);
  key.reset();
  Unexpose(1, m);
}

// Disconnect takes the peer's lanes with it: calls on any lane fail, and
// after Connect and a new key they work again.
TEST_P(TransportTest, DisconnectTakesThePeersLanes) {
  ConnectBoth();
  Memory m(Backing::kPrivate, 1 << 20, 22);
  auto blob = t_[1]->RegisterRegion(m.region());
  ASSERT_TRUE(blob.ok()) << blob.status().message();
  hosts_[1]->Add(m.addr(), m.len());
  auto key = t_[0]->UnpackKey(1, m.addr(), m.len(), blob.value());
  ASSERT_TRUE(key.ok()) << key.status().message();
  std::vector<uint8_t> src(4096, 0x5C);
  ASSERT_TRUE(t_[0]->PutOn(2, 1, *key.value(), src.data(), m.addr(), src.size()).ok());
  t_[0]->Disconnect(1);
  Status s = t_[0]->PutOn(2, 1, *key.value(), src.data(), m.addr(), src.size());
  EXPECT_EQ(s.code(), Errc::kNotConnected) << s.message();
  ASSERT_TRUE(t_[0]->Connect(1, t_[1]->LocalAddress(), GetParam().reached_at).ok());
  auto again = t_[0]->UnpackKey(1, m.addr(), m.len(), blob.value());
  ASSERT_TRUE(again.ok()) << again.status().message();
  std::memset(m.data(), 0, src.size());
  ASSERT_TRUE(t_[0]->PutOn(2, 1, *again.value(), src.data(), m.addr(), src.size()).ok());
  ASSERT_TRUE(t_[0]->FlushLane(1, 2).ok());
  EXPECT_EQ(FirstDifference(m.data(), src.data(), src.size()), src.size());
  t_[0]->CloseLane(2);
  key.value().reset();
  again.value().reset();
  Unexpose(1, m);
}

#ifdef HIXL_TEST_HAVE_UCX
// Waits (bounded) until this process has `n` UCX endpoints open: the
// peer's side of a listener connection, in this process too, opens and
// closes on its progress thread.
bool EndpointsReach(int64_t n) {
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       ucx::LiveEndpoints() != n && std::chrono::steady_clock::now() < until;) {
    std::this_thread::yield();
  }
  return ucx::LiveEndpoints() == n;
}

// Over UCX a lane is an endpoint of its own to the peer: a flush of one
// lane flushes that endpoint only, and the other lane's transfers wait for
// their own flush (one shared endpoint would have been flushed once, for
// both).  Closing the lanes closes their endpoints.
TEST_P(TransportTest, UcxLanesHaveEndpointsOfTheirOwn) {
  if (GetParam().transport != "ucx") GTEST_SKIP() << "counts UCX endpoints";
  // Through the peer's listener its side is an endpoint of hixl's too.
  const int64_t per_lane = GetParam().reached_at.empty() ? 1 : 2;
  ConnectBoth();
  Memory m(Backing::kPrivate, 4 << 20, 23);
  const int64_t before = ucx::LiveEndpoints();
  auto key = Expose(1, m, 0);  // makes the peer's own endpoint
  ASSERT_TRUE(key);
  Transport& t = *t_[0];
  std::vector<uint8_t> a, b;
  ASSERT_TRUE(PutOnLane(t, 0, *key, m, 0, &a, 1));
  ASSERT_TRUE(t.Flush(1).ok());
  ASSERT_TRUE(EndpointsReach(before + per_lane)) << ucx::LiveEndpoints();
  const int64_t endpoints = ucx::LiveEndpoints();
  ASSERT_TRUE(PutOnLane(t, 1, *key, m, 0, &a, 2));
  ASSERT_TRUE(PutOnLane(t, 2, *key, m, kBytes, &b, 3));
  const int64_t flushes = ucx::EndpointFlushes();
  ASSERT_TRUE(t.FlushLane(1, 1).ok());
  EXPECT_EQ(ucx::EndpointFlushes(), flushes + 1) << "lane 1's flush flushes lane 1's endpoint only";
  EXPECT_EQ(FirstDifference(m.data(), a.data(), kBytes), kBytes);
  ASSERT_TRUE(t.FlushLane(1, 2).ok());
  EXPECT_EQ(ucx::EndpointFlushes(), flushes + 2) << "lane 2's put was left to lane 2's own flush";
  EXPECT_EQ(FirstDifference(m.data() + kBytes, b.data(), kBytes), kBytes);
  ASSERT_TRUE(t.FlushLane(1, 1).ok());
  EXPECT_EQ(ucx::EndpointFlushes(), flushes + 2) << "nothing left on lane 1";
  EXPECT_TRUE(EndpointsReach(endpoints + 2 * per_lane))
      << "each lane has an endpoint of its own: " << ucx::LiveEndpoints() << " open, " << endpoints << " before";
  t.CloseLane(1);
  t.CloseLane(2);
  EXPECT_TRUE(EndpointsReach(endpoints)) << "closed lanes leave no endpoint: " << ucx::LiveEndpoints() << " open, "
                                         << endpoints << " before";
  key.reset();
  Unexpose(1, m);
}
#endif

}  // namespace
}  // namespace hixl::transport::test

// The relay's target side one slot at a time (transport/shm/relay_slot.h)
// and through ServeRelay on a channel in this process: what a peer writes
// into a slot is copied once, checked, and only then done; a malformed
// descriptor is answered HIXL_ERR_INVALID_ARG without touching memory.
#include "transport/shm/relay_slot.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <vector>

#include "base/status.h"
#include "transport/shm/mapping.h"
#include "transport/shm/relay.h"

namespace hixl::transport::shm {
namespace {

// One registered range; counts the checks and can run a hook between the
// check and the access (as a peer rewriting its slot meanwhile would).
class OneRegion final : public Host {
 public:
  OneRegion(const void* base, uint64_t len) : base_(reinterpret_cast<uint64_t>(base)), len_(len) {}
  int rank() const override { return 0; }
  int64_t timeout_ms() const override { return 1000; }
  bool AccessLocalRange(uint64_t addr, uint64_t len, const std::function<void()>& fn) const override {
    ++checks;
    if (!(addr >= base_ && len <= len_ && addr - base_ <= len_ - len)) return false;
    if (between) between();
    fn();
    return true;
  }
  mutable int checks = 0;
  std::function<void()> between;

 private:
  uint64_t base_, len_;
};

uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

SlotRequest Request(uint32_t op, const void* addr, uint64_t len) {
  SlotRequest r;
  r.op = op;
  r.addr = Addr(addr);
  r.len = len;
  return r;
}

TEST(RelaySlot, CheckRequestAcceptsWellFormedOnly) {
  alignas(8) uint64_t word = 0;
  EXPECT_EQ(CheckRequest(Request(kOpPut, &word, 0)), 0);
  EXPECT_EQ(CheckRequest(Request(kOpGet, &word, kSlotBytes)), 0);
  EXPECT_EQ(CheckRequest(Request(kOpPut, &word, kSlotBytes + 1)), HIXL_ERR_INVALID_ARG);
  EXPECT_EQ(CheckRequest(Request(kOpGet, &word, UINT64_MAX)), HIXL_ERR_INVALID_ARG);
  for (uint32_t op : {0u, 4u, 0x80000001u, UINT32_MAX}) {
    EXPECT_EQ(CheckRequest(Request(op, &word, 8)), HIXL_ERR_INVALID_ARG) << op;
  }
  SlotRequest a = Request(kOpAtomic, &word, 8);
  for (uint32_t aop = 0; aop <= 3; ++aop) {
    a.atomic_op = aop;
    EXPECT_EQ(CheckRequest(a), 0) << aop;
  }
  a.atomic_op = 4;
  EXPECT_EQ(CheckRequest(a), HIXL_ERR_INVALID_ARG);
  a.atomic_op = 0x100;  // would be kFetch if cut to AtomicOp's 8 bits
  EXPECT_EQ(CheckRequest(a), HIXL_ERR_INVALID_ARG);
  a.atomic_op = 0;
  for (uint64_t len : {0, 1, 7, 9, 16}) {
    a.len = len;
    EXPECT_EQ(CheckRequest(a), HIXL_ERR_INVALID_ARG) << len;
  }
  a.len = 8;
  a.addr = Addr(&word) + 4;
  EXPECT_EQ(CheckRequest(a), HIXL_ERR_INVALID_ARG);
}

TEST(RelaySlot, ServeRequestDoesWhatIsAsked) {
  alignas(8) std::array<uint8_t, 64> region{};
  std::vector<uint8_t> data(kSlotBytes, 0x5a);
  OneRegion host(region.data(), region.size());

  SlotAnswer a = ServeRequest(Request(kOpPut, region.data() + 8, 16), data.data(), host);
  EXPECT_EQ(a.status, 0);
  for (size_t i = 0; i < region.size(); ++i) EXPECT_EQ(region[i], i >= 8 && i < 24 ? 0x5a : 0) << i;

  region[40] = 7;
  a = ServeRequest(Request(kOpGet, region.data() + 40, 1), data.data(), host);
  EXPECT_EQ(a.status, 0);
  EXPECT_EQ(data[0], 7);
  EXPECT_EQ(data[1], 0x5a);

  uint64_t word = 41;
  std::memcpy(region.data() + 48, &word, 8);
  SlotRequest add = Request(kOpAtomic, region.data() + 48, 8);
  add.atomic_op = static_cast<uint32_t>(AtomicOp::kAdd);
  add.operand = 1;
  a = ServeRequest(add, data.data(), host);
  EXPECT_EQ(a.status, 0);
  EXPECT_EQ(a.result, 41u);
  std::memcpy(&word, region.data() + 48, 8);
  EXPECT_EQ(word, 42u);

  // Past the region: refused as not registered, nothing done.
  const auto before = region;
  a = ServeRequest(Request(kOpPut, region.data() + 60, 8), data.data(), host);
  EXPECT_EQ(a.status, HIXL_ERR_NOT_REGISTERED);
  EXPECT_EQ(region, before);
}

// The channel a peer would pass, in this process, with slot `i` posted.
struct Channel {
  Mapping map;
  ChannelHeader* h = nullptr;
  Channel() {
    void* p = ::mmap(nullptr, RelayChannelBytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    map = Mapping(p, RelayChannelBytes());
    h = new (p) ChannelHeader{};
    h->magic = kChannelMagic;
    h->slots = kSlots;
  }
  Slot& Post(uint32_t i, const SlotRequest& r) {
    Slot& s = h->slot[i];
    WriteRequest(s, r);
    s.status = 0;
    s.result = 0;
    s.state.store(kPosted, std::memory_order_release);
    return s;
  }
};

TEST(RelaySlot, APeerRewritingItsSlotAfterTheCheckChangesNothing) {
  // A fetch of a registered word is posted and checked; before it is done
  // the peer turns it into a swap of another value at another address.
  // What is done is the fetch that was checked: the slot is read once.
  alignas(8) std::array<uint64_t, 4> region{11, 22, 33, 44};
  alignas(8) uint64_t elsewhere = 55;
  OneRegion host(region.data(), sizeof(region));
  Channel ch;
  SlotRequest fetch = Request(kOpAtomic, &region[1], 8);
  fetch.atomic_op = static_cast<uint32_t>(AtomicOp::kFetch);
  Slot& s = ch.Post(0, fetch);
  host.between = [&] {
    s.atomic_op = static_cast<uint32_t>(AtomicOp::kSet);
    s.operand = 0xbad;
    s.addr = Addr(&elsewhere);
    s.op = kOpPut;
    s.len = kSlotBytes;
  };
  uint32_t next = 0;
  ServeRelay(ch.map, &next, host);
  EXPECT_EQ(next, 1u);
  EXPECT_EQ(host.checks, 1);
  EXPECT_EQ(s.state.load(), kDone);
  EXPECT_EQ(s.status, 0);
  EXPECT_EQ(s.result, 22u);
  EXPECT_EQ(region, (std::array<uint64_t, 4>{11, 22, 33, 44}));
  EXPECT_EQ(elsewhere, 55u);
}

TEST(RelaySlot, MalformedDescriptorsAreRefusedWithoutAnAccess) {
  // Each is answered HIXL_ERR_INVALID_ARG before the registry is asked.  An
  // atomic of fewer than 8 bytes at the end of a region once reached the
  // 8 bytes there, past the region, after a check of the shorter range.
  alignas(8) std::array<uint64_t, 4> region{1, 2, 3, 4};
  OneRegion host(region.data(), sizeof(region));
  Channel ch;
  std::vector<SlotRequest> bad;
  SlotRequest r = Request(kOpAtomic, region.data() + 4, 0);  // one past the end
  r.atomic_op = static_cast<uint32_t>(AtomicOp::kSet);
  r.operand = 0xbad;
  bad.push_back(r);
  r = Request(kOpAtomic, reinterpret_cast<uint8_t*>(&region[3]) + 4, 4);  // the last 4 bytes, misaligned
  r.atomic_op = static_cast<uint32_t>(AtomicOp::kAdd);
  r.operand = 1;
  bad.push_back(r);
  r = Request(kOpAtomic, &region[0], 8);
  r.atomic_op = 9;  // no such AtomicOp
  bad.push_back(r);
  bad.push_back(Request(0, &region[0], 8));   // no op
  bad.push_back(Request(77, &region[0], 8));  // an unknown op
  bad.push_back(Request(kOpPut, &region[0], kSlotBytes + 1));
  bad.push_back(Request(kOpGet, &region[0], UINT64_MAX));
  ASSERT_LE(bad.size(), kSlots);
  for (uint32_t i = 0; i < bad.size(); ++i) ch.Post(i, bad[i]);
  uint32_t next = 0;
  ServeRelay(ch.map, &next, host);
  EXPECT_EQ(next, bad.size() % kSlots);
  EXPECT_EQ(host.checks, 0);
  for (uint32_t i = 0; i < bad.size(); ++i) {
    EXPECT_EQ(ch.h->slot[i].state.load(), kDone) << i;
    EXPECT_EQ(ch.h->slot[i].status, HIXL_ERR_INVALID_ARG) << i;
  }
  EXPECT_EQ(region, (std::array<uint64_t, 4>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace hixl::transport::shm

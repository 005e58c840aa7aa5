// The relay thread (shm::ServeRelay) on slots a peer filled with any bytes.
// The input is up to kSlots records of 42 bytes: a byte of flags (bit 0:
// the address is taken near the one registered region, bit 1: the length
// is taken small, so that both often land in and around it), a byte for
// the slot's data, then the descriptor (op, atomic_op, addr, len, operand,
// compare).  They are posted in a channel in this process and served
// against a host with one registered region of 256 bytes, and the outcome
// is checked against a model: a malformed descriptor is answered
// HIXL_ERR_INVALID_ARG and a range outside the region
// HIXL_ERR_NOT_REGISTERED, neither touching memory; the rest do exactly
// their put, get or atomic.  ASan sees any byte touched outside the region
// or the channel.
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>

#include "base/status.h"
#include "core/registry.h"
#include "fuzz_check.h"
#include "transport/shm/mapping.h"
#include "transport/shm/relay.h"
#include "transport/shm/relay_slot.h"

namespace {

namespace shm = hixl::transport::shm;
using hixl::transport::AtomicOp;

constexpr uint64_t kRegion = 256;
constexpr size_t kChecked =
    2 * kRegion;  // bytes of each slot's data compared with the model (an access reaches kRegion)
constexpr size_t kRecord = 2 + 40;

class OneRegion final : public hixl::transport::Host {
 public:
  explicit OneRegion(uint64_t base) : base_(base) {}
  int rank() const override { return 0; }
  int64_t timeout_ms() const override { return 1000; }
  bool AccessLocalRange(uint64_t addr, uint64_t len, const std::function<void()>& fn) const override {
    if (!hixl::RangeInside(addr, len, base_, kRegion)) return false;
    fn();
    return true;
  }

 private:
  uint64_t base_;
};

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// What the relay must accept, written apart from shm::CheckRequest.
bool WellFormed(const shm::SlotRequest& r) {
  if (r.op == shm::kOpPut || r.op == shm::kOpGet) return r.len <= shm::kSlotBytes;
  return r.op == shm::kOpAtomic && r.len == 8 && r.addr % 8 == 0 && r.atomic_op <= 3;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* in, size_t size) {
  // Made once: the channel (as a peer would pass it) and the region, on the
  // heap at its exact size so that ASan guards its edges.
  static shm::Mapping channel = [] {
    void* p = ::mmap(nullptr, shm::RelayChannelBytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    FUZZ_CHECK(p != MAP_FAILED);
    return shm::Mapping(p, shm::RelayChannelBytes());
  }();
  static uint8_t* const region = new uint8_t[kRegion];
  static const std::array<uint8_t, kChecked + 256> kPattern = [] {
    std::array<uint8_t, kChecked + 256> p{};
    for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<uint8_t>(k * 131 + k / 256);
    return p;
  }();
  const uint64_t base = reinterpret_cast<uint64_t>(region);
  const OneRegion host(base);

  const size_t n = std::min<size_t>(size / kRecord, shm::kSlots);
  if (n == 0) return 0;
  auto* h = new (channel.get()) shm::ChannelHeader{};
  h->magic = shm::kChannelMagic;
  h->slots = shm::kSlots;
  std::array<uint8_t, kRegion> model{};
  std::memcpy(model.data(), kPattern.data() + 1, kRegion);
  std::memcpy(region, model.data(), kRegion);
  std::array<std::array<uint8_t, kChecked>, shm::kSlots> model_data;
  std::array<shm::SlotRequest, shm::kSlots> reqs{};
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t* rec = in + i * kRecord;
    const uint8_t flags = rec[0];
    std::memcpy(model_data[i].data(), kPattern.data() + rec[1], kChecked);  // neighbouring bytes differ
    std::memcpy(shm::SlotData(channel.get(), i), model_data[i].data(), kChecked);
    shm::SlotRequest& r = reqs[i];
    r.op = Load32(rec + 2);
    r.atomic_op = Load32(rec + 6);
    r.addr = Load64(rec + 10);
    r.len = Load64(rec + 18);
    r.operand = Load64(rec + 26);
    r.compare = Load64(rec + 34);
    if (flags & 1) r.addr = base - 64 + r.addr % (kRegion + 128);
    if (flags & 2) r.len %= kRegion + 64;
    shm::Slot& s = h->slot[i];
    shm::WriteRequest(s, r);
    s.status = 12345;
    s.result = 0xfeed;
    s.state.store(shm::kPosted, std::memory_order_release);
  }

  uint32_t next = 0;
  shm::ServeRelay(channel, &next, host);
  FUZZ_CHECK(next == n % shm::kSlots);

  for (uint32_t i = 0; i < n; ++i) {
    const shm::SlotRequest& r = reqs[i];
    const shm::Slot& s = h->slot[i];
    FUZZ_CHECK(s.state.load(std::memory_order_acquire) == shm::kDone);
    const bool formed = WellFormed(r);
    FUZZ_CHECK(formed == (shm::CheckRequest(r) == 0));
    if (!formed) {
      FUZZ_CHECK(s.status == HIXL_ERR_INVALID_ARG);
      continue;
    }
    if (!hixl::RangeInside(r.addr, r.len, base, kRegion)) {
      FUZZ_CHECK(s.status == HIXL_ERR_NOT_REGISTERED);
      continue;
    }
    FUZZ_CHECK(s.status == 0);
    const uint64_t off = r.addr - base;
    if (r.op == shm::kOpPut) {
      std::memcpy(model.data() + off, model_data[i].data(), r.len);  // r.len <= kRegion <= kChecked
    } else if (r.op == shm::kOpGet) {
      std::memcpy(model_data[i].data(), model.data() + off, r.len);
    } else {
      uint64_t old;
      std::memcpy(&old, model.data() + off, 8);
      FUZZ_CHECK(s.result == old);
      uint64_t now = old;
      switch (static_cast<AtomicOp>(r.atomic_op)) {
        case AtomicOp::kFetch: break;
        case AtomicOp::kSet: now = r.operand; break;
        case AtomicOp::kAdd: now = old + r.operand; break;
        case AtomicOp::kCompareSwap: now = old == r.compare ? r.operand : old; break;
      }
      std::memcpy(model.data() + off, &now, 8);
    }
  }
  FUZZ_CHECK(std::memcmp(model.data(), region, kRegion) == 0);
  for (uint32_t i = 0; i < n; ++i) {
    FUZZ_CHECK(std::memcmp(model_data[i].data(), shm::SlotData(channel.get(), i), kChecked) == 0);
  }
  return 0;
}

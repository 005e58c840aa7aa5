// The layout of a relay channel (relay.h), which the origin writes and the
// target's relay thread reads, and the target's handling of one slot.
//
// The channel is the peer's memory: it may rewrite a slot at any moment,
// also while the target serves it.  So the target copies a posted slot's
// fields once (CopyRequest) and checks and performs that copy only
// (ServeRequest): nothing it checked is read again from shared memory.
#pragma once

#include <atomic>
#include <cstdint>

#include "transport/transport.h"

namespace hixl::transport::shm {

inline constexpr uint32_t kSlots = 8;
inline constexpr uint64_t kSlotBytes = uint64_t{1} << 20;
inline constexpr uint64_t kSlotsOffset = 4096;
inline constexpr uint64_t kChannelBytes = kSlotsOffset + kSlots * kSlotBytes;
inline constexpr uint32_t kChannelMagic = 0x6869786c;  // "hixl"

enum SlotState : uint32_t { kFree = 0, kPosted = 1, kDone = 2 };
enum SlotOp : uint32_t { kOpPut = 1, kOpGet = 2, kOpAtomic = 3 };

struct alignas(64) Slot {
  std::atomic<uint32_t> state;  // origin: Free -> Posted; target: Posted -> Done
  uint32_t op;                  // a SlotOp
  uint64_t addr;
  uint64_t len;
  int32_t status;
  uint32_t atomic_op;  // for kOpAtomic: an AtomicOp
  uint64_t operand;
  uint64_t compare;
  uint64_t result;  // for kOpAtomic: the value before
};
struct ChannelHeader {
  uint32_t magic;
  uint32_t slots;
  Slot slot[kSlots];
};
static_assert(sizeof(ChannelHeader) <= kSlotsOffset);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Slot i's data: kSlotBytes from kSlotsOffset + i * kSlotBytes.
inline uint8_t* SlotData(void* channel, uint32_t i) {
  return static_cast<uint8_t*>(channel) + kSlotsOffset + i * kSlotBytes;
}

// A posted slot's request as the target acts on it: a private copy.
struct SlotRequest {
  uint32_t op = 0;
  uint32_t atomic_op = 0;
  uint64_t addr = 0;
  uint64_t len = 0;
  uint64_t operand = 0;
  uint64_t compare = 0;
};

// Reads each field of a slot the target saw Posted (with acquire) once.
SlotRequest CopyRequest(const Slot& s);

// The origin's side: writes r's fields into s (not its state, status or
// result: the caller posts it with a release store of kPosted after them).
void WriteRequest(Slot& s, const SlotRequest& r);

// 0 when the request is well formed, else HIXL_ERR_INVALID_ARG: a known
// op; a put or get of at most kSlotBytes; an atomic of exactly 8 bytes at
// an 8-byte aligned address with a known AtomicOp.  Whether the range is
// registered is the host's to say (ServeRequest).
int32_t CheckRequest(const SlotRequest& r);

// The target's answer to one request, for the slot's status and result.
struct SlotAnswer {
  int32_t status = 0;   // 0, HIXL_ERR_INVALID_ARG (malformed) or HIXL_ERR_NOT_REGISTERED
  uint64_t result = 0;  // an atomic's value before; 0 otherwise
};

// Performs r if CheckRequest accepts it and host says [addr, addr+len) lies
// in one registered region: a put copies len bytes of data to addr, a get
// len bytes from addr to data, an atomic applies to the word at addr (and
// wakes its waiters unless it only fetched).  data is the slot's data
// (kSlotBytes).  Otherwise nothing is read or written but r.
SlotAnswer ServeRequest(const SlotRequest& r, uint8_t* data, const Host& host);

}  // namespace hixl::transport::shm

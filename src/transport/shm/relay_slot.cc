#include "transport/shm/relay_slot.h"

#include <cstring>

#include "base/status.h"
#include "base/user_memory.h"

namespace hixl::transport::shm {

SlotRequest CopyRequest(const Slot& s) {
  SlotRequest r;
  r.op = s.op;
  r.atomic_op = s.atomic_op;
  r.addr = s.addr;
  r.len = s.len;
  r.operand = s.operand;
  r.compare = s.compare;
  return r;
}

void WriteRequest(Slot& s, const SlotRequest& r) {
  s.op = r.op;
  s.atomic_op = r.atomic_op;
  s.addr = r.addr;
  s.len = r.len;
  s.operand = r.operand;
  s.compare = r.compare;
}

int32_t CheckRequest(const SlotRequest& r) {
  switch (r.op) {
    case kOpPut:
    case kOpGet: return r.len <= kSlotBytes ? 0 : HIXL_ERR_INVALID_ARG;
    case kOpAtomic:
      if (r.len != sizeof(uint64_t) || r.addr % alignof(uint64_t) != 0) return HIXL_ERR_INVALID_ARG;
      return r.atomic_op <= static_cast<uint32_t>(AtomicOp::kCompareSwap) ? 0 : HIXL_ERR_INVALID_ARG;
    default: return HIXL_ERR_INVALID_ARG;
  }
}

SlotAnswer ServeRequest(const SlotRequest& r, uint8_t* data, const Host& host) {
  SlotAnswer answer;
  answer.status = CheckRequest(r);
  if (answer.status != 0) return answer;
  const bool ran = host.AccessLocalRange(r.addr, r.len, [&] {
    if (r.op == kOpPut) {
      [[maybe_unused]] const base::UserMemory user;
      std::memcpy(reinterpret_cast<void*>(r.addr), data, r.len);
    } else if (r.op == kOpGet) {
      [[maybe_unused]] const base::UserMemory user;
      std::memcpy(data, reinterpret_cast<const void*>(r.addr), r.len);
    } else {
      auto* word = reinterpret_cast<uint64_t*>(r.addr);
      const auto aop = static_cast<AtomicOp>(r.atomic_op);
      {
        [[maybe_unused]] const base::UserMemory user;
        answer.result = ApplyAtomic(word, aop, r.operand, r.compare);
      }
      if (aop != AtomicOp::kFetch) WakeWaiters(word);
    }
  });
  if (!ran) answer.status = HIXL_ERR_NOT_REGISTERED;
  return answer;
}

}  // namespace hixl::transport::shm

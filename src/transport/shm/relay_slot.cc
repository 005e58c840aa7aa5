#include "transport/shm/relay_slot.h"

#include <cstring>

#include "base/status.h"

// Under ThreadSanitizer: see UserMemory below.
#if defined(__SANITIZE_THREAD__)
#define HIXL_RELAY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HIXL_RELAY_TSAN 1
#endif
#endif
#ifdef HIXL_RELAY_TSAN
// The dynamic annotations the TSan runtime exports.
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace hixl::transport::shm {

namespace {

// The progress thread's copy of a relayed put writes the USER's registered
// memory, that of a relayed get reads it, and a relayed atomic updates a
// word of it.  What orders those accesses against the user's own threads is
// the one-sided protocol between processes: the origin's flush (or wait)
// sees the slot Done, then tells the target (a barrier, a signal, a
// notification, a message of its own) that the bytes are there or may be
// reused.  TSan sees one process only, so it would report every relayed
// transfer as a race with the user's next access.  So, while a UserMemory
// lives, this thread's accesses are left out of TSan's view; it spans the
// user access alone (a memcpy whose other side is the slot's data, which in
// this process only this thread touches, or the atomic on the user's word).
// The slots' fields and the ring's words stay checked, ordered by their
// acquire/release atomics.  Without TSan it does nothing.
class UserMemory {
 public:
#ifdef HIXL_RELAY_TSAN
  UserMemory() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~UserMemory() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  UserMemory() = default;
#endif
  UserMemory(const UserMemory&) = delete;
  UserMemory& operator=(const UserMemory&) = delete;
};

}  // namespace

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
      [[maybe_unused]] const UserMemory user;
      std::memcpy(reinterpret_cast<void*>(r.addr), data, r.len);
    } else if (r.op == kOpGet) {
      [[maybe_unused]] const UserMemory user;
      std::memcpy(data, reinterpret_cast<const void*>(r.addr), r.len);
    } else {
      auto* word = reinterpret_cast<uint64_t*>(r.addr);
      const auto aop = static_cast<AtomicOp>(r.atomic_op);
      {
        [[maybe_unused]] const UserMemory user;
        answer.result = ApplyAtomic(word, aop, r.operand, r.compare);
      }
      if (aop != AtomicOp::kFetch) WakeWaiters(word);
    }
  });
  if (!ran) answer.status = HIXL_ERR_NOT_REGISTERED;
  return answer;
}

}  // namespace hixl::transport::shm

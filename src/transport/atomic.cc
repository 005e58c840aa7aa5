// Atomics and wake-ups on memory that a transport touches directly.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>

#include "transport/transport.h"

namespace hixl::transport {

uint64_t ApplyAtomic(uint64_t* word, AtomicOp op, uint64_t operand, uint64_t compare) {
  std::atomic_ref<uint64_t> w(*word);
  switch (op) {
    case AtomicOp::kFetch: return w.load();
    case AtomicOp::kSet: return w.exchange(operand);
    case AtomicOp::kAdd: return w.fetch_add(operand);
    case AtomicOp::kCompareSwap:
      w.compare_exchange_strong(compare, operand);
      return compare;  // the value seen, whether or not it was swapped
  }
  return 0;
}

void WakeWaiters(const uint64_t* word) {
  // Sleepers wait on the low half of the word (x86-64 is little-endian);
  // the key of a shared mapping is the file and offset, so this reaches
  // sleepers in every process that maps the word.
  ::syscall(SYS_futex, const_cast<uint64_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace hixl::transport

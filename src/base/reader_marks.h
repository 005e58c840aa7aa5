// Reader marks: what makes a reader of a published snapshot cheap and still
// lets a writer wait for every reader of the old one (the pattern of
// userspace RCU's membarrier flavour).
//
// A reader marks `owner` (the address of what it reads) in a slot of its
// own thread: two plain stores and a compiler barrier, no atomic
// read-modify-write and no shared cache line.  A writer that has published
// a new snapshot calls AwaitMarks: membarrier(2) makes every running thread
// of the process execute a full memory barrier, so any mark not visible
// after it belongs to a reader that will see the new snapshot; the writer
// then waits for the marks on `owner` that it can see.
//
// Where membarrier's private expedited command is not available (old
// kernels, seccomp), Available() is false and callers use their own slower
// way (registry.h: two shared counters).  A thread has kSlots slots; a
// reader that finds none free (kSlots marks held at once) falls back the
// same way.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

namespace hixl::marks {

constexpr int kSlots = 4;

// One slot of one thread.  state: (number of marks taken in it) * 2, plus 1
// while a mark is held; written only by its thread.
struct Slot {
  std::atomic<const void*> owner{nullptr};
  std::atomic<uint64_t> state{0};
};

// Whether membarrier(2) serves marks here (asked of the kernel once).
bool Probe();
// Whether marks can be used in this process (decided once).
inline bool Available() {
  static const bool ok = Probe();
  return ok;
}

// Marks `owner` from this thread; nullptr when this thread's slots are all
// held (the caller falls back).  Requires Available().
inline Slot* Mark(const void* owner);
// Ends the mark: every read made under it happens before a writer's
// AwaitMarks can return.
inline void Unmark(Slot* s) { s->state.store(s->state.load(std::memory_order_relaxed) + 1, std::memory_order_release); }

// Waits until every mark on `owner` taken before this call is released;
// false when the deadline passes first.  Call after publishing the new
// snapshot.  Requires Available().
bool AwaitMarks(const void* owner, std::chrono::steady_clock::time_point deadline);

// Waits until done() holds, as a writer waits for readers: spins briefly,
// then yields, then sleeps 50 us at a time (a long transfer must not cost
// a core); false when the deadline passes first.
bool WaitUntil(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline);

namespace detail {
// This thread's slots once registered (initial-exec: no call to find the
// thread's copy on the fast path).
extern constinit thread_local Slot* t_slots __attribute__((tls_model("initial-exec")));
// Registers this thread's slots (first use).
Slot* RegisterThread();
inline Slot* ThreadSlots() {
  Slot* s = t_slots;
  return s ? s : RegisterThread();
}
}  // namespace detail

inline Slot* Mark(const void* owner) {
  Slot* slots = detail::ThreadSlots();
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = slots[i];
    const uint64_t st = s.state.load(std::memory_order_relaxed);
    if (st & 1) continue;
    // Release stores: a writer that sees one of them sees everything this
    // thread did before it (the previous mark's reads included).
    s.owner.store(owner, std::memory_order_release);
    s.state.store(st + 1, std::memory_order_release);
    // Only the compiler is kept from moving the reader's loads above the
    // stores; the CPU is, by the writer's membarrier.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    return &s;
  }
  return nullptr;
}

}  // namespace hixl::marks

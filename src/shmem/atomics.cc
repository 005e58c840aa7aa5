// OpenSHMEM atomics and distributed locks (shmem.h).  Where the target
// object is mapped here (a same-host peer's heap or promoted memory, or
// this PE's own), the CPU's atomic instructions act on it directly.
// Elsewhere they go through the world's 64-bit atomics (fetch, set, add,
// compare-and-swap): a 64-bit type's add, swap and compare-and-swap are one
// world atomic; the bitwise ones, and every update of a 32-bit type (its
// aligned 8-byte word), a compare-and-swap loop.  Direct atomics wake no
// hixl_wait_until sleeper (OpenSHMEM's waits poll).
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include "shmem/runtime.h"

namespace hixl::shmem {
namespace {

using transport::AtomicOp;

template <typename T>
uint64_t Bits(T v) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "OpenSHMEM's atomic types are 4 or 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <typename T>
T FromBits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

// pe's word that holds the T this PE holds at dest, and where in it.
template <typename T>
uint64_t Word(const char* api, const T* dest, int pe, unsigned* shift) {
  CheckPe(api, pe);
  (void)W(api);
  const uint64_t addr = Remote(dest, pe);
  if (addr % sizeof(T) != 0) Fail(api, fmt::format("the {}-byte object at {} is not aligned", sizeof(T), (void*)dest));
  *shift = static_cast<unsigned>(addr % 8) * 8;
  return addr & ~uint64_t{7};
}

// The unsigned integer of T's size, for the CPU's atomics on mapped memory.
template <typename T>
using Raw = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;

// T's object on pe when it is mapped here (a same-host peer's heap or
// promoted memory): the CPU's atomics reach it directly, as they do for
// the peer itself, its relay and UCX's progress thread, so all stay
// atomic with respect to each other.
template <typename T>
Raw<T>* Mapped(const char* api, const T* dest, int pe) {
  void* p = Direct(api, dest, sizeof(T), pe);
  if (p != nullptr && reinterpret_cast<uintptr_t>(p) % sizeof(T) != 0) {
    Fail(api, fmt::format("the {}-byte object at {} is not aligned", sizeof(T), static_cast<const void*>(dest)));
  }
  return static_cast<Raw<T>*>(p);
}

template <typename T>
T Fetch(const char* api, const T* source, int pe) {
  if (Raw<T>* p = Mapped(api, source, pe)) return FromBits<T>(__atomic_load_n(p, __ATOMIC_SEQ_CST));
  unsigned shift = 0;
  const uint64_t word = Word(api, source, pe, &shift);
  return FromBits<T>(Atomic64(api, pe, word, AtomicOp::kFetch, 0) >> shift);
}

// Replaces the T at dest on pe by f(old) atomically; returns old.
template <typename T, typename F>
T Update(const char* api, T* dest, int pe, F f) {
  if (Raw<T>* p = Mapped(api, dest, pe)) {
    Raw<T> old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(p, &old, static_cast<Raw<T>>(Bits(f(FromBits<T>(old)))), false,
                                        __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
    }
    return FromBits<T>(old);
  }
  unsigned shift = 0;
  const uint64_t word = Word(api, dest, pe, &shift);
  const uint64_t mask = sizeof(T) == 8 ? ~uint64_t{0} : (uint64_t{0xffffffff} << shift);
  uint64_t old = Atomic64(api, pe, word, AtomicOp::kFetch, 0);
  for (;;) {
    const T cur = FromBits<T>((old & mask) >> shift);
    const uint64_t next = (old & ~mask) | ((Bits(f(cur)) << shift) & mask);
    const uint64_t seen = Atomic64(api, pe, word, AtomicOp::kCompareSwap, next, old);
    if (seen == old) return cur;
    old = seen;
  }
}

template <typename T>
T FetchAdd(const char* api, T* dest, T value, int pe) {
  static_assert(std::is_integral_v<T>, "adds are for the integer types");
  if (Raw<T>* p = Mapped(api, dest, pe)) {
    return FromBits<T>(__atomic_fetch_add(p, static_cast<Raw<T>>(value), __ATOMIC_SEQ_CST));
  }
  if constexpr (sizeof(T) == 8) {
    unsigned shift = 0;
    const uint64_t word = Word(api, dest, pe, &shift);
    return FromBits<T>(Atomic64(api, pe, word, AtomicOp::kAdd, Bits(value)));
  } else {
    using U = std::make_unsigned_t<T>;  // wraps, as the standard's atomics do, without signed overflow
    return Update(api, dest, pe, [value](T v) { return static_cast<T>(static_cast<U>(v) + static_cast<U>(value)); });
  }
}

template <typename T>
T Swap(const char* api, T* dest, T value, int pe) {
  if (Raw<T>* p = Mapped(api, dest, pe)) {
    return FromBits<T>(__atomic_exchange_n(p, static_cast<Raw<T>>(Bits(value)), __ATOMIC_SEQ_CST));
  }
  if constexpr (sizeof(T) == 8) {
    unsigned shift = 0;
    const uint64_t word = Word(api, dest, pe, &shift);
    return FromBits<T>(Atomic64(api, pe, word, AtomicOp::kSet, Bits(value)));
  } else {
    return Update(api, dest, pe, [value](T) { return value; });
  }
}

template <typename T>
T CompareSwap(const char* api, T* dest, T cond, T value, int pe) {
  if (Raw<T>* p = Mapped(api, dest, pe)) {
    auto expected = static_cast<Raw<T>>(Bits(cond));
    __atomic_compare_exchange_n(p, &expected, static_cast<Raw<T>>(Bits(value)), false, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
    return FromBits<T>(expected);  // the value seen, whether or not it was swapped
  }
  if constexpr (sizeof(T) == 8) {
    unsigned shift = 0;
    const uint64_t word = Word(api, dest, pe, &shift);
    return FromBits<T>(Atomic64(api, pe, word, AtomicOp::kCompareSwap, Bits(value), Bits(cond)));
  } else {
    unsigned shift = 0;
    const uint64_t word = Word(api, dest, pe, &shift);
    const uint64_t mask = uint64_t{0xffffffff} << shift;
    uint64_t old = Atomic64(api, pe, word, AtomicOp::kFetch, 0);
    for (;;) {
      const T cur = FromBits<T>((old & mask) >> shift);
      if (Bits(cur) != Bits(cond)) return cur;
      const uint64_t next = (old & ~mask) | ((Bits(value) << shift) & mask);
      const uint64_t seen = Atomic64(api, pe, word, AtomicOp::kCompareSwap, next, old);
      if (seen == old) return cur;
      old = seen;
    }
  }
}

}  // namespace
}  // namespace hixl::shmem

using hixl::shmem::CompareSwap;
using hixl::shmem::Fetch;
using hixl::shmem::FetchAdd;
using hixl::shmem::Swap;
using hixl::shmem::Update;
using hixl::shmem::W;

extern "C" {

#define HIXL_SHMEM_DEF_AMO(T, N)                                                                                     \
  T shmem_##N##_atomic_fetch_inc(T* dest, int pe) {                                                                  \
    return FetchAdd<T>("shmem_" #N "_atomic_fetch_inc", dest, 1, pe);                                                \
  }                                                                                                                  \
  T shmem_ctx_##N##_atomic_fetch_inc(shmem_ctx_t ctx, T* dest, int pe) {                                             \
    return FetchAdd<T>("shmem_ctx_" #N "_atomic_fetch_inc", dest, 1, hixl::shmem::CtxPe(ctx, pe));                   \
  }                                                                                                                  \
  void shmem_##N##_atomic_inc(T* dest, int pe) { FetchAdd<T>("shmem_" #N "_atomic_inc", dest, 1, pe); }              \
  void shmem_ctx_##N##_atomic_inc(shmem_ctx_t ctx, T* dest, int pe) {                                                \
    FetchAdd<T>("shmem_ctx_" #N "_atomic_inc", dest, 1, hixl::shmem::CtxPe(ctx, pe));                                \
  }                                                                                                                  \
  T shmem_##N##_atomic_fetch_add(T* dest, T value, int pe) {                                                         \
    return FetchAdd<T>("shmem_" #N "_atomic_fetch_add", dest, value, pe);                                            \
  }                                                                                                                  \
  T shmem_ctx_##N##_atomic_fetch_add(shmem_ctx_t ctx, T* dest, T value, int pe) {                                    \
    return FetchAdd<T>("shmem_ctx_" #N "_atomic_fetch_add", dest, value, hixl::shmem::CtxPe(ctx, pe));               \
  }                                                                                                                  \
  void shmem_##N##_atomic_add(T* dest, T value, int pe) { FetchAdd<T>("shmem_" #N "_atomic_add", dest, value, pe); } \
  void shmem_ctx_##N##_atomic_add(shmem_ctx_t ctx, T* dest, T value, int pe) {                                       \
    FetchAdd<T>("shmem_ctx_" #N "_atomic_add", dest, value, hixl::shmem::CtxPe(ctx, pe));                            \
  }                                                                                                                  \
  T shmem_##N##_atomic_compare_swap(T* dest, T cond, T value, int pe) {                                              \
    return CompareSwap<T>("shmem_" #N "_atomic_compare_swap", dest, cond, value, pe);                                \
  }                                                                                                                  \
  T shmem_ctx_##N##_atomic_compare_swap(shmem_ctx_t ctx, T* dest, T cond, T value, int pe) {                         \
    return CompareSwap<T>("shmem_ctx_" #N "_atomic_compare_swap", dest, cond, value, hixl::shmem::CtxPe(ctx, pe));   \
  }                                                                                                                  \
  void shmem_##N##_atomic_fetch_inc_nbi(T* fetch, T* dest, int pe) {                                                 \
    *fetch = FetchAdd<T>("shmem_" #N "_atomic_fetch_inc_nbi", dest, 1, pe);                                          \
  }                                                                                                                  \
  void shmem_ctx_##N##_atomic_fetch_inc_nbi(shmem_ctx_t ctx, T* fetch, T* dest, int pe) {                            \
    *fetch = FetchAdd<T>("shmem_ctx_" #N "_atomic_fetch_inc_nbi", dest, 1, hixl::shmem::CtxPe(ctx, pe));             \
  }                                                                                                                  \
  void shmem_##N##_atomic_fetch_add_nbi(T* fetch, T* dest, T value, int pe) {                                        \
    *fetch = FetchAdd<T>("shmem_" #N "_atomic_fetch_add_nbi", dest, value, pe);                                      \
  }                                                                                                                  \
  void shmem_ctx_##N##_atomic_fetch_add_nbi(shmem_ctx_t ctx, T* fetch, T* dest, T value, int pe) {                   \
    *fetch = FetchAdd<T>("shmem_ctx_" #N "_atomic_fetch_add_nbi", dest, value, hixl::shmem::CtxPe(ctx, pe));         \
  }                                                                                                                  \
  void shmem_##N##_atomic_compare_swap_nbi(T* fetch, T* dest, T cond, T value, int pe) {                             \
    *fetch = CompareSwap<T>("shmem_" #N "_atomic_compare_swap_nbi", dest, cond, value, pe);                          \
  }                                                                                                                  \
  void shmem_ctx_##N##_atomic_compare_swap_nbi(shmem_ctx_t ctx, T* fetch, T* dest, T cond, T value, int pe) {        \
    *fetch =                                                                                                         \
        CompareSwap<T>("shmem_ctx_" #N "_atomic_compare_swap_nbi", dest, cond, value, hixl::shmem::CtxPe(ctx, pe));  \
  }
HIXL_SHMEM_AMO_TYPES(HIXL_SHMEM_DEF_AMO)

#define HIXL_SHMEM_DEF_EXT_AMO(T, N)                                                                                   \
  T shmem_##N##_atomic_fetch(const T* source, int pe) { return Fetch<T>("shmem_" #N "_atomic_fetch", source, pe); }    \
  T shmem_ctx_##N##_atomic_fetch(shmem_ctx_t ctx, const T* source, int pe) {                                           \
    return Fetch<T>("shmem_ctx_" #N "_atomic_fetch", source, hixl::shmem::CtxPe(ctx, pe));                             \
  }                                                                                                                    \
  void shmem_##N##_atomic_set(T* dest, T value, int pe) { Swap<T>("shmem_" #N "_atomic_set", dest, value, pe); }       \
  void shmem_ctx_##N##_atomic_set(shmem_ctx_t ctx, T* dest, T value, int pe) {                                         \
    Swap<T>("shmem_ctx_" #N "_atomic_set", dest, value, hixl::shmem::CtxPe(ctx, pe));                                  \
  }                                                                                                                    \
  T shmem_##N##_atomic_swap(T* dest, T value, int pe) { return Swap<T>("shmem_" #N "_atomic_swap", dest, value, pe); } \
  T shmem_ctx_##N##_atomic_swap(shmem_ctx_t ctx, T* dest, T value, int pe) {                                           \
    return Swap<T>("shmem_ctx_" #N "_atomic_swap", dest, value, hixl::shmem::CtxPe(ctx, pe));                          \
  }                                                                                                                    \
  void shmem_##N##_atomic_fetch_nbi(T* fetch, const T* source, int pe) {                                               \
    *fetch = Fetch<T>("shmem_" #N "_atomic_fetch_nbi", source, pe);                                                    \
  }                                                                                                                    \
  void shmem_ctx_##N##_atomic_fetch_nbi(shmem_ctx_t ctx, T* fetch, const T* source, int pe) {                          \
    *fetch = Fetch<T>("shmem_ctx_" #N "_atomic_fetch_nbi", source, hixl::shmem::CtxPe(ctx, pe));                       \
  }                                                                                                                    \
  void shmem_##N##_atomic_swap_nbi(T* fetch, T* dest, T value, int pe) {                                               \
    *fetch = Swap<T>("shmem_" #N "_atomic_swap_nbi", dest, value, pe);                                                 \
  }                                                                                                                    \
  void shmem_ctx_##N##_atomic_swap_nbi(shmem_ctx_t ctx, T* fetch, T* dest, T value, int pe) {                          \
    *fetch = Swap<T>("shmem_ctx_" #N "_atomic_swap_nbi", dest, value, hixl::shmem::CtxPe(ctx, pe));                    \
  }
HIXL_SHMEM_EXT_AMO_TYPES(HIXL_SHMEM_DEF_EXT_AMO)

#define HIXL_SHMEM_DEF_BITWISE_ONE(T, N, OP, EXPR)                                                                  \
  T shmem_##N##_atomic_fetch_##OP(T* dest, T value, int pe) {                                                       \
    return Update(("shmem_" #N "_atomic_fetch_" #OP), dest, pe, [value](T v) { return static_cast<T>(EXPR); });     \
  }                                                                                                                 \
  T shmem_ctx_##N##_atomic_fetch_##OP(shmem_ctx_t ctx, T* dest, T value, int pe) {                                  \
    return Update(("shmem_ctx_" #N "_atomic_fetch_" #OP), dest, hixl::shmem::CtxPe(ctx, pe),                        \
                  [value](T v) { return static_cast<T>(EXPR); });                                                   \
  }                                                                                                                 \
  void shmem_##N##_atomic_##OP(T* dest, T value, int pe) {                                                          \
    Update(("shmem_" #N "_atomic_" #OP), dest, pe, [value](T v) { return static_cast<T>(EXPR); });                  \
  }                                                                                                                 \
  void shmem_ctx_##N##_atomic_##OP(shmem_ctx_t ctx, T* dest, T value, int pe) {                                     \
    Update(("shmem_ctx_" #N "_atomic_" #OP), dest, hixl::shmem::CtxPe(ctx, pe),                                     \
           [value](T v) { return static_cast<T>(EXPR); });                                                          \
  }                                                                                                                 \
  void shmem_##N##_atomic_fetch_##OP##_nbi(T* fetch, T* dest, T value, int pe) {                                    \
    *fetch =                                                                                                        \
        Update(("shmem_" #N "_atomic_fetch_" #OP "_nbi"), dest, pe, [value](T v) { return static_cast<T>(EXPR); }); \
  }                                                                                                                 \
  void shmem_ctx_##N##_atomic_fetch_##OP##_nbi(shmem_ctx_t ctx, T* fetch, T* dest, T value, int pe) {               \
    *fetch = Update(("shmem_ctx_" #N "_atomic_fetch_" #OP "_nbi"), dest, hixl::shmem::CtxPe(ctx, pe),               \
                    [value](T v) { return static_cast<T>(EXPR); });                                                 \
  }
#define HIXL_SHMEM_DEF_BITWISE_AMO(T, N)          \
  HIXL_SHMEM_DEF_BITWISE_ONE(T, N, and, v& value) \
  HIXL_SHMEM_DEF_BITWISE_ONE(T, N, or, v | value) \
  HIXL_SHMEM_DEF_BITWISE_ONE(T, N, xor, v ^ value)
HIXL_SHMEM_BITWISE_AMO_TYPES(HIXL_SHMEM_DEF_BITWISE_AMO)

#define HIXL_SHMEM_DEF_OLD_AMO(T, N)                                                                         \
  T shmem_##N##_fadd(T* dest, T value, int pe) { return FetchAdd<T>("shmem_" #N "_fadd", dest, value, pe); } \
  T shmem_##N##_finc(T* dest, int pe) { return FetchAdd<T>("shmem_" #N "_finc", dest, 1, pe); }              \
  void shmem_##N##_add(T* dest, T value, int pe) { FetchAdd<T>("shmem_" #N "_add", dest, value, pe); }       \
  void shmem_##N##_inc(T* dest, int pe) { FetchAdd<T>("shmem_" #N "_inc", dest, 1, pe); }                    \
  T shmem_##N##_cswap(T* dest, T cond, T value, int pe) {                                                    \
    return CompareSwap<T>("shmem_" #N "_cswap", dest, cond, value, pe);                                      \
  }
#define HIXL_SHMEM_DEF_OLD_EXT_AMO(T, N)                                                                 \
  T shmem_##N##_swap(T* dest, T value, int pe) { return Swap<T>("shmem_" #N "_swap", dest, value, pe); } \
  T shmem_##N##_fetch(const T* source, int pe) { return Fetch<T>("shmem_" #N "_fetch", source, pe); }    \
  void shmem_##N##_set(T* dest, T value, int pe) { Swap<T>("shmem_" #N "_set", dest, value, pe); }
HIXL_SHMEM_OLD_AMO_TYPES(HIXL_SHMEM_DEF_OLD_AMO)
HIXL_SHMEM_OLD_EXT_AMO_TYPES(HIXL_SHMEM_DEF_OLD_EXT_AMO)
long shmem_swap(long* dest, long value, int pe) { return Swap<long>("shmem_swap", dest, value, pe); }

// Locks: the word on PE 0 holds 0 when free, else the holder's PE + 1.
void shmem_set_lock(long* lock) {
  const char* api = "shmem_set_lock";
  const long mine = static_cast<long>(hixl::shmem::S().me) + 1;
  (void)W(api);
  hixl::shmem::WaitFor(api, "the lock's release", [&] { return CompareSwap<long>(api, lock, 0, mine, 0) == 0; });
}

int shmem_test_lock(long* lock) {
  const char* api = "shmem_test_lock";
  const long mine = static_cast<long>(hixl::shmem::S().me) + 1;
  return CompareSwap<long>(api, lock, 0, mine, 0) == 0 ? 0 : 1;
}

void shmem_clear_lock(long* lock) {
  const char* api = "shmem_clear_lock";
  const long mine = static_cast<long>(hixl::shmem::S().me) + 1;
  // What the holder wrote under the lock is complete before the next holder can take it.
  hixl::shmem::Check(api, W(api)->Fence());
  const long seen = CompareSwap<long>(api, lock, mine, 0, 0);
  if (seen != mine) {
    hixl::shmem::Fail(api, fmt::format("the lock at {} is not held by this PE (it holds {})", (void*)lock, seen));
  }
}

}  // extern "C"

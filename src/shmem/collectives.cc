// OpenSHMEM broadcast, collect, alltoall and reductions (shmem.h), on teams
// and on the legacy active sets.  Data moves push first: each PE puts its
// part into its peers' symmetric destinations and counts it on the
// receiver's delivery word, with no barrier (collect: two, since offsets
// depend on every size).  A reduction reads every
// member's source between two barriers and combines in the group's order,
// so every PE computes the same bits.
#include <atomic>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "shmem/group.h"

namespace hixl::shmem {
namespace {

// Copies bytes from this PE's source to the group member index's dest
// (symmetric objects: the member's own copies).
void PutTo(const Group& g, int index, void* dest, const void* source, size_t bytes) {
  if (bytes == 0) return;
  if (index == g.me) {
    if (dest != source) std::memmove(dest, source, bytes);
    return;
  }
  const int pe = g.pes[static_cast<size_t>(index)];
  Check(g.api, W(g.api)->Put(pe, source, Remote(dest, pe), bytes));
}

void GetFrom(const Group& g, int index, void* dest, const void* source, size_t bytes) {
  if (bytes == 0) return;
  const int pe = g.pes[static_cast<size_t>(index)];
  if (index == g.me) {
    if (dest != source) std::memmove(dest, source, bytes);
    return;
  }
  Check(g.api, W(g.api)->Get(pe, Remote(source, pe), dest, bytes));
}

void Complete(const Group& g) { Check(g.api, W(g.api)->Fence()); }

// The standard has every PE's dest ready to receive when any PE makes one
// of these calls, so each part is pushed at once, followed by one count on
// the receiver's delivery word for this PE (Group::arrivals; a legacy
// active set's one word): a receiver returns once it has counted every
// part it expects, a sender once its parts are out.  The
// count after the data: a same-host peer's mapped word takes the CPU's
// atomic after a full fence, when the data went into the peer's mapped
// memory too; elsewhere (the relay, UCX) the world's put-with-signal, which
// adds after the data has landed.
void Deliver(const Group& g, int index, void* dest, const void* source, size_t bytes) {
  if (index == g.me) {
    if (bytes && dest != source) std::memmove(dest, source, bytes);
    return;
  }
  world::WorldImpl* w = W(g.api);
  const int pe = g.pes[static_cast<size_t>(index)];
  uint64_t* count = g.arrivals ? &g.arrivals[g.me] : g.flag;  // the same address there
  auto* word = static_cast<uint64_t*>(Direct(g.api, count, sizeof(uint64_t), pe));
  void* to = bytes && word ? Direct(g.api, dest, bytes, pe) : nullptr;
  if (word && (to || bytes == 0)) {
    if (bytes) std::memcpy(to, source, bytes);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    __atomic_fetch_add(word, 1, __ATOMIC_SEQ_CST);
    return;
  }
  if (bytes == 0) {
    Atomic64(g.api, pe, Remote(count, pe), transport::AtomicOp::kAdd, 1);
    return;
  }
  Check(g.api, w->PutSignal(pe, source, Remote(dest, pe), bytes, Remote(count, pe), 1, SHMEM_SIGNAL_ADD));
}

constexpr int kEveryPeer = -1;  // Arrivals: a part from every other member
constexpr int kNoPeer = -2;     // Arrivals: none

// Waits for the part of this call from member `from` (an index, kEveryPeer
// or kNoPeer); then completes this PE's own puts so that its source may be
// reused.  A team counts each member's parts apart: a member already in a
// later call (a broadcast's root never waits) is counted there, and never
// in place of a slower member's part of this one.  A legacy active set
// counts all on one word and takes them off (the standard orders its calls
// on one pSync with barriers).
void Arrivals(const Group& g, int from) {
  if (g.arrivals) {
    std::vector<uint64_t>& taken = *g.taken;
    const uint64_t* arrived = g.arrivals;
    for (int i = 0; i < g.size() && from != kNoPeer; ++i) {
      if (i == g.me || (from != kEveryPeer && i != from)) continue;
      const uint64_t want = ++taken[static_cast<size_t>(i)];
      const uint64_t* word = &arrived[i];
      WaitFor(g.api, "a peer's part of the collective",
              [word, want] { return __atomic_load_n(word, __ATOMIC_ACQUIRE) >= want; });
    }
  } else if (from != kNoPeer) {
    uint64_t* word = g.flag;
    const uint64_t count = from == kEveryPeer ? static_cast<uint64_t>(g.size() - 1) : 1;
    WaitFor(g.api, "a peer's part of the collective",
            [word, count] { return __atomic_load_n(word, __ATOMIC_ACQUIRE) >= count; });
    __atomic_fetch_sub(word, count, __ATOMIC_ACQ_REL);
  }
  for (int pe : g.pes) {
    if (!S().synchronous[static_cast<size_t>(pe)]) {
      Complete(g);
      break;
    }
  }
}

void Broadcast(const Group& g, void* dest, const void* source, size_t bytes, int root, bool root_too) {
  if (root < 0 || root >= g.size()) {
    Fail(g.api, fmt::format("PE_root {} is outside the group of {} PEs", root, g.size()));
  }
  if (g.me == root) {
    for (int i = 0; i < g.size(); ++i) {
      if (i != root || root_too) Deliver(g, i, dest, source, bytes);
    }
    Arrivals(g, kNoPeer);
  } else {
    Arrivals(g, root);
  }
}

void Fcollect(const Group& g, void* dest, const void* source, size_t bytes) {
  char* at = static_cast<char*>(dest) + static_cast<size_t>(g.me) * bytes;
  for (int k = 0; k < g.size(); ++k) Deliver(g, (g.me + k) % g.size(), at, source, bytes);
  Arrivals(g, kEveryPeer);
}

// Where each PE's part goes depends on the others' sizes: they are
// published first (one barrier), then pushed (the second).
void Collect(const Group& g, void* dest, const void* source, size_t bytes) {
  State& s = S();
  world::WorldImpl* w = W(g.api);
  s.block->collect_count = bytes;
  Sync(g, false);
  std::vector<uint64_t> counts(static_cast<size_t>(g.me));
  for (int i = 0; i < g.me; ++i)
    GetFrom(g, i, &counts[static_cast<size_t>(i)], &s.block->collect_count, sizeof(uint64_t));
  Check(g.api, w->Fence());  // the gets have landed (over UCX they complete here)
  uint64_t at = 0;
  for (uint64_t c : counts) at += c;
  for (int k = 0; k < g.size(); ++k) PutTo(g, (g.me + k) % g.size(), static_cast<char*>(dest) + at, source, bytes);
  Sync(g, true);
}

void Alltoall(const Group& g, void* dest, const void* source, size_t bytes) {
  for (int k = 0; k < g.size(); ++k) {
    const int i = (g.me + k) % g.size();
    Deliver(g, i, static_cast<char*>(dest) + static_cast<size_t>(g.me) * bytes,
            static_cast<const char*>(source) + static_cast<size_t>(i) * bytes, bytes);
  }
  Arrivals(g, kEveryPeer);
}

// Block me of PE i's dest gets this PE's source elements for PE i: strides
// in elements; one delivery count per peer, after its last element.
void Alltoalls(const Group& g, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,
               size_t elem) {
  const auto e = static_cast<ptrdiff_t>(elem);
  const auto n = static_cast<ptrdiff_t>(nelems);
  for (int k = 0; k < g.size(); ++k) {
    const int i = (g.me + k) % g.size();
    for (ptrdiff_t j = 0; j + 1 < n; ++j) {
      PutTo(g, i, static_cast<char*>(dest) + (g.me * n + j) * dst * e,
            static_cast<const char*>(source) + (i * n + j) * sst * e, elem);
    }
    if (n > 0) {
      if (i != g.me) Check(g.api, W(g.api)->Fence());  // the elements before the counted last one
      Deliver(g, i, static_cast<char*>(dest) + (g.me * n + n - 1) * dst * e,
              static_cast<const char*>(source) + (i * n + n - 1) * sst * e, elem);
    } else {
      Deliver(g, i, dest, source, 0);
    }
  }
  Arrivals(g, kEveryPeer);
}

enum class Op { kAnd, kOr, kXor, kMin, kMax, kSum, kProd };

template <Op op, typename T>
T Combine(T a, T b) {
  if constexpr (op == Op::kAnd) {
    return static_cast<T>(a & b);
  } else if constexpr (op == Op::kOr) {
    return static_cast<T>(a | b);
  } else if constexpr (op == Op::kXor) {
    return static_cast<T>(a ^ b);
  } else if constexpr (op == Op::kMin) {
    return b < a ? b : a;
  } else if constexpr (op == Op::kMax) {
    return a < b ? b : a;
  } else if constexpr (std::is_integral_v<T>) {
    // Wraps, without signed overflow: in unsigned arithmetic at least as
    // wide as unsigned int (narrower types are promoted to int).
    using U = std::make_unsigned_t<T>;
    using Wide = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    const auto x = static_cast<Wide>(static_cast<U>(a)), y = static_cast<Wide>(static_cast<U>(b));
    return static_cast<T>(static_cast<U>(op == Op::kSum ? x + y : x * y));
  } else {
    return op == Op::kSum ? a + b : a * b;
  }
}

template <Op op, typename T>
void CombineInto(T* acc, const T* part, size_t n) {
  for (size_t k = 0; k < n; ++k) acc[k] = Combine<op>(acc[k], part[k]);
}

// This thread's scratch, kept between calls (no allocation, no page
// faults, in a loop of reductions).
void* Scratch(size_t slot, size_t bytes) {
  struct Buffer {
    std::unique_ptr<unsigned char[]> p;
    size_t n = 0;
  };
  thread_local Buffer buffers[2];
  Buffer& b = buffers[slot];
  if (b.n < bytes) {
    b.p.reset(new unsigned char[bytes]);
    b.n = bytes;
  }
  return b.p.get();
}

// A member's source: where it is mapped here (this PE's own, a same-host
// peer's), else fetched into part.
template <typename T>
const T* SourceOf(const Group& g, int index, const T* source, size_t n, T* part) {
  if (index == g.me) return source;
  if (const void* p = Direct(g.api, source, n * sizeof(T), g.pes[static_cast<size_t>(index)])) {
    return static_cast<const T*>(p);
  }
  GetFrom(g, index, part, source, n * sizeof(T));
  Complete(g);
  return part;
}

// A small reduction on the world team: each PE pushes its source into its
// slot at every PE (as fcollect does) and combines them all in the group's
// order once they are there: one round of messages and no barrier.  The
// slots alternate between two sets call by call: a PE two reductions ahead
// has had this PE's part of the one between, sent once this one was done.
template <Op op, typename T>
bool SmallReduce(const Group& g, T* dest, const T* source, size_t n) {
  const size_t bytes = n * sizeof(T);
  if (g.small_reduce == nullptr || bytes == 0 || bytes > kSmallReduceBytes) return false;
  const uint64_t call = (*g.reductions)++;
  unsigned char* slots = g.small_reduce + (call % 2) * static_cast<size_t>(g.size()) * kSmallReduceBytes;
  for (int k = 0; k < g.size(); ++k) {
    Deliver(g, (g.me + k) % g.size(), slots + static_cast<size_t>(g.me) * kSmallReduceBytes, source, bytes);
  }
  Arrivals(g, kEveryPeer);
  T* acc = static_cast<T*>(Scratch(0, bytes));
  std::memcpy(acc, slots, bytes);
  for (int i = 1; i < g.size(); ++i) {
    CombineInto<op>(acc, reinterpret_cast<const T*>(slots + static_cast<size_t>(i) * kSmallReduceBytes), n);
  }
  std::memcpy(dest, acc, bytes);
  return true;
}

// Every PE combines every member's source in the group's order (the same
// bits everywhere, floating point included), reading same-host peers'
// sources where they lie; the second barrier keeps each source unchanged
// until every peer has read it, so dest may be the source itself.
template <Op op, typename T>
void ReduceWith(const Group& g, T* dest, const T* source, size_t n) {
  if (SmallReduce<op>(g, dest, source, n)) return;
  Sync(g, true);
  if (n > 0) {
    T* acc = static_cast<T*>(Scratch(0, n * sizeof(T)));
    T* part = static_cast<T*>(Scratch(1, n * sizeof(T)));
    std::memcpy(acc, SourceOf(g, 0, source, n, part), n * sizeof(T));
    for (int i = 1; i < g.size(); ++i) CombineInto<op>(acc, SourceOf(g, i, source, n, part), n);
    Sync(g, true);
    std::memcpy(dest, acc, n * sizeof(T));
  } else {
    Sync(g, true);
  }
}

template <typename T>
void Reduce(const Group& g, Op op, T* dest, const T* source, size_t n) {
  if constexpr (std::is_integral_v<T>) {
    if (op == Op::kAnd) return ReduceWith<Op::kAnd>(g, dest, source, n);
    if (op == Op::kOr) return ReduceWith<Op::kOr>(g, dest, source, n);
    if (op == Op::kXor) return ReduceWith<Op::kXor>(g, dest, source, n);
  }
  if (op == Op::kMin) return ReduceWith<Op::kMin>(g, dest, source, n);
  if (op == Op::kMax) return ReduceWith<Op::kMax>(g, dest, source, n);
  if (op == Op::kSum) return ReduceWith<Op::kSum>(g, dest, source, n);
  if (op == Op::kProd) return ReduceWith<Op::kProd>(g, dest, source, n);
  Fail(g.api, "a bitwise reduction of a floating-point type");
}

}  // namespace
}  // namespace hixl::shmem

using hixl::shmem::FromActiveSet;
using hixl::shmem::FromTeam;
using hixl::shmem::Group;
using hixl::shmem::Op;
using hixl::shmem::W;

extern "C" {

int shmem_broadcastmem(shmem_team_t team, void* dest, const void* source, size_t nelems, int PE_root) {
  Group g;
  if (!FromTeam("shmem_broadcastmem", team, &g)) return -1;
  hixl::shmem::Broadcast(g, dest, source, nelems, PE_root, true);
  return 0;
}
int shmem_collectmem(shmem_team_t team, void* dest, const void* source, size_t nelems) {
  Group g;
  if (!FromTeam("shmem_collectmem", team, &g)) return -1;
  hixl::shmem::Collect(g, dest, source, nelems);
  return 0;
}
int shmem_fcollectmem(shmem_team_t team, void* dest, const void* source, size_t nelems) {
  Group g;
  if (!FromTeam("shmem_fcollectmem", team, &g)) return -1;
  hixl::shmem::Fcollect(g, dest, source, nelems);
  return 0;
}
int shmem_alltoallmem(shmem_team_t team, void* dest, const void* source, size_t nelems) {
  Group g;
  if (!FromTeam("shmem_alltoallmem", team, &g)) return -1;
  hixl::shmem::Alltoall(g, dest, source, nelems);
  return 0;
}
int shmem_alltoallsmem(shmem_team_t team, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems) {
  Group g;
  if (!FromTeam("shmem_alltoallsmem", team, &g)) return -1;
  hixl::shmem::Alltoalls(g, dest, source, dst, sst, nelems, 1);
  return 0;
}

#define HIXL_SHMEM_DEF_COLL(T, N)                                                                      \
  int shmem_##N##_broadcast(shmem_team_t team, T* dest, const T* source, size_t nelems, int PE_root) { \
    Group g;                                                                                           \
    if (!FromTeam("shmem_" #N "_broadcast", team, &g)) return -1;                                      \
    hixl::shmem::Broadcast(g, dest, source, nelems * sizeof(T), PE_root, true);                        \
    return 0;                                                                                          \
  }                                                                                                    \
  int shmem_##N##_collect(shmem_team_t team, T* dest, const T* source, size_t nelems) {                \
    Group g;                                                                                           \
    if (!FromTeam("shmem_" #N "_collect", team, &g)) return -1;                                        \
    hixl::shmem::Collect(g, dest, source, nelems * sizeof(T));                                         \
    return 0;                                                                                          \
  }                                                                                                    \
  int shmem_##N##_fcollect(shmem_team_t team, T* dest, const T* source, size_t nelems) {               \
    Group g;                                                                                           \
    if (!FromTeam("shmem_" #N "_fcollect", team, &g)) return -1;                                       \
    hixl::shmem::Fcollect(g, dest, source, nelems * sizeof(T));                                        \
    return 0;                                                                                          \
  }                                                                                                    \
  int shmem_##N##_alltoall(shmem_team_t team, T* dest, const T* source, size_t nelems) {               \
    Group g;                                                                                           \
    if (!FromTeam("shmem_" #N "_alltoall", team, &g)) return -1;                                       \
    hixl::shmem::Alltoall(g, dest, source, nelems * sizeof(T));                                        \
    return 0;                                                                                          \
  }                                                                                                    \
  int shmem_##N##_alltoalls(shmem_team_t team, T* dest, const T* source, ptrdiff_t dst, ptrdiff_t sst, \
                            size_t nelems) {                                                           \
    Group g;                                                                                           \
    if (!FromTeam("shmem_" #N "_alltoalls", team, &g)) return -1;                                      \
    hixl::shmem::Alltoalls(g, dest, source, dst, sst, nelems, sizeof(T));                              \
    return 0;                                                                                          \
  }
HIXL_SHMEM_RMA_TYPES(HIXL_SHMEM_DEF_COLL)

#define HIXL_SHMEM_DEF_REDUCE(T, N, OP, KIND)                                                  \
  int shmem_##N##_##OP##_reduce(shmem_team_t team, T* dest, const T* source, size_t nreduce) { \
    Group g;                                                                                   \
    if (!FromTeam("shmem_" #N "_" #OP "_reduce", team, &g)) return -1;                         \
    hixl::shmem::Reduce<T>(g, KIND, dest, source, nreduce);                                    \
    return 0;                                                                                  \
  }
#define HIXL_SHMEM_DEF_REDUCE_BITWISE(T, N)  \
  HIXL_SHMEM_DEF_REDUCE(T, N, and, Op::kAnd) \
  HIXL_SHMEM_DEF_REDUCE(T, N, or, Op::kOr) HIXL_SHMEM_DEF_REDUCE(T, N, xor, Op::kXor)
#define HIXL_SHMEM_DEF_REDUCE_MINMAX(T, N) \
  HIXL_SHMEM_DEF_REDUCE(T, N, min, Op::kMin) HIXL_SHMEM_DEF_REDUCE(T, N, max, Op::kMax)
#define HIXL_SHMEM_DEF_REDUCE_ARITH(T, N) \
  HIXL_SHMEM_DEF_REDUCE(T, N, sum, Op::kSum) HIXL_SHMEM_DEF_REDUCE(T, N, prod, Op::kProd)
HIXL_SHMEM_REDUCE_BITWISE_TYPES(HIXL_SHMEM_DEF_REDUCE_BITWISE)
HIXL_SHMEM_REDUCE_MINMAX_TYPES(HIXL_SHMEM_DEF_REDUCE_MINMAX)
HIXL_SHMEM_REDUCE_ARITH_TYPES(HIXL_SHMEM_DEF_REDUCE_ARITH)

#define HIXL_SHMEM_DEF_OLD_COLL(BITS, CT)                                                                              \
  void shmem_broadcast##BITS(void* dest, const void* source, size_t nelems, int PE_root, int PE_start,                 \
                             int logPE_stride, int PE_size, long* pSync) {                                             \
    /* The root's own dest is left alone, as the standard has it for these. */                                         \
    hixl::shmem::Broadcast(FromActiveSet("shmem_broadcast" #BITS, PE_start, logPE_stride, PE_size, pSync), dest,       \
                           source, nelems * sizeof(CT), PE_root, false);                                               \
  }                                                                                                                    \
  void shmem_collect##BITS(void* dest, const void* source, size_t nelems, int PE_start, int logPE_stride, int PE_size, \
                           long* pSync) {                                                                              \
    hixl::shmem::Collect(FromActiveSet("shmem_collect" #BITS, PE_start, logPE_stride, PE_size, pSync), dest, source,   \
                         nelems * sizeof(CT));                                                                         \
  }                                                                                                                    \
  void shmem_fcollect##BITS(void* dest, const void* source, size_t nelems, int PE_start, int logPE_stride,             \
                            int PE_size, long* pSync) {                                                                \
    hixl::shmem::Fcollect(FromActiveSet("shmem_fcollect" #BITS, PE_start, logPE_stride, PE_size, pSync), dest, source, \
                          nelems * sizeof(CT));                                                                        \
  }                                                                                                                    \
  void shmem_alltoall##BITS(void* dest, const void* source, size_t nelems, int PE_start, int logPE_stride,             \
                            int PE_size, long* pSync) {                                                                \
    hixl::shmem::Alltoall(FromActiveSet("shmem_alltoall" #BITS, PE_start, logPE_stride, PE_size, pSync), dest, source, \
                          nelems * sizeof(CT));                                                                        \
  }                                                                                                                    \
  void shmem_alltoalls##BITS(void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,              \
                             int PE_start, int logPE_stride, int PE_size, long* pSync) {                               \
    hixl::shmem::Alltoalls(FromActiveSet("shmem_alltoalls" #BITS, PE_start, logPE_stride, PE_size, pSync), dest,       \
                           source, dst, sst, nelems, sizeof(CT));                                                      \
  }
HIXL_SHMEM_DEF_OLD_COLL(32, uint32_t)
HIXL_SHMEM_DEF_OLD_COLL(64, uint64_t)

#define HIXL_SHMEM_DEF_TOALL(T, N, OP, KIND)                                                                         \
  void shmem_##N##_##OP##_to_all(T* dest, const T* source, int nreduce, int PE_start, int logPE_stride, int PE_size, \
                                 T*, long* pSync) {                                                                  \
    const char* api = "shmem_" #N "_" #OP "_to_all";                                                                 \
    if (nreduce < 0) hixl::shmem::Fail(api, fmt::format("nreduce {} is negative", nreduce));                         \
    hixl::shmem::Reduce<T>(FromActiveSet(api, PE_start, logPE_stride, PE_size, pSync), KIND, dest, source,           \
                           static_cast<size_t>(nreduce));                                                            \
  }
#define HIXL_SHMEM_DEF_TOALL_BITWISE(T, N)  \
  HIXL_SHMEM_DEF_TOALL(T, N, and, Op::kAnd) \
  HIXL_SHMEM_DEF_TOALL(T, N, or, Op::kOr) HIXL_SHMEM_DEF_TOALL(T, N, xor, Op::kXor)
#define HIXL_SHMEM_DEF_TOALL_MINMAX(T, N) \
  HIXL_SHMEM_DEF_TOALL(T, N, min, Op::kMin) HIXL_SHMEM_DEF_TOALL(T, N, max, Op::kMax)
#define HIXL_SHMEM_DEF_TOALL_ARITH(T, N) \
  HIXL_SHMEM_DEF_TOALL(T, N, sum, Op::kSum) HIXL_SHMEM_DEF_TOALL(T, N, prod, Op::kProd)
HIXL_SHMEM_TOALL_BITWISE_TYPES(HIXL_SHMEM_DEF_TOALL_BITWISE)
HIXL_SHMEM_TOALL_MINMAX_TYPES(HIXL_SHMEM_DEF_TOALL_MINMAX)
HIXL_SHMEM_TOALL_ARITH_TYPES(HIXL_SHMEM_DEF_TOALL_ARITH)

// C's double _Complex and float _Complex, as GCC's __complex__ (the same
// layout), summed and multiplied as the real types are.  The header
// declares these for C only, so they are exported here by hand (the
// library's default visibility is hidden).
#define HIXL_SHMEM_EXPORT __attribute__((visibility("default")))
#define HIXL_SHMEM_DEF_COMPLEX(N, C, OP, KIND)                                                                   \
  HIXL_SHMEM_EXPORT void shmem_##N##_##OP##_to_all(C* dest, const C* source, int nreduce, int PE_start,          \
                                                   int logPE_stride, int PE_size, C*, long* pSync) {             \
    const char* api = "shmem_" #N "_" #OP "_to_all";                                                             \
    if (nreduce < 0) hixl::shmem::Fail(api, fmt::format("nreduce {} is negative", nreduce));                     \
    hixl::shmem::ReduceWith<KIND>(FromActiveSet(api, PE_start, logPE_stride, PE_size, pSync), dest, source,      \
                                  static_cast<size_t>(nreduce));                                                 \
  }                                                                                                              \
  HIXL_SHMEM_EXPORT int shmem_##N##_##OP##_reduce(shmem_team_t team, C* dest, const C* source, size_t nreduce) { \
    Group g;                                                                                                     \
    if (!FromTeam("shmem_" #N "_" #OP "_reduce", team, &g)) return -1;                                           \
    hixl::shmem::ReduceWith<KIND>(g, dest, source, nreduce);                                                     \
    return 0;                                                                                                    \
  }
HIXL_SHMEM_DEF_COMPLEX(complexd, __complex__ double, sum, Op::kSum)
HIXL_SHMEM_DEF_COMPLEX(complexd, __complex__ double, prod, Op::kProd)
HIXL_SHMEM_DEF_COMPLEX(complexf, __complex__ float, sum, Op::kSum)
HIXL_SHMEM_DEF_COMPLEX(complexf, __complex__ float, prod, Op::kProd)

}  // extern "C"

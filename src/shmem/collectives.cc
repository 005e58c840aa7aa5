// OpenSHMEM broadcast, collect, alltoall and reductions (shmem.h), on teams
// and on the legacy active sets.  Each is: a barrier (every PE's source is
// ready), this PE gets what it needs from its peers' symmetric sources into
// its own destination, a barrier (no PE changes its source while a peer may
// still read it).  Reductions combine in the group's order, so every PE
// computes the same bits.
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "shmem/group.h"

namespace hixl::shmem {
namespace {

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

void Broadcast(const Group& g, void* dest, const void* source, size_t bytes, int root, bool root_too) {
  if (root < 0 || root >= g.size()) {
    Fail(g.api, fmt::format("PE_root {} is outside the group of {} PEs", root, g.size()));
  }
  Sync(g, true);
  if (g.me != root || root_too) GetFrom(g, root, dest, source, bytes);
  Complete(g);
  Sync(g, true);
}

void Fcollect(const Group& g, void* dest, const void* source, size_t bytes) {
  Sync(g, true);
  for (int i = 0; i < g.size(); ++i) GetFrom(g, i, static_cast<char*>(dest) + static_cast<size_t>(i) * bytes, source, bytes);
  Complete(g);
  Sync(g, true);
}

void Collect(const Group& g, void* dest, const void* source, size_t bytes) {
  State& s = S();
  world::WorldImpl* w = W(g.api);
  s.block->collect_count = bytes;
  Sync(g, true);
  std::vector<uint64_t> counts(static_cast<size_t>(g.size()));
  for (int i = 0; i < g.size(); ++i) {
    Check(g.api, w->Get(g.pes[static_cast<size_t>(i)], reinterpret_cast<uint64_t>(&s.block->collect_count),
                        &counts[static_cast<size_t>(i)], sizeof(uint64_t)));
  }
  Complete(g);
  size_t at = 0;
  for (int i = 0; i < g.size(); ++i) {
    GetFrom(g, i, static_cast<char*>(dest) + at, source, counts[static_cast<size_t>(i)]);
    at += counts[static_cast<size_t>(i)];
  }
  Complete(g);
  Sync(g, true);
}

void Alltoall(const Group& g, void* dest, const void* source, size_t bytes) {
  Sync(g, true);
  for (int i = 0; i < g.size(); ++i) {
    GetFrom(g, i, static_cast<char*>(dest) + static_cast<size_t>(i) * bytes,
            static_cast<const char*>(source) + static_cast<size_t>(g.me) * bytes, bytes);
  }
  Complete(g);
  Sync(g, true);
}

// Block i of dest (from PE i) gets PE i's source elements for this PE:
// strides in elements.
void Alltoalls(const Group& g, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,
               size_t elem) {
  Sync(g, true);
  const auto e = static_cast<ptrdiff_t>(elem);
  const auto n = static_cast<ptrdiff_t>(nelems);
  for (int i = 0; i < g.size(); ++i) {
    for (ptrdiff_t j = 0; j < n; ++j) {
      GetFrom(g, i, static_cast<char*>(dest) + (i * n + j) * dst * e,
              static_cast<const char*>(source) + (g.me * n + j) * sst * e, elem);
    }
  }
  Complete(g);
  Sync(g, true);
}

enum class Op { kAnd, kOr, kXor, kMin, kMax, kSum, kProd };

template <typename T>
T Combine(Op op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case Op::kAnd:
        return static_cast<T>(a & b);
      case Op::kOr:
        return static_cast<T>(a | b);
      case Op::kXor:
        return static_cast<T>(a ^ b);
      default:
        break;
    }
  }
  switch (op) {
    case Op::kMin:
      return b < a ? b : a;
    case Op::kMax:
      return a < b ? b : a;
    case Op::kSum:
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      } else {
        return a + b;
      }
    case Op::kProd:
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      } else {
        return a * b;
      }
    default:
      return a;
  }
}

template <typename T>
void Reduce(const Group& g, Op op, T* dest, const T* source, size_t n) {
  Sync(g, true);
  std::vector<T> acc(n), part(n);
  GetFrom(g, 0, acc.data(), source, n * sizeof(T));
  Complete(g);
  for (int i = 1; i < g.size(); ++i) {
    GetFrom(g, i, part.data(), source, n * sizeof(T));
    Complete(g);
    for (size_t k = 0; k < n; ++k) acc[k] = Combine(op, acc[k], part[k]);
  }
  // Every peer has read this PE's source: dest may be the source itself.
  Sync(g, true);
  if (n) std::memcpy(dest, acc.data(), n * sizeof(T));
}

// The complex sums and products of the legacy reductions.
template <typename C>
void ReduceComplex(const Group& g, bool prod, C* dest, const C* source, size_t n) {
  Sync(g, true);
  std::vector<C> acc(n), part(n);
  GetFrom(g, 0, acc.data(), source, n * sizeof(C));
  Complete(g);
  for (int i = 1; i < g.size(); ++i) {
    GetFrom(g, i, part.data(), source, n * sizeof(C));
    Complete(g);
    for (size_t k = 0; k < n; ++k) acc[k] = prod ? acc[k] * part[k] : acc[k] + part[k];
  }
  Sync(g, true);
  if (n) std::memcpy(dest, acc.data(), n * sizeof(C));
}

}  // namespace
}  // namespace hixl::shmem

using hixl::shmem::W;
using hixl::shmem::FromActiveSet;
using hixl::shmem::FromTeam;
using hixl::shmem::Group;
using hixl::shmem::Op;

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
int shmem_alltoallsmem(shmem_team_t team, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst,
                       size_t nelems) {
  Group g;
  if (!FromTeam("shmem_alltoallsmem", team, &g)) return -1;
  hixl::shmem::Alltoalls(g, dest, source, dst, sst, nelems, 1);
  return 0;
}

#define HIXL_SHMEM_DEF_COLL(T, N)                                                                             \
  int shmem_##N##_broadcast(shmem_team_t team, T* dest, const T* source, size_t nelems, int PE_root) {        \
    Group g;                                                                                                  \
    if (!FromTeam("shmem_" #N "_broadcast", team, &g)) return -1;                                             \
    hixl::shmem::Broadcast(g, dest, source, nelems * sizeof(T), PE_root, true);                               \
    return 0;                                                                                                 \
  }                                                                                                           \
  int shmem_##N##_collect(shmem_team_t team, T* dest, const T* source, size_t nelems) {                       \
    Group g;                                                                                                  \
    if (!FromTeam("shmem_" #N "_collect", team, &g)) return -1;                                               \
    hixl::shmem::Collect(g, dest, source, nelems * sizeof(T));                                                \
    return 0;                                                                                                 \
  }                                                                                                           \
  int shmem_##N##_fcollect(shmem_team_t team, T* dest, const T* source, size_t nelems) {                      \
    Group g;                                                                                                  \
    if (!FromTeam("shmem_" #N "_fcollect", team, &g)) return -1;                                              \
    hixl::shmem::Fcollect(g, dest, source, nelems * sizeof(T));                                               \
    return 0;                                                                                                 \
  }                                                                                                           \
  int shmem_##N##_alltoall(shmem_team_t team, T* dest, const T* source, size_t nelems) {                      \
    Group g;                                                                                                  \
    if (!FromTeam("shmem_" #N "_alltoall", team, &g)) return -1;                                              \
    hixl::shmem::Alltoall(g, dest, source, nelems * sizeof(T));                                               \
    return 0;                                                                                                 \
  }                                                                                                           \
  int shmem_##N##_alltoalls(shmem_team_t team, T* dest, const T* source, ptrdiff_t dst, ptrdiff_t sst,        \
                            size_t nelems) {                                                                  \
    Group g;                                                                                                  \
    if (!FromTeam("shmem_" #N "_alltoalls", team, &g)) return -1;                                             \
    hixl::shmem::Alltoalls(g, dest, source, dst, sst, nelems, sizeof(T));                                     \
    return 0;                                                                                                 \
  }
HIXL_SHMEM_RMA_TYPES(HIXL_SHMEM_DEF_COLL)

#define HIXL_SHMEM_DEF_REDUCE(T, N, OP, KIND)                                                                 \
  int shmem_##N##_##OP##_reduce(shmem_team_t team, T* dest, const T* source, size_t nreduce) {                \
    Group g;                                                                                                  \
    if (!FromTeam("shmem_" #N "_" #OP "_reduce", team, &g)) return -1;                                        \
    hixl::shmem::Reduce<T>(g, KIND, dest, source, nreduce);                                                   \
    return 0;                                                                                                 \
  }
#define HIXL_SHMEM_DEF_REDUCE_BITWISE(T, N)                                                                   \
  HIXL_SHMEM_DEF_REDUCE(T, N, and, Op::kAnd)                                                                  \
  HIXL_SHMEM_DEF_REDUCE(T, N, or, Op::kOr) HIXL_SHMEM_DEF_REDUCE(T, N, xor, Op::kXor)
#define HIXL_SHMEM_DEF_REDUCE_MINMAX(T, N) \
  HIXL_SHMEM_DEF_REDUCE(T, N, min, Op::kMin) HIXL_SHMEM_DEF_REDUCE(T, N, max, Op::kMax)
#define HIXL_SHMEM_DEF_REDUCE_ARITH(T, N) \
  HIXL_SHMEM_DEF_REDUCE(T, N, sum, Op::kSum) HIXL_SHMEM_DEF_REDUCE(T, N, prod, Op::kProd)
HIXL_SHMEM_REDUCE_BITWISE_TYPES(HIXL_SHMEM_DEF_REDUCE_BITWISE)
HIXL_SHMEM_REDUCE_MINMAX_TYPES(HIXL_SHMEM_DEF_REDUCE_MINMAX)
HIXL_SHMEM_REDUCE_ARITH_TYPES(HIXL_SHMEM_DEF_REDUCE_ARITH)

#define HIXL_SHMEM_DEF_OLD_COLL(BITS, CT)                                                                     \
  void shmem_broadcast##BITS(void* dest, const void* source, size_t nelems, int PE_root, int PE_start,        \
                             int logPE_stride, int PE_size, long* pSync) {                                    \
    /* The root's own dest is left alone, as the standard has it for these. */                                \
    hixl::shmem::Broadcast(FromActiveSet("shmem_broadcast" #BITS, PE_start, logPE_stride, PE_size, pSync), dest, \
                           source, nelems * sizeof(CT), PE_root, false);                                      \
  }                                                                                                           \
  void shmem_collect##BITS(void* dest, const void* source, size_t nelems, int PE_start, int logPE_stride,      \
                           int PE_size, long* pSync) {                                                        \
    hixl::shmem::Collect(FromActiveSet("shmem_collect" #BITS, PE_start, logPE_stride, PE_size, pSync), dest,  \
                         source, nelems * sizeof(CT));                                                        \
  }                                                                                                           \
  void shmem_fcollect##BITS(void* dest, const void* source, size_t nelems, int PE_start, int logPE_stride,     \
                            int PE_size, long* pSync) {                                                       \
    hixl::shmem::Fcollect(FromActiveSet("shmem_fcollect" #BITS, PE_start, logPE_stride, PE_size, pSync), dest, \
                          source, nelems * sizeof(CT));                                                       \
  }                                                                                                           \
  void shmem_alltoall##BITS(void* dest, const void* source, size_t nelems, int PE_start, int logPE_stride,     \
                            int PE_size, long* pSync) {                                                       \
    hixl::shmem::Alltoall(FromActiveSet("shmem_alltoall" #BITS, PE_start, logPE_stride, PE_size, pSync), dest, \
                          source, nelems * sizeof(CT));                                                       \
  }                                                                                                           \
  void shmem_alltoalls##BITS(void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,     \
                             int PE_start, int logPE_stride, int PE_size, long* pSync) {                      \
    hixl::shmem::Alltoalls(FromActiveSet("shmem_alltoalls" #BITS, PE_start, logPE_stride, PE_size, pSync),    \
                           dest, source, dst, sst, nelems, sizeof(CT));                                       \
  }
HIXL_SHMEM_DEF_OLD_COLL(32, uint32_t)
HIXL_SHMEM_DEF_OLD_COLL(64, uint64_t)

#define HIXL_SHMEM_DEF_TOALL(T, N, OP, KIND)                                                                  \
  void shmem_##N##_##OP##_to_all(T* dest, const T* source, int nreduce, int PE_start, int logPE_stride,       \
                                 int PE_size, T*, long* pSync) {                                              \
    const char* api = "shmem_" #N "_" #OP "_to_all";                                                          \
    if (nreduce < 0) hixl::shmem::Fail(api, fmt::format("nreduce {} is negative", nreduce));                  \
    hixl::shmem::Reduce<T>(FromActiveSet(api, PE_start, logPE_stride, PE_size, pSync), KIND, dest, source,    \
                           static_cast<size_t>(nreduce));                                                     \
  }
#define HIXL_SHMEM_DEF_TOALL_BITWISE(T, N)                                                                    \
  HIXL_SHMEM_DEF_TOALL(T, N, and, Op::kAnd)                                                                   \
  HIXL_SHMEM_DEF_TOALL(T, N, or, Op::kOr) HIXL_SHMEM_DEF_TOALL(T, N, xor, Op::kXor)
#define HIXL_SHMEM_DEF_TOALL_MINMAX(T, N) \
  HIXL_SHMEM_DEF_TOALL(T, N, min, Op::kMin) HIXL_SHMEM_DEF_TOALL(T, N, max, Op::kMax)
#define HIXL_SHMEM_DEF_TOALL_ARITH(T, N) \
  HIXL_SHMEM_DEF_TOALL(T, N, sum, Op::kSum) HIXL_SHMEM_DEF_TOALL(T, N, prod, Op::kProd)
HIXL_SHMEM_TOALL_BITWISE_TYPES(HIXL_SHMEM_DEF_TOALL_BITWISE)
HIXL_SHMEM_TOALL_MINMAX_TYPES(HIXL_SHMEM_DEF_TOALL_MINMAX)
HIXL_SHMEM_TOALL_ARITH_TYPES(HIXL_SHMEM_DEF_TOALL_ARITH)

// C's double _Complex and float _Complex, as GCC's __complex__ (the same
// layout); the header declares these for C only.
#define HIXL_SHMEM_DEF_COMPLEX(N, C, OP, PROD)                                                                \
  void shmem_##N##_##OP##_to_all(C* dest, const C* source, int nreduce, int PE_start, int logPE_stride,       \
                                 int PE_size, C*, long* pSync) {                                              \
    const char* api = "shmem_" #N "_" #OP "_to_all";                                                          \
    if (nreduce < 0) hixl::shmem::Fail(api, fmt::format("nreduce {} is negative", nreduce));                  \
    hixl::shmem::ReduceComplex<C>(FromActiveSet(api, PE_start, logPE_stride, PE_size, pSync), PROD, dest,     \
                                  source, static_cast<size_t>(nreduce));                                      \
  }
HIXL_SHMEM_DEF_COMPLEX(complexd, __complex__ double, sum, false)
HIXL_SHMEM_DEF_COMPLEX(complexd, __complex__ double, prod, true)
HIXL_SHMEM_DEF_COMPLEX(complexf, __complex__ float, sum, false)
HIXL_SHMEM_DEF_COMPLEX(complexf, __complex__ float, prod, true)

}  // extern "C"

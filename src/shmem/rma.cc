// OpenSHMEM RMA, signals, fence and quiet (shmem.h) on the world's put and
// get.  A blocking put returns once its source may be reused and a blocking
// get once its data is here: both complete the transfer before returning
// (the world's fence, where the transport has not done so by the time it
// returns); the _nbi forms leave it to shmem_quiet.
#include <cstring>

#include <fmt/format.h>

#include "shmem/runtime.h"

namespace hixl::shmem {
namespace {

// A blocking transfer (complete) is done with its buffers when this
// returns; what may still be on its way to pe (an _nbi transfer; on one
// host, a put the relay has yet to land) is noted as ctx's, for ctx's
// quiet.  pe: a world PE.
void Done(const char* api, shmem_ctx_t ctx, world::WorldImpl* w, int pe, bool complete) {
  if (complete && !S().synchronous[static_cast<size_t>(pe)]) {
    Check(api, w->FenceLane(pe, ctx->lane));
  } else {
    Pending(ctx, pe);
  }
}

void Put(const char* api, shmem_ctx_t ctx, void* dest, const void* source, size_t bytes, int pe, bool complete) {
  world::WorldImpl* w = W(api);
  pe = CtxPe(ctx, pe);
  CheckPe(api, pe);
  if (bytes == 0) return;
  Check(api, w->Put(pe, source, Remote(dest, pe), bytes, ctx->lane));
  Done(api, ctx, w, pe, complete);
}

void Get(const char* api, shmem_ctx_t ctx, void* dest, const void* source, size_t bytes, int pe, bool complete) {
  world::WorldImpl* w = W(api);
  pe = CtxPe(ctx, pe);
  CheckPe(api, pe);
  if (bytes == 0) return;
  Check(api, w->Get(pe, Remote(source, pe), dest, bytes, ctx->lane));
  Done(api, ctx, w, pe, complete);
}

// Strided: element i of the target at i * tst, of the source at i * sst
// (strides in elements).
void Strided(const char* api, shmem_ctx_t ctx, bool put, char* dest, const char* source, ptrdiff_t dst, ptrdiff_t sst,
             size_t nelems, size_t elem, int pe) {
  world::WorldImpl* w = W(api);
  pe = CtxPe(ctx, pe);
  CheckPe(api, pe);
  if (nelems == 0) return;
  for (size_t i = 0; i < nelems; ++i) {
    char* d = dest + static_cast<ptrdiff_t>(i) * dst * static_cast<ptrdiff_t>(elem);
    const char* s = source + static_cast<ptrdiff_t>(i) * sst * static_cast<ptrdiff_t>(elem);
    Check(api, put ? w->Put(pe, s, Remote(d, pe), elem, ctx->lane) : w->Get(pe, Remote(s, pe), d, elem, ctx->lane));
  }
  Done(api, ctx, w, pe, true);
}

void PutSignal(const char* api, shmem_ctx_t ctx, void* dest, const void* source, size_t bytes, uint64_t* sig_addr,
               uint64_t signal, int sig_op, int pe, bool complete) {
  world::WorldImpl* w = W(api);
  pe = CtxPe(ctx, pe);
  CheckPe(api, pe);
  if (sig_op != SHMEM_SIGNAL_SET && sig_op != SHMEM_SIGNAL_ADD) {
    Fail(api, fmt::format("sig_op {} is neither SHMEM_SIGNAL_SET nor SHMEM_SIGNAL_ADD", sig_op));
  }
  // SHMEM_SIGNAL_SET/ADD are hixl's HIXL_SIGNAL_SET/ADD.
  Check(api, w->PutSignal(pe, source, Remote(dest, pe), bytes, Remote(sig_addr, pe), signal, sig_op, ctx->lane));
  Done(api, ctx, w, pe, complete);
}

}  // namespace
}  // namespace hixl::shmem

using hixl::shmem::Get;
using hixl::shmem::Put;
using hixl::shmem::PutSignal;
using hixl::shmem::Strided;
using hixl::shmem::W;

extern "C" {

#define HIXL_SHMEM_DEF_RMA(T, N)                                                                                       \
  void shmem_##N##_put(T* dest, const T* source, size_t nelems, int pe) {                                              \
    Put("shmem_" #N "_put", SHMEM_CTX_DEFAULT, dest, source, nelems * sizeof(T), pe, true);                            \
  }                                                                                                                    \
  void shmem_ctx_##N##_put(shmem_ctx_t ctx, T* dest, const T* source, size_t nelems, int pe) {                         \
    Put("shmem_ctx_" #N "_put", ctx, dest, source, nelems * sizeof(T), pe, true);                                      \
  }                                                                                                                    \
  void shmem_##N##_put_nbi(T* dest, const T* source, size_t nelems, int pe) {                                          \
    Put("shmem_" #N "_put_nbi", SHMEM_CTX_DEFAULT, dest, source, nelems * sizeof(T), pe, false);                       \
  }                                                                                                                    \
  void shmem_ctx_##N##_put_nbi(shmem_ctx_t ctx, T* dest, const T* source, size_t nelems, int pe) {                     \
    Put("shmem_ctx_" #N "_put_nbi", ctx, dest, source, nelems * sizeof(T), pe, false);                                 \
  }                                                                                                                    \
  void shmem_##N##_get(T* dest, const T* source, size_t nelems, int pe) {                                              \
    Get("shmem_" #N "_get", SHMEM_CTX_DEFAULT, dest, source, nelems * sizeof(T), pe, true);                            \
  }                                                                                                                    \
  void shmem_ctx_##N##_get(shmem_ctx_t ctx, T* dest, const T* source, size_t nelems, int pe) {                         \
    Get("shmem_ctx_" #N "_get", ctx, dest, source, nelems * sizeof(T), pe, true);                                      \
  }                                                                                                                    \
  void shmem_##N##_get_nbi(T* dest, const T* source, size_t nelems, int pe) {                                          \
    Get("shmem_" #N "_get_nbi", SHMEM_CTX_DEFAULT, dest, source, nelems * sizeof(T), pe, false);                       \
  }                                                                                                                    \
  void shmem_ctx_##N##_get_nbi(shmem_ctx_t ctx, T* dest, const T* source, size_t nelems, int pe) {                     \
    Get("shmem_ctx_" #N "_get_nbi", ctx, dest, source, nelems * sizeof(T), pe, false);                                 \
  }                                                                                                                    \
  void shmem_##N##_p(T* dest, T value, int pe) {                                                                       \
    Put("shmem_" #N "_p", SHMEM_CTX_DEFAULT, dest, &value, sizeof(T), pe, true);                                       \
  }                                                                                                                    \
  void shmem_ctx_##N##_p(shmem_ctx_t ctx, T* dest, T value, int pe) {                                                  \
    Put("shmem_ctx_" #N "_p", ctx, dest, &value, sizeof(T), pe, true);                                                 \
  }                                                                                                                    \
  T shmem_##N##_g(const T* source, int pe) {                                                                           \
    T value;                                                                                                           \
    Get("shmem_" #N "_g", SHMEM_CTX_DEFAULT, &value, source, sizeof(T), pe, true);                                     \
    return value;                                                                                                      \
  }                                                                                                                    \
  T shmem_ctx_##N##_g(shmem_ctx_t ctx, const T* source, int pe) {                                                      \
    T value;                                                                                                           \
    Get("shmem_ctx_" #N "_g", ctx, &value, source, sizeof(T), pe, true);                                               \
    return value;                                                                                                      \
  }                                                                                                                    \
  void shmem_##N##_iput(T* dest, const T* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) {               \
    Strided("shmem_" #N "_iput", SHMEM_CTX_DEFAULT, true, reinterpret_cast<char*>(dest),                               \
            reinterpret_cast<const char*>(source), dst, sst, nelems, sizeof(T), pe);                                   \
  }                                                                                                                    \
  void shmem_ctx_##N##_iput(shmem_ctx_t ctx, T* dest, const T* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,    \
                            int pe) {                                                                                  \
    Strided("shmem_ctx_" #N "_iput", ctx, true, reinterpret_cast<char*>(dest), reinterpret_cast<const char*>(source),  \
            dst, sst, nelems, sizeof(T), pe);                                                                          \
  }                                                                                                                    \
  void shmem_##N##_iget(T* dest, const T* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) {               \
    Strided("shmem_" #N "_iget", SHMEM_CTX_DEFAULT, false, reinterpret_cast<char*>(dest),                              \
            reinterpret_cast<const char*>(source), dst, sst, nelems, sizeof(T), pe);                                   \
  }                                                                                                                    \
  void shmem_ctx_##N##_iget(shmem_ctx_t ctx, T* dest, const T* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,    \
                            int pe) {                                                                                  \
    Strided("shmem_ctx_" #N "_iget", ctx, false, reinterpret_cast<char*>(dest), reinterpret_cast<const char*>(source), \
            dst, sst, nelems, sizeof(T), pe);                                                                          \
  }                                                                                                                    \
  void shmem_##N##_put_signal(T* dest, const T* source, size_t nelems, uint64_t* sig_addr, uint64_t signal,            \
                              int sig_op, int pe) {                                                                    \
    PutSignal("shmem_" #N "_put_signal", SHMEM_CTX_DEFAULT, dest, source, nelems * sizeof(T), sig_addr, signal,        \
              sig_op, pe, true);                                                                                       \
  }                                                                                                                    \
  void shmem_ctx_##N##_put_signal(shmem_ctx_t ctx, T* dest, const T* source, size_t nelems, uint64_t* sig_addr,        \
                                  uint64_t signal, int sig_op, int pe) {                                               \
    PutSignal("shmem_ctx_" #N "_put_signal", ctx, dest, source, nelems * sizeof(T), sig_addr, signal, sig_op, pe,      \
              true);                                                                                                   \
  }                                                                                                                    \
  void shmem_##N##_put_signal_nbi(T* dest, const T* source, size_t nelems, uint64_t* sig_addr, uint64_t signal,        \
                                  int sig_op, int pe) {                                                                \
    PutSignal("shmem_" #N "_put_signal_nbi", SHMEM_CTX_DEFAULT, dest, source, nelems * sizeof(T), sig_addr, signal,    \
              sig_op, pe, false);                                                                                      \
  }                                                                                                                    \
  void shmem_ctx_##N##_put_signal_nbi(shmem_ctx_t ctx, T* dest, const T* source, size_t nelems, uint64_t* sig_addr,    \
                                      uint64_t signal, int sig_op, int pe) {                                           \
    PutSignal("shmem_ctx_" #N "_put_signal_nbi", ctx, dest, source, nelems * sizeof(T), sig_addr, signal, sig_op, pe,  \
              false);                                                                                                  \
  }
HIXL_SHMEM_RMA_TYPES(HIXL_SHMEM_DEF_RMA)

#define HIXL_SHMEM_DEF_SIZED_N(BITS, BYTES)                                                                           \
  void shmem_put##BITS(void* dest, const void* source, size_t nelems, int pe) {                                       \
    Put("shmem_put" #BITS, SHMEM_CTX_DEFAULT, dest, source, nelems*(BYTES), pe, true);                                \
  }                                                                                                                   \
  void shmem_ctx_put##BITS(shmem_ctx_t ctx, void* dest, const void* source, size_t nelems, int pe) {                  \
    Put("shmem_ctx_put" #BITS, ctx, dest, source, nelems*(BYTES), pe, true);                                          \
  }                                                                                                                   \
  void shmem_put##BITS##_nbi(void* dest, const void* source, size_t nelems, int pe) {                                 \
    Put("shmem_put" #BITS "_nbi", SHMEM_CTX_DEFAULT, dest, source, nelems*(BYTES), pe, false);                        \
  }                                                                                                                   \
  void shmem_ctx_put##BITS##_nbi(shmem_ctx_t ctx, void* dest, const void* source, size_t nelems, int pe) {            \
    Put("shmem_ctx_put" #BITS "_nbi", ctx, dest, source, nelems*(BYTES), pe, false);                                  \
  }                                                                                                                   \
  void shmem_get##BITS(void* dest, const void* source, size_t nelems, int pe) {                                       \
    Get("shmem_get" #BITS, SHMEM_CTX_DEFAULT, dest, source, nelems*(BYTES), pe, true);                                \
  }                                                                                                                   \
  void shmem_ctx_get##BITS(shmem_ctx_t ctx, void* dest, const void* source, size_t nelems, int pe) {                  \
    Get("shmem_ctx_get" #BITS, ctx, dest, source, nelems*(BYTES), pe, true);                                          \
  }                                                                                                                   \
  void shmem_get##BITS##_nbi(void* dest, const void* source, size_t nelems, int pe) {                                 \
    Get("shmem_get" #BITS "_nbi", SHMEM_CTX_DEFAULT, dest, source, nelems*(BYTES), pe, false);                        \
  }                                                                                                                   \
  void shmem_ctx_get##BITS##_nbi(shmem_ctx_t ctx, void* dest, const void* source, size_t nelems, int pe) {            \
    Get("shmem_ctx_get" #BITS "_nbi", ctx, dest, source, nelems*(BYTES), pe, false);                                  \
  }                                                                                                                   \
  void shmem_iput##BITS(void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) {        \
    Strided("shmem_iput" #BITS, SHMEM_CTX_DEFAULT, true, static_cast<char*>(dest), static_cast<const char*>(source),  \
            dst, sst, nelems, (BYTES), pe);                                                                           \
  }                                                                                                                   \
  void shmem_ctx_iput##BITS(shmem_ctx_t ctx, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst,            \
                            size_t nelems, int pe) {                                                                  \
    Strided("shmem_ctx_iput" #BITS, ctx, true, static_cast<char*>(dest), static_cast<const char*>(source), dst, sst,  \
            nelems, (BYTES), pe);                                                                                     \
  }                                                                                                                   \
  void shmem_iget##BITS(void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe) {        \
    Strided("shmem_iget" #BITS, SHMEM_CTX_DEFAULT, false, static_cast<char*>(dest), static_cast<const char*>(source), \
            dst, sst, nelems, (BYTES), pe);                                                                           \
  }                                                                                                                   \
  void shmem_ctx_iget##BITS(shmem_ctx_t ctx, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst,            \
                            size_t nelems, int pe) {                                                                  \
    Strided("shmem_ctx_iget" #BITS, ctx, false, static_cast<char*>(dest), static_cast<const char*>(source), dst, sst, \
            nelems, (BYTES), pe);                                                                                     \
  }                                                                                                                   \
  void shmem_put##BITS##_signal(void* dest, const void* source, size_t nelems, uint64_t* sig_addr, uint64_t signal,   \
                                int sig_op, int pe) {                                                                 \
    PutSignal("shmem_put" #BITS "_signal", SHMEM_CTX_DEFAULT, dest, source, nelems*(BYTES), sig_addr, signal, sig_op, \
              pe, true);                                                                                              \
  }                                                                                                                   \
  void shmem_put##BITS##_signal_nbi(void* dest, const void* source, size_t nelems, uint64_t* sig_addr,                \
                                    uint64_t signal, int sig_op, int pe) {                                            \
    PutSignal("shmem_put" #BITS "_signal_nbi", SHMEM_CTX_DEFAULT, dest, source, nelems*(BYTES), sig_addr, signal,     \
              sig_op, pe, false);                                                                                     \
  }
#define HIXL_SHMEM_DEF_SIZED(BITS, CT) HIXL_SHMEM_DEF_SIZED_N(BITS, sizeof(CT))
HIXL_SHMEM_SIZES(HIXL_SHMEM_DEF_SIZED)
HIXL_SHMEM_DEF_SIZED_N(128, 16)

void shmem_putmem(void* dest, const void* source, size_t nelems, int pe) {
  Put("shmem_putmem", SHMEM_CTX_DEFAULT, dest, source, nelems, pe, true);
}
void shmem_ctx_putmem(shmem_ctx_t ctx, void* dest, const void* source, size_t nelems, int pe) {
  Put("shmem_ctx_putmem", ctx, dest, source, nelems, pe, true);
}
void shmem_putmem_nbi(void* dest, const void* source, size_t nelems, int pe) {
  Put("shmem_putmem_nbi", SHMEM_CTX_DEFAULT, dest, source, nelems, pe, false);
}
void shmem_ctx_putmem_nbi(shmem_ctx_t ctx, void* dest, const void* source, size_t nelems, int pe) {
  Put("shmem_ctx_putmem_nbi", ctx, dest, source, nelems, pe, false);
}
void shmem_getmem(void* dest, const void* source, size_t nelems, int pe) {
  Get("shmem_getmem", SHMEM_CTX_DEFAULT, dest, source, nelems, pe, true);
}
void shmem_ctx_getmem(shmem_ctx_t ctx, void* dest, const void* source, size_t nelems, int pe) {
  Get("shmem_ctx_getmem", ctx, dest, source, nelems, pe, true);
}
void shmem_getmem_nbi(void* dest, const void* source, size_t nelems, int pe) {
  Get("shmem_getmem_nbi", SHMEM_CTX_DEFAULT, dest, source, nelems, pe, false);
}
void shmem_ctx_getmem_nbi(shmem_ctx_t ctx, void* dest, const void* source, size_t nelems, int pe) {
  Get("shmem_ctx_getmem_nbi", ctx, dest, source, nelems, pe, false);
}
void shmem_putmem_signal(void* dest, const void* source, size_t nelems, uint64_t* sig_addr, uint64_t signal, int sig_op,
                         int pe) {
  PutSignal("shmem_putmem_signal", SHMEM_CTX_DEFAULT, dest, source, nelems, sig_addr, signal, sig_op, pe, true);
}
void shmem_ctx_putmem_signal(shmem_ctx_t ctx, void* dest, const void* source, size_t nelems, uint64_t* sig_addr,
                             uint64_t signal, int sig_op, int pe) {
  PutSignal("shmem_ctx_putmem_signal", ctx, dest, source, nelems, sig_addr, signal, sig_op, pe, true);
}
void shmem_putmem_signal_nbi(void* dest, const void* source, size_t nelems, uint64_t* sig_addr, uint64_t signal,
                             int sig_op, int pe) {
  PutSignal("shmem_putmem_signal_nbi", SHMEM_CTX_DEFAULT, dest, source, nelems, sig_addr, signal, sig_op, pe, false);
}
void shmem_ctx_putmem_signal_nbi(shmem_ctx_t ctx, void* dest, const void* source, size_t nelems, uint64_t* sig_addr,
                                 uint64_t signal, int sig_op, int pe) {
  PutSignal("shmem_ctx_putmem_signal_nbi", ctx, dest, source, nelems, sig_addr, signal, sig_op, pe, false);
}

uint64_t shmem_signal_fetch(const uint64_t* sig_addr) { return __atomic_load_n(sig_addr, __ATOMIC_ACQUIRE); }

uint64_t shmem_signal_wait_until(uint64_t* sig_addr, int cmp, uint64_t cmp_value) {
  // The uint64_t wait of p2p.cc: it polls, so a signal word changed by an
  // atomic of a same-host peer (which wakes no sleeper) is seen too.
  shmem_uint64_wait_until(sig_addr, cmp, cmp_value);
  return __atomic_load_n(sig_addr, __ATOMIC_ACQUIRE);
}

// Fence is quiet: transfers to a PE complete in order where they complete
// at all (shm), and a quiet orders the rest.
void shmem_fence(void) { hixl::shmem::Quiet("shmem_fence", SHMEM_CTX_DEFAULT); }
void shmem_ctx_fence(shmem_ctx_t ctx) {
  if (ctx != SHMEM_CTX_INVALID) hixl::shmem::Quiet("shmem_ctx_fence", ctx);
}
void shmem_quiet(void) { hixl::shmem::Quiet("shmem_quiet", SHMEM_CTX_DEFAULT); }
void shmem_ctx_quiet(shmem_ctx_t ctx) {
  if (ctx != SHMEM_CTX_INVALID) hixl::shmem::Quiet("shmem_ctx_quiet", ctx);
}

}  // extern "C"

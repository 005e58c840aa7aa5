/* hixl's OpenSHMEM front door: the OpenSHMEM 1.5 C API (and the 1.0-1.4
 * names programs still use) on hixl's world.  Programs include <shmem.h>
 * and build with hixl-oshcc / hixl-oshc++ (or pkg-config hixl-shmem), which
 * put this folder on the include path and link libhixl.  docs/shmem.md.
 *
 * The calls follow the standard.  Where it leaves bad input undefined (a
 * remote address that is not symmetric, a PE outside the world, a failed
 * peer), hixl prints what was wrong, naming the call, the PE and the
 * address, and ends the job as shmem_global_exit(1) does.  Every wait is
 * bounded by HIXL_TIMEOUT_MS like hixl's own. */
#ifndef HIXL_SHMEM_SHMEM_H_
#define HIXL_SHMEM_SHMEM_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Constants. */
#define SHMEM_MAJOR_VERSION 1
#define SHMEM_MINOR_VERSION 5
#define SHMEM_MAX_NAME_LEN 256
#define SHMEM_VENDOR_STRING "hixl OpenSHMEM front door"
#define _SHMEM_MAJOR_VERSION SHMEM_MAJOR_VERSION
#define _SHMEM_MINOR_VERSION SHMEM_MINOR_VERSION
#define _SHMEM_MAX_NAME_LEN SHMEM_MAX_NAME_LEN
#define _SHMEM_VENDOR_STRING SHMEM_VENDOR_STRING

#define SHMEM_THREAD_SINGLE 0
#define SHMEM_THREAD_FUNNELED 1
#define SHMEM_THREAD_SERIALIZED 2
#define SHMEM_THREAD_MULTIPLE 3

#define SHMEM_CMP_EQ 0
#define SHMEM_CMP_NE 1
#define SHMEM_CMP_GT 2
#define SHMEM_CMP_GE 3
#define SHMEM_CMP_LT 4
#define SHMEM_CMP_LE 5
#define _SHMEM_CMP_EQ SHMEM_CMP_EQ
#define _SHMEM_CMP_NE SHMEM_CMP_NE
#define _SHMEM_CMP_GT SHMEM_CMP_GT
#define _SHMEM_CMP_GE SHMEM_CMP_GE
#define _SHMEM_CMP_LT SHMEM_CMP_LT
#define _SHMEM_CMP_LE SHMEM_CMP_LE

#define SHMEM_SIGNAL_SET 0
#define SHMEM_SIGNAL_ADD 1

#define SHMEM_MALLOC_ATOMICS_REMOTE 1L
#define SHMEM_MALLOC_SIGNAL_REMOTE 2L

/* The legacy collectives' pSync arrays: hixl counts a dissemination
 * barrier's rounds in them (one word a round) and leaves every word as it
 * found it, SHMEM_SYNC_VALUE, once the call has returned on every PE.  pWrk
 * is not used (any size will do). */
#define SHMEM_SYNC_VALUE 0L
#define SHMEM_SYNC_SIZE 32
#define SHMEM_BARRIER_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_BCAST_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_REDUCE_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_COLLECT_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_ALLTOALL_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_ALLTOALLS_SYNC_SIZE SHMEM_SYNC_SIZE
#define SHMEM_REDUCE_MIN_WRKDATA_SIZE 1
#define _SHMEM_SYNC_VALUE SHMEM_SYNC_VALUE
#define _SHMEM_SYNC_SIZE SHMEM_SYNC_SIZE
#define _SHMEM_BARRIER_SYNC_SIZE SHMEM_BARRIER_SYNC_SIZE
#define _SHMEM_BCAST_SYNC_SIZE SHMEM_BCAST_SYNC_SIZE
#define _SHMEM_REDUCE_SYNC_SIZE SHMEM_REDUCE_SYNC_SIZE
#define _SHMEM_COLLECT_SYNC_SIZE SHMEM_COLLECT_SYNC_SIZE
#define _SHMEM_ALLTOALL_SYNC_SIZE SHMEM_ALLTOALL_SYNC_SIZE
#define _SHMEM_ALLTOALLS_SYNC_SIZE SHMEM_ALLTOALLS_SYNC_SIZE
#define _SHMEM_REDUCE_MIN_WRKDATA_SIZE SHMEM_REDUCE_MIN_WRKDATA_SIZE

/* ---- Teams and contexts: handles to hixl's objects. */
typedef struct hixl_shmem_team *shmem_team_t;
typedef struct hixl_shmem_ctx *shmem_ctx_t;
typedef struct {
  int num_contexts;
} shmem_team_config_t;
#define SHMEM_TEAM_NUM_CONTEXTS 1L
#define SHMEM_TEAM_INVALID ((shmem_team_t)0)
#define SHMEM_CTX_INVALID ((shmem_ctx_t)0)
#define SHMEM_CTX_SERIALIZED 1L
#define SHMEM_CTX_PRIVATE 2L
#define SHMEM_CTX_NOSTORE 4L
extern shmem_team_t SHMEM_TEAM_WORLD;  /* every PE */
extern shmem_team_t SHMEM_TEAM_SHARED; /* the PEs whose memory this PE maps (same host) */
extern shmem_ctx_t SHMEM_CTX_DEFAULT;

/* ---- The type tables: one row X(TYPE, TYPENAME, A, B) for each row of the
 * standard's tables, A and B passed to every row (shmem_generic.h's C11
 * generic selections pass the operation and the argument that selects).
 * HIXL_SHMEM_..._TYPES(X) calls X(TYPE, TYPENAME) for each row: the
 * declarations below (and hixl's definitions) are generated from them, so
 * the declarations, the definitions and the generic selections cannot
 * drift. */
/* (N##E, E empty: TYPENAME passes on unexpanded, as the generated names
 * paste it.) */
#define HIXL_SHMEM_TYPENAME_ROW(T, N, X, E) X(T, N##E)
/* clang-format off */
#define HIXL_SHMEM_RMA_TYPES_WITH(X, A, B) \
  X(float, float, A, B) X(double, double, A, B) X(long double, longdouble, A, B) \
  X(char, char, A, B) X(signed char, schar, A, B) X(short, short, A, B) X(int, int, A, B) X(long, long, A, B) \
  X(long long, longlong, A, B) \
  X(unsigned char, uchar, A, B) X(unsigned short, ushort, A, B) X(unsigned int, uint, A, B) \
  X(unsigned long, ulong, A, B) X(unsigned long long, ulonglong, A, B) \
  X(int8_t, int8, A, B) X(int16_t, int16, A, B) X(int32_t, int32, A, B) X(int64_t, int64, A, B) \
  X(uint8_t, uint8, A, B) X(uint16_t, uint16, A, B) X(uint32_t, uint32, A, B) X(uint64_t, uint64, A, B) \
  X(size_t, size, A, B) X(ptrdiff_t, ptrdiff, A, B)
#define HIXL_SHMEM_RMA_TYPES(X) HIXL_SHMEM_RMA_TYPES_WITH(HIXL_SHMEM_TYPENAME_ROW, X, )

/* Sized RMA: X(BITS, C type of that size). */
#define HIXL_SHMEM_SIZES(X) X(8, uint8_t) X(16, uint16_t) X(32, uint32_t) X(64, uint64_t)

/* Atomics: the standard types; the extended ones (fetch, set, swap); the
 * bitwise ones (and, or, xor). */
#define HIXL_SHMEM_AMO_TYPES_WITH(X, A, B) \
  X(int, int, A, B) X(long, long, A, B) X(long long, longlong, A, B) \
  X(unsigned int, uint, A, B) X(unsigned long, ulong, A, B) X(unsigned long long, ulonglong, A, B) \
  X(int32_t, int32, A, B) X(int64_t, int64, A, B) X(uint32_t, uint32, A, B) X(uint64_t, uint64, A, B) \
  X(size_t, size, A, B) X(ptrdiff_t, ptrdiff, A, B)
#define HIXL_SHMEM_EXT_AMO_TYPES_WITH(X, A, B) \
  HIXL_SHMEM_AMO_TYPES_WITH(X, A, B) X(float, float, A, B) X(double, double, A, B)
#define HIXL_SHMEM_BITWISE_AMO_TYPES_WITH(X, A, B) \
  X(unsigned int, uint, A, B) X(unsigned long, ulong, A, B) X(unsigned long long, ulonglong, A, B) \
  X(int32_t, int32, A, B) X(int64_t, int64, A, B) X(uint32_t, uint32, A, B) X(uint64_t, uint64, A, B)
#define HIXL_SHMEM_AMO_TYPES(X) HIXL_SHMEM_AMO_TYPES_WITH(HIXL_SHMEM_TYPENAME_ROW, X, )
#define HIXL_SHMEM_EXT_AMO_TYPES(X) HIXL_SHMEM_EXT_AMO_TYPES_WITH(HIXL_SHMEM_TYPENAME_ROW, X, )
#define HIXL_SHMEM_BITWISE_AMO_TYPES(X) HIXL_SHMEM_BITWISE_AMO_TYPES_WITH(HIXL_SHMEM_TYPENAME_ROW, X, )
/* The atomics' names before 1.4 (int, long, long long; float and double for
 * swap, fetch and set). */
#define HIXL_SHMEM_OLD_AMO_TYPES_WITH(X, A, B) X(int, int, A, B) X(long, long, A, B) X(long long, longlong, A, B)
#define HIXL_SHMEM_OLD_EXT_AMO_TYPES_WITH(X, A, B) \
  HIXL_SHMEM_OLD_AMO_TYPES_WITH(X, A, B) X(float, float, A, B) X(double, double, A, B)
#define HIXL_SHMEM_OLD_AMO_TYPES(X) HIXL_SHMEM_OLD_AMO_TYPES_WITH(HIXL_SHMEM_TYPENAME_ROW, X, )
#define HIXL_SHMEM_OLD_EXT_AMO_TYPES(X) HIXL_SHMEM_OLD_EXT_AMO_TYPES_WITH(HIXL_SHMEM_TYPENAME_ROW, X, )

/* Point-to-point synchronisation (wait_until, test). */
#define HIXL_SHMEM_P2P_TYPES_WITH(X, A, B) \
  X(short, short, A, B) X(int, int, A, B) X(long, long, A, B) X(long long, longlong, A, B) \
  X(unsigned short, ushort, A, B) X(unsigned int, uint, A, B) X(unsigned long, ulong, A, B) \
  X(unsigned long long, ulonglong, A, B) \
  X(int32_t, int32, A, B) X(int64_t, int64, A, B) X(uint32_t, uint32, A, B) X(uint64_t, uint64, A, B) \
  X(size_t, size, A, B) X(ptrdiff_t, ptrdiff, A, B)
#define HIXL_SHMEM_P2P_TYPES(X) HIXL_SHMEM_P2P_TYPES_WITH(HIXL_SHMEM_TYPENAME_ROW, X, )

/* Reductions on teams: and/or/xor over the bitwise types, min/max over the
 * ordered ones, sum/prod over the arithmetic ones (and, in C, the complex
 * ones below). */
#define HIXL_SHMEM_REDUCE_BITWISE_TYPES_WITH(X, A, B) \
  X(unsigned char, uchar, A, B) X(unsigned short, ushort, A, B) X(unsigned int, uint, A, B) \
  X(unsigned long, ulong, A, B) X(unsigned long long, ulonglong, A, B) \
  X(int8_t, int8, A, B) X(int16_t, int16, A, B) X(int32_t, int32, A, B) X(int64_t, int64, A, B) \
  X(uint8_t, uint8, A, B) X(uint16_t, uint16, A, B) X(uint32_t, uint32, A, B) X(uint64_t, uint64, A, B) \
  X(size_t, size, A, B)
#define HIXL_SHMEM_REDUCE_MINMAX_TYPES_WITH(X, A, B) \
  X(char, char, A, B) X(signed char, schar, A, B) X(short, short, A, B) X(int, int, A, B) X(long, long, A, B) \
  X(long long, longlong, A, B) X(ptrdiff_t, ptrdiff, A, B) \
  X(unsigned char, uchar, A, B) X(unsigned short, ushort, A, B) X(unsigned int, uint, A, B) \
  X(unsigned long, ulong, A, B) X(unsigned long long, ulonglong, A, B) \
  X(int8_t, int8, A, B) X(int16_t, int16, A, B) X(int32_t, int32, A, B) X(int64_t, int64, A, B) \
  X(uint8_t, uint8, A, B) X(uint16_t, uint16, A, B) X(uint32_t, uint32, A, B) X(uint64_t, uint64, A, B) \
  X(size_t, size, A, B) \
  X(float, float, A, B) X(double, double, A, B) X(long double, longdouble, A, B)
#define HIXL_SHMEM_REDUCE_ARITH_TYPES_WITH(X, A, B) HIXL_SHMEM_REDUCE_MINMAX_TYPES_WITH(X, A, B)
#define HIXL_SHMEM_REDUCE_BITWISE_TYPES(X) HIXL_SHMEM_REDUCE_BITWISE_TYPES_WITH(HIXL_SHMEM_TYPENAME_ROW, X, )
#define HIXL_SHMEM_REDUCE_MINMAX_TYPES(X) HIXL_SHMEM_REDUCE_MINMAX_TYPES_WITH(HIXL_SHMEM_TYPENAME_ROW, X, )
#define HIXL_SHMEM_REDUCE_ARITH_TYPES(X) HIXL_SHMEM_REDUCE_ARITH_TYPES_WITH(HIXL_SHMEM_TYPENAME_ROW, X, )
#ifndef __cplusplus
/* The complex sums and products (C only: C++ has no _Complex). */
#define HIXL_SHMEM_REDUCE_COMPLEX_TYPES_WITH(X, A, B) X(double _Complex, complexd, A, B) X(float _Complex, complexf, A, B)
#define HIXL_SHMEM_REDUCE_COMPLEX_TYPES(X) HIXL_SHMEM_REDUCE_COMPLEX_TYPES_WITH(HIXL_SHMEM_TYPENAME_ROW, X, )
#endif

/* The legacy active-set reductions (shmem_TYPENAME_OP_to_all). */
#define HIXL_SHMEM_TOALL_BITWISE_TYPES(X) X(short, short) X(int, int) X(long, long) X(long long, longlong)
#define HIXL_SHMEM_TOALL_MINMAX_TYPES(X) \
  HIXL_SHMEM_TOALL_BITWISE_TYPES(X) X(float, float) X(double, double) X(long double, longdouble)
#define HIXL_SHMEM_TOALL_ARITH_TYPES(X) HIXL_SHMEM_TOALL_MINMAX_TYPES(X)
/* clang-format on */

/* ---- Setup, exit and query. */
void shmem_init(void);
int shmem_init_thread(int requested, int *provided);
void shmem_query_thread(int *provided);
void shmem_finalize(void);
void shmem_global_exit(int status);
int shmem_my_pe(void);
int shmem_n_pes(void);
int shmem_pe_accessible(int pe);
int shmem_addr_accessible(const void *addr, int pe);
void *shmem_ptr(const void *dest, int pe);
void shmem_info_get_version(int *major, int *minor);
void shmem_info_get_name(char *name);
/* Before 1.2: */
void start_pes(int npes);
int _my_pe(void);
int _num_pes(void);

/* ---- Symmetric memory.  Collective over the world, as the standard says:
 * every PE makes the same calls in the same order; each allocation returns
 * after a barrier and each free starts with one. */
void *shmem_malloc(size_t size);
void *shmem_malloc_with_hints(size_t size, long hints);
void *shmem_calloc(size_t count, size_t size);
void *shmem_align(size_t alignment, size_t size);
void *shmem_realloc(void *ptr, size_t size);
void shmem_free(void *ptr);
void *shmalloc(size_t size);
void *shmemalign(size_t alignment, size_t size);
void *shrealloc(void *ptr, size_t size);
void shfree(void *ptr);

/* ---- Teams. */
int shmem_team_my_pe(shmem_team_t team);
int shmem_team_n_pes(shmem_team_t team);
int shmem_team_get_config(shmem_team_t team, long config_mask, shmem_team_config_t *config);
int shmem_team_translate_pe(shmem_team_t src_team, int src_pe, shmem_team_t dest_team);
int shmem_team_split_strided(shmem_team_t parent_team, int start, int stride, int size,
                             const shmem_team_config_t *config, long config_mask, shmem_team_t *new_team);
int shmem_team_split_2d(shmem_team_t parent_team, int xrange, const shmem_team_config_t *xaxis_config, long xaxis_mask,
                        shmem_team_t *xaxis_team, const shmem_team_config_t *yaxis_config, long yaxis_mask,
                        shmem_team_t *yaxis_team);
void shmem_team_destroy(shmem_team_t team);

/* ---- Contexts.  Operations on a context complete at that context's quiet
 * (or the default one's); hixl's quiet completes this process's operations
 * of every context. */
int shmem_ctx_create(long options, shmem_ctx_t *ctx);
int shmem_team_create_ctx(shmem_team_t team, long options, shmem_ctx_t *ctx);
void shmem_ctx_destroy(shmem_ctx_t ctx);
int shmem_ctx_get_team(shmem_ctx_t ctx, shmem_team_t *team);

/* ---- RMA. */
#define HIXL_SHMEM_DECL_RMA(T, N)                                                                                   \
  void shmem_##N##_put(T *dest, const T *source, size_t nelems, int pe);                                            \
  void shmem_ctx_##N##_put(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe);                       \
  void shmem_##N##_put_nbi(T *dest, const T *source, size_t nelems, int pe);                                        \
  void shmem_ctx_##N##_put_nbi(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe);                   \
  void shmem_##N##_get(T *dest, const T *source, size_t nelems, int pe);                                            \
  void shmem_ctx_##N##_get(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe);                       \
  void shmem_##N##_get_nbi(T *dest, const T *source, size_t nelems, int pe);                                        \
  void shmem_ctx_##N##_get_nbi(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, int pe);                   \
  void shmem_##N##_p(T *dest, T value, int pe);                                                                     \
  void shmem_ctx_##N##_p(shmem_ctx_t ctx, T *dest, T value, int pe);                                                \
  T shmem_##N##_g(const T *source, int pe);                                                                         \
  T shmem_ctx_##N##_g(shmem_ctx_t ctx, const T *source, int pe);                                                    \
  void shmem_##N##_iput(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);             \
  void shmem_ctx_##N##_iput(shmem_ctx_t ctx, T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, \
                            int pe);                                                                                \
  void shmem_##N##_iget(T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);             \
  void shmem_ctx_##N##_iget(shmem_ctx_t ctx, T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, \
                            int pe);                                                                                \
  void shmem_##N##_put_signal(T *dest, const T *source, size_t nelems, uint64_t *sig_addr, uint64_t signal,         \
                              int sig_op, int pe);                                                                  \
  void shmem_ctx_##N##_put_signal(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, uint64_t *sig_addr,     \
                                  uint64_t signal, int sig_op, int pe);                                             \
  void shmem_##N##_put_signal_nbi(T *dest, const T *source, size_t nelems, uint64_t *sig_addr, uint64_t signal,     \
                                  int sig_op, int pe);                                                              \
  void shmem_ctx_##N##_put_signal_nbi(shmem_ctx_t ctx, T *dest, const T *source, size_t nelems, uint64_t *sig_addr, \
                                      uint64_t signal, int sig_op, int pe);
HIXL_SHMEM_RMA_TYPES(HIXL_SHMEM_DECL_RMA)

#define HIXL_SHMEM_DECL_SIZED(BITS, CT)                                                                             \
  void shmem_put##BITS(void *dest, const void *source, size_t nelems, int pe);                                      \
  void shmem_ctx_put##BITS(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);                 \
  void shmem_put##BITS##_nbi(void *dest, const void *source, size_t nelems, int pe);                                \
  void shmem_ctx_put##BITS##_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);           \
  void shmem_get##BITS(void *dest, const void *source, size_t nelems, int pe);                                      \
  void shmem_ctx_get##BITS(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);                 \
  void shmem_get##BITS##_nbi(void *dest, const void *source, size_t nelems, int pe);                                \
  void shmem_ctx_get##BITS##_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);           \
  void shmem_iput##BITS(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);       \
  void shmem_ctx_iput##BITS(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst,          \
                            size_t nelems, int pe);                                                                 \
  void shmem_iget##BITS(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, int pe);       \
  void shmem_ctx_iget##BITS(shmem_ctx_t ctx, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst,          \
                            size_t nelems, int pe);                                                                 \
  void shmem_put##BITS##_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, \
                                int sig_op, int pe);                                                                \
  void shmem_put##BITS##_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr,              \
                                    uint64_t signal, int sig_op, int pe);
HIXL_SHMEM_SIZES(HIXL_SHMEM_DECL_SIZED)
HIXL_SHMEM_DECL_SIZED(128, void)

void shmem_putmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_putmem(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_putmem_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_putmem_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_getmem(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_getmem_nbi(void *dest, const void *source, size_t nelems, int pe);
void shmem_ctx_getmem_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, int pe);
void shmem_putmem_signal(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal, int sig_op,
                         int pe);
void shmem_ctx_putmem_signal(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr,
                             uint64_t signal, int sig_op, int pe);
void shmem_putmem_signal_nbi(void *dest, const void *source, size_t nelems, uint64_t *sig_addr, uint64_t signal,
                             int sig_op, int pe);
void shmem_ctx_putmem_signal_nbi(shmem_ctx_t ctx, void *dest, const void *source, size_t nelems, uint64_t *sig_addr,
                                 uint64_t signal, int sig_op, int pe);
uint64_t shmem_signal_fetch(const uint64_t *sig_addr);
uint64_t shmem_signal_wait_until(uint64_t *sig_addr, int cmp, uint64_t cmp_value);

/* ---- Ordering and completion. */
void shmem_fence(void);
void shmem_ctx_fence(shmem_ctx_t ctx);
void shmem_quiet(void);
void shmem_ctx_quiet(shmem_ctx_t ctx);

/* ---- Atomics. */
#define HIXL_SHMEM_DECL_AMO(T, N)                                                                 \
  T shmem_##N##_atomic_fetch_inc(T *dest, int pe);                                                \
  T shmem_ctx_##N##_atomic_fetch_inc(shmem_ctx_t ctx, T *dest, int pe);                           \
  void shmem_##N##_atomic_inc(T *dest, int pe);                                                   \
  void shmem_ctx_##N##_atomic_inc(shmem_ctx_t ctx, T *dest, int pe);                              \
  T shmem_##N##_atomic_fetch_add(T *dest, T value, int pe);                                       \
  T shmem_ctx_##N##_atomic_fetch_add(shmem_ctx_t ctx, T *dest, T value, int pe);                  \
  void shmem_##N##_atomic_add(T *dest, T value, int pe);                                          \
  void shmem_ctx_##N##_atomic_add(shmem_ctx_t ctx, T *dest, T value, int pe);                     \
  T shmem_##N##_atomic_compare_swap(T *dest, T cond, T value, int pe);                            \
  T shmem_ctx_##N##_atomic_compare_swap(shmem_ctx_t ctx, T *dest, T cond, T value, int pe);       \
  void shmem_##N##_atomic_fetch_inc_nbi(T *fetch, T *dest, int pe);                               \
  void shmem_ctx_##N##_atomic_fetch_inc_nbi(shmem_ctx_t ctx, T *fetch, T *dest, int pe);          \
  void shmem_##N##_atomic_fetch_add_nbi(T *fetch, T *dest, T value, int pe);                      \
  void shmem_ctx_##N##_atomic_fetch_add_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value, int pe); \
  void shmem_##N##_atomic_compare_swap_nbi(T *fetch, T *dest, T cond, T value, int pe);           \
  void shmem_ctx_##N##_atomic_compare_swap_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T cond, T value, int pe);
HIXL_SHMEM_AMO_TYPES(HIXL_SHMEM_DECL_AMO)

#define HIXL_SHMEM_DECL_EXT_AMO(T, N)                                                        \
  T shmem_##N##_atomic_fetch(const T *source, int pe);                                       \
  T shmem_ctx_##N##_atomic_fetch(shmem_ctx_t ctx, const T *source, int pe);                  \
  void shmem_##N##_atomic_set(T *dest, T value, int pe);                                     \
  void shmem_ctx_##N##_atomic_set(shmem_ctx_t ctx, T *dest, T value, int pe);                \
  T shmem_##N##_atomic_swap(T *dest, T value, int pe);                                       \
  T shmem_ctx_##N##_atomic_swap(shmem_ctx_t ctx, T *dest, T value, int pe);                  \
  void shmem_##N##_atomic_fetch_nbi(T *fetch, const T *source, int pe);                      \
  void shmem_ctx_##N##_atomic_fetch_nbi(shmem_ctx_t ctx, T *fetch, const T *source, int pe); \
  void shmem_##N##_atomic_swap_nbi(T *fetch, T *dest, T value, int pe);                      \
  void shmem_ctx_##N##_atomic_swap_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value, int pe);
HIXL_SHMEM_EXT_AMO_TYPES(HIXL_SHMEM_DECL_EXT_AMO)

#define HIXL_SHMEM_DECL_BITWISE_AMO(T, N)                                                         \
  T shmem_##N##_atomic_fetch_and(T *dest, T value, int pe);                                       \
  T shmem_ctx_##N##_atomic_fetch_and(shmem_ctx_t ctx, T *dest, T value, int pe);                  \
  void shmem_##N##_atomic_and(T *dest, T value, int pe);                                          \
  void shmem_ctx_##N##_atomic_and(shmem_ctx_t ctx, T *dest, T value, int pe);                     \
  T shmem_##N##_atomic_fetch_or(T *dest, T value, int pe);                                        \
  T shmem_ctx_##N##_atomic_fetch_or(shmem_ctx_t ctx, T *dest, T value, int pe);                   \
  void shmem_##N##_atomic_or(T *dest, T value, int pe);                                           \
  void shmem_ctx_##N##_atomic_or(shmem_ctx_t ctx, T *dest, T value, int pe);                      \
  T shmem_##N##_atomic_fetch_xor(T *dest, T value, int pe);                                       \
  T shmem_ctx_##N##_atomic_fetch_xor(shmem_ctx_t ctx, T *dest, T value, int pe);                  \
  void shmem_##N##_atomic_xor(T *dest, T value, int pe);                                          \
  void shmem_ctx_##N##_atomic_xor(shmem_ctx_t ctx, T *dest, T value, int pe);                     \
  void shmem_##N##_atomic_fetch_and_nbi(T *fetch, T *dest, T value, int pe);                      \
  void shmem_ctx_##N##_atomic_fetch_and_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value, int pe); \
  void shmem_##N##_atomic_fetch_or_nbi(T *fetch, T *dest, T value, int pe);                       \
  void shmem_ctx_##N##_atomic_fetch_or_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value, int pe);  \
  void shmem_##N##_atomic_fetch_xor_nbi(T *fetch, T *dest, T value, int pe);                      \
  void shmem_ctx_##N##_atomic_fetch_xor_nbi(shmem_ctx_t ctx, T *fetch, T *dest, T value, int pe);
HIXL_SHMEM_BITWISE_AMO_TYPES(HIXL_SHMEM_DECL_BITWISE_AMO)

/* The atomics' names before 1.4. */
#define HIXL_SHMEM_DECL_OLD_AMO(T, N)             \
  T shmem_##N##_fadd(T *dest, T value, int pe);   \
  T shmem_##N##_finc(T *dest, int pe);            \
  void shmem_##N##_add(T *dest, T value, int pe); \
  void shmem_##N##_inc(T *dest, int pe);          \
  T shmem_##N##_cswap(T *dest, T cond, T value, int pe);
#define HIXL_SHMEM_DECL_OLD_EXT_AMO(T, N)       \
  T shmem_##N##_swap(T *dest, T value, int pe); \
  T shmem_##N##_fetch(const T *source, int pe); \
  void shmem_##N##_set(T *dest, T value, int pe);
HIXL_SHMEM_OLD_AMO_TYPES(HIXL_SHMEM_DECL_OLD_AMO)
HIXL_SHMEM_OLD_EXT_AMO_TYPES(HIXL_SHMEM_DECL_OLD_EXT_AMO)
long shmem_swap(long *dest, long value, int pe);

/* ---- Point-to-point synchronisation. */
#define HIXL_SHMEM_DECL_P2P(T, N)                                                                                  \
  void shmem_##N##_wait_until(T *ivar, int cmp, T cmp_value);                                                      \
  void shmem_##N##_wait_until_all(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value);               \
  size_t shmem_##N##_wait_until_any(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value);             \
  size_t shmem_##N##_wait_until_some(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp,         \
                                     T cmp_value);                                                                 \
  void shmem_##N##_wait_until_all_vector(T *ivars, size_t nelems, const int *status, int cmp, T *cmp_values);      \
  size_t shmem_##N##_wait_until_any_vector(T *ivars, size_t nelems, const int *status, int cmp, T *cmp_values);    \
  size_t shmem_##N##_wait_until_some_vector(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp,  \
                                            T *cmp_values);                                                        \
  int shmem_##N##_test(T *ivar, int cmp, T cmp_value);                                                             \
  int shmem_##N##_test_all(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value);                      \
  size_t shmem_##N##_test_any(T *ivars, size_t nelems, const int *status, int cmp, T cmp_value);                   \
  size_t shmem_##N##_test_some(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp, T cmp_value); \
  int shmem_##N##_test_all_vector(T *ivars, size_t nelems, const int *status, int cmp, T *cmp_values);             \
  size_t shmem_##N##_test_any_vector(T *ivars, size_t nelems, const int *status, int cmp, T *cmp_values);          \
  size_t shmem_##N##_test_some_vector(T *ivars, size_t nelems, size_t *indices, const int *status, int cmp,        \
                                      T *cmp_values);                                                              \
  void shmem_##N##_wait(T *ivar, T cmp_value);
HIXL_SHMEM_P2P_TYPES(HIXL_SHMEM_DECL_P2P)
void shmem_wait(long *ivar, long cmp_value);
void shmem_wait_until(long *ivar, int cmp, long cmp_value);

/* ---- Distributed locks (a symmetric long, zero before first use). */
void shmem_set_lock(long *lock);
int shmem_test_lock(long *lock);
void shmem_clear_lock(long *lock);

/* ---- Collectives on teams. */
void shmem_barrier_all(void);
void shmem_sync_all(void);
int shmem_team_sync(shmem_team_t team);
int shmem_broadcastmem(shmem_team_t team, void *dest, const void *source, size_t nelems, int PE_root);
int shmem_collectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_fcollectmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallmem(shmem_team_t team, void *dest, const void *source, size_t nelems);
int shmem_alltoallsmem(shmem_team_t team, void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
#define HIXL_SHMEM_DECL_COLL(T, N)                                                                    \
  int shmem_##N##_broadcast(shmem_team_t team, T *dest, const T *source, size_t nelems, int PE_root); \
  int shmem_##N##_collect(shmem_team_t team, T *dest, const T *source, size_t nelems);                \
  int shmem_##N##_fcollect(shmem_team_t team, T *dest, const T *source, size_t nelems);               \
  int shmem_##N##_alltoall(shmem_team_t team, T *dest, const T *source, size_t nelems);               \
  int shmem_##N##_alltoalls(shmem_team_t team, T *dest, const T *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems);
HIXL_SHMEM_RMA_TYPES(HIXL_SHMEM_DECL_COLL)

#define HIXL_SHMEM_DECL_REDUCE(T, N, OP) \
  int shmem_##N##_##OP##_reduce(shmem_team_t team, T *dest, const T *source, size_t nreduce);
#define HIXL_SHMEM_DECL_REDUCE_BITWISE(T, N) \
  HIXL_SHMEM_DECL_REDUCE(T, N, and) HIXL_SHMEM_DECL_REDUCE(T, N, or) HIXL_SHMEM_DECL_REDUCE(T, N, xor)
#define HIXL_SHMEM_DECL_REDUCE_MINMAX(T, N) HIXL_SHMEM_DECL_REDUCE(T, N, min) HIXL_SHMEM_DECL_REDUCE(T, N, max)
#define HIXL_SHMEM_DECL_REDUCE_ARITH(T, N) HIXL_SHMEM_DECL_REDUCE(T, N, sum) HIXL_SHMEM_DECL_REDUCE(T, N, prod)
HIXL_SHMEM_REDUCE_BITWISE_TYPES(HIXL_SHMEM_DECL_REDUCE_BITWISE)
HIXL_SHMEM_REDUCE_MINMAX_TYPES(HIXL_SHMEM_DECL_REDUCE_MINMAX)
HIXL_SHMEM_REDUCE_ARITH_TYPES(HIXL_SHMEM_DECL_REDUCE_ARITH)

/* ---- The legacy collectives on active sets: the PEs PE_start,
 * PE_start + 2^logPE_stride, ... (PE_size of them); pSync a symmetric array
 * of SHMEM_*_SYNC_SIZE longs, each SHMEM_SYNC_VALUE before first use. */
void shmem_barrier(int PE_start, int logPE_stride, int PE_size, long *pSync);
void shmem_sync(int PE_start, int logPE_stride, int PE_size, long *pSync);
#define HIXL_SHMEM_DECL_OLD_COLL(BITS, CT)                                                                             \
  void shmem_broadcast##BITS(void *dest, const void *source, size_t nelems, int PE_root, int PE_start,                 \
                             int logPE_stride, int PE_size, long *pSync);                                              \
  void shmem_collect##BITS(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride, int PE_size, \
                           long *pSync);                                                                               \
  void shmem_fcollect##BITS(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride,             \
                            int PE_size, long *pSync);                                                                 \
  void shmem_alltoall##BITS(void *dest, const void *source, size_t nelems, int PE_start, int logPE_stride,             \
                            int PE_size, long *pSync);                                                                 \
  void shmem_alltoalls##BITS(void *dest, const void *source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,              \
                             int PE_start, int logPE_stride, int PE_size, long *pSync);
HIXL_SHMEM_DECL_OLD_COLL(32, uint32_t)
HIXL_SHMEM_DECL_OLD_COLL(64, uint64_t)

#define HIXL_SHMEM_DECL_TOALL(T, N, OP)                                                                              \
  void shmem_##N##_##OP##_to_all(T *dest, const T *source, int nreduce, int PE_start, int logPE_stride, int PE_size, \
                                 T *pWrk, long *pSync);
#define HIXL_SHMEM_DECL_TOALL_BITWISE(T, N) \
  HIXL_SHMEM_DECL_TOALL(T, N, and) HIXL_SHMEM_DECL_TOALL(T, N, or) HIXL_SHMEM_DECL_TOALL(T, N, xor)
#define HIXL_SHMEM_DECL_TOALL_MINMAX(T, N) HIXL_SHMEM_DECL_TOALL(T, N, min) HIXL_SHMEM_DECL_TOALL(T, N, max)
#define HIXL_SHMEM_DECL_TOALL_ARITH(T, N) HIXL_SHMEM_DECL_TOALL(T, N, sum) HIXL_SHMEM_DECL_TOALL(T, N, prod)
HIXL_SHMEM_TOALL_BITWISE_TYPES(HIXL_SHMEM_DECL_TOALL_BITWISE)
HIXL_SHMEM_TOALL_MINMAX_TYPES(HIXL_SHMEM_DECL_TOALL_MINMAX)
HIXL_SHMEM_TOALL_ARITH_TYPES(HIXL_SHMEM_DECL_TOALL_ARITH)
#ifndef __cplusplus
HIXL_SHMEM_REDUCE_COMPLEX_TYPES(HIXL_SHMEM_DECL_TOALL_ARITH)
HIXL_SHMEM_REDUCE_COMPLEX_TYPES(HIXL_SHMEM_DECL_REDUCE_ARITH)
#endif

/* ---- The C11 generic names (shmem_put(dest, source, n, pe) on any type of
 * the standard's tables, with or without a context first): C11 and later,
 * not C++. */
#if !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#include <hixl/shmem/shmem_generic.h>
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif /* HIXL_SHMEM_SHMEM_H_ */

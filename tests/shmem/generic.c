/* The OpenSHMEM 1.5 C11 generic names of hixl's front door
 * (include/hixl/shmem/shmem_generic.h): a C11 program that calls every
 * generic name, on several types of each name's table, without and with a
 * context first (shmem_ctx_create's, and SHMEM_CTX_DEFAULT), and checks
 * what arrives on the peer, what comes back and what the collectives
 * compute.  Any number of PEs >= 2.  A failed check prints file:line, the
 * PE, the section and what failed, and ends the job with
 * shmem_global_exit(1); PE 0 prints "shmem generic: N checks passed". */
#include <shmem.h>

#include "check.h"

#include <complex.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#if !defined(shmem_put) || !defined(shmem_atomic_fetch_xor_nbi) || !defined(shmem_test_some_vector) || \
    !defined(shmem_prod_reduce) || !defined(shmem_cswap)
#error "shmem.h declares no C11 generic names"
#endif

static shmem_ctx_t ctx; /* a context of this PE's own */

/* A value that PE src writes at index i: small, positive, exact in every type. */
#define VAL(T, src, i) ((T)((((src)*31) + ((i)*7) + 1) % 101))
#define NR 8

/* Symmetric scratch (shmem_malloc'd in main) and a signal word. */
static unsigned char *pool_a, *pool_b;
static uint64_t sig;

/* ------------------------------------------------------------------ RMA */

/* Every RMA name, without and with a context, on type T: each PE writes to
 * its right neighbour and reads what its left neighbour wrote. */
#define RMA_TEST(T)                                                                                             \
  static void rma_##T(void) {                                                                                   \
    T *a = (T *)(void *)pool_a, *b = (T *)(void *)pool_b;                                                       \
    T src[NR], got[NR];                                                                                         \
    const T *csrc = src;                                                                                        \
    int k;                                                                                                      \
    section("rma " #T);                                                                                         \
    for (k = 0; k < NR; k++) src[k] = VAL(T, me, k);                                                            \
    shmem_barrier_all();                                                                                        \
    shmem_put(a, csrc, NR, right_pe);                                                                           \
    shmem_put(ctx, b, src, NR, right_pe);                                                                       \
    shmem_ctx_quiet(ctx);                                                                                       \
    shmem_barrier_all();                                                                                        \
    for (k = 0; k < NR; k++) {                                                                                  \
      CHECK(a[k] == VAL(T, left_pe, k), "shmem_put [%d]", k);                                                   \
      CHECK(b[k] == VAL(T, left_pe, k), "shmem_put(ctx) [%d]", k);                                              \
    }                                                                                                           \
    shmem_barrier_all();                                                                                        \
    /* a and b on the right PE hold what this PE wrote */                                                       \
    shmem_get(got, a, NR, right_pe);                                                                            \
    for (k = 0; k < NR; k++) CHECK(got[k] == VAL(T, me, k), "shmem_get [%d]", k);                               \
    shmem_get(SHMEM_CTX_DEFAULT, got, b, NR, right_pe);                                                         \
    for (k = 0; k < NR; k++) CHECK(got[k] == VAL(T, me, k), "shmem_get(SHMEM_CTX_DEFAULT) [%d]", k);            \
    CHECK(shmem_g(&a[3], right_pe) == VAL(T, me, 3), "shmem_g");                                                \
    CHECK(shmem_g(ctx, (const T *)&b[4], right_pe) == VAL(T, me, 4), "shmem_g(ctx) of a const T *");            \
    shmem_barrier_all();                                                                                        \
    shmem_p(&a[0], (T)77, right_pe);                                                                            \
    shmem_p(ctx, &b[0], (T)78, right_pe);                                                                       \
    shmem_ctx_quiet(ctx);                                                                                       \
    shmem_barrier_all();                                                                                        \
    CHECK(a[0] == (T)77 && b[0] == (T)78, "shmem_p, shmem_p(ctx)");                                             \
    shmem_barrier_all();                                                                                        \
    /* strided: every other element of src into the first NR / 2 of dest, and back */                           \
    for (k = 0; k < NR; k++) a[k] = b[k] = (T)0;                                                                \
    shmem_barrier_all();                                                                                        \
    shmem_iput(a, src, 1, 2, NR / 2, right_pe);                                                                 \
    shmem_iput(ctx, b, src, 2, 1, NR / 2, right_pe);                                                            \
    shmem_ctx_quiet(ctx);                                                                                       \
    shmem_barrier_all();                                                                                        \
    for (k = 0; k < NR / 2; k++) {                                                                              \
      CHECK(a[k] == VAL(T, left_pe, 2 * k), "shmem_iput [%d]", k);                                              \
      CHECK(b[2 * k] == VAL(T, left_pe, k), "shmem_iput(ctx) [%d]", 2 * k);                                     \
    }                                                                                                           \
    shmem_iget(got, a, 2, 1, NR / 2, right_pe);                                                                 \
    for (k = 0; k < NR / 2; k++) CHECK(got[2 * k] == VAL(T, me, 2 * k), "shmem_iget [%d]", 2 * k);              \
    shmem_iget(ctx, got, b, 1, 2, NR / 2, right_pe);                                                            \
    for (k = 0; k < NR / 2; k++) CHECK(got[k] == VAL(T, me, k), "shmem_iget(ctx) [%d]", k);                     \
    shmem_barrier_all();                                                                                        \
    /* non-blocking: complete at quiet */                                                                       \
    shmem_put_nbi(a, src, NR, right_pe);                                                                        \
    shmem_put_nbi(ctx, b, src, NR, right_pe);                                                                   \
    shmem_quiet();                                                                                              \
    shmem_ctx_quiet(ctx);                                                                                       \
    shmem_barrier_all();                                                                                        \
    for (k = 0; k < NR; k++) CHECK(a[k] == VAL(T, left_pe, k) && b[k] == a[k], "shmem_put_nbi [%d]", k);        \
    shmem_get_nbi(got, a, NR, right_pe);                                                                        \
    shmem_quiet();                                                                                              \
    for (k = 0; k < NR; k++) CHECK(got[k] == VAL(T, me, k), "shmem_get_nbi [%d]", k);                           \
    shmem_get_nbi(ctx, got, b, NR / 2, left_pe);                                                                \
    shmem_ctx_quiet(ctx);                                                                                       \
    for (k = 0; k < NR / 2; k++) CHECK(got[k] == VAL(T, (left_pe + npes - 1) % npes, k), "get_nbi(ctx) %d", k); \
    shmem_barrier_all();                                                                                        \
    /* with a signal: each of the four puts adds 1 to the right PE's sig */                                     \
    sig = 0;                                                                                                    \
    for (k = 0; k < NR; k++) a[k] = b[k] = (T)0;                                                                \
    shmem_barrier_all();                                                                                        \
    shmem_put_signal(a, src, NR / 2, &sig, 1, SHMEM_SIGNAL_ADD, right_pe);                                      \
    shmem_put_signal(ctx, &a[NR / 2], &src[NR / 2], NR / 2, &sig, 1, SHMEM_SIGNAL_ADD, right_pe);               \
    shmem_put_signal_nbi(b, src, NR / 2, &sig, 1, SHMEM_SIGNAL_ADD, right_pe);                                  \
    shmem_put_signal_nbi(ctx, &b[NR / 2], &src[NR / 2], NR / 2, &sig, 1, SHMEM_SIGNAL_ADD, right_pe);           \
    shmem_quiet();                                                                                              \
    shmem_ctx_quiet(ctx);                                                                                       \
    CHECK(shmem_signal_wait_until(&sig, SHMEM_CMP_EQ, 4) == 4, "the signal");                                   \
    for (k = 0; k < NR; k++) CHECK(a[k] == VAL(T, left_pe, k) && b[k] == a[k], "shmem_put_signal [%d]", k);     \
    shmem_barrier_all();                                                                                        \
  }
/* clang-format off */
#define RMA_TEST_TYPES(X) \
  X(char) X(short) X(int) X(long) X(float) X(double) X(ldouble) X(ullong) \
  X(int8_t) X(uint16_t) X(int32_t) X(uint64_t) X(size_t) X(ptrdiff_t)
/* clang-format on */
typedef long double ldouble;
typedef unsigned long long ullong;
RMA_TEST_TYPES(RMA_TEST)

/* -------------------------------------------------------------- atomics */

/* The standard AMO names (and the extended ones) on T: each PE updates its
 * right neighbour's x, so each x has one writer and every fetched value is
 * known. */
static long amo_x[16];
#define AMO_TEST(T, slot)                                                                                 \
  static void amo_##T(void) {                                                                             \
    T *x = (T *)(void *)&amo_x[slot], f = (T)0;                                                           \
    section("atomics " #T);                                                                               \
    shmem_atomic_set(x, (T)5, right_pe);                                                                  \
    shmem_quiet();                                                                                        \
    CHECK(shmem_atomic_fetch(x, right_pe) == (T)5, "shmem_atomic_fetch");                                 \
    CHECK(shmem_atomic_fetch(ctx, (const T *)x, right_pe) == (T)5, "shmem_atomic_fetch(ctx)");            \
    CHECK(shmem_atomic_swap(x, (T)6, right_pe) == (T)5, "shmem_atomic_swap");                             \
    CHECK(shmem_atomic_swap(ctx, x, (T)7, right_pe) == (T)6, "shmem_atomic_swap(ctx)");                   \
    CHECK(shmem_atomic_compare_swap(x, (T)7, (T)9, right_pe) == (T)7, "shmem_atomic_compare_swap");       \
    CHECK(shmem_atomic_compare_swap(ctx, x, (T)8, (T)1, right_pe) == (T)9, "compare_swap(ctx), unequal"); \
    CHECK(shmem_atomic_fetch_inc(x, right_pe) == (T)9, "shmem_atomic_fetch_inc");                         \
    CHECK(shmem_atomic_fetch_inc(ctx, x, right_pe) == (T)10, "shmem_atomic_fetch_inc(ctx)");              \
    shmem_atomic_inc(x, right_pe);                                                                        \
    shmem_atomic_inc(ctx, x, right_pe);                                                                   \
    shmem_quiet();                                                                                        \
    CHECK(shmem_atomic_fetch_add(x, (T)3, right_pe) == (T)13, "shmem_atomic_fetch_add");                  \
    CHECK(shmem_atomic_fetch_add(ctx, x, (T)3, right_pe) == (T)16, "shmem_atomic_fetch_add(ctx)");        \
    shmem_atomic_add(x, (T)2, right_pe);                                                                  \
    shmem_atomic_add(SHMEM_CTX_DEFAULT, x, (T)2, right_pe);                                               \
    shmem_quiet();                                                                                        \
    shmem_atomic_fetch_nbi(&f, x, right_pe);                                                              \
    shmem_quiet();                                                                                        \
    CHECK(f == (T)23, "shmem_atomic_fetch_nbi");                                                          \
    shmem_atomic_fetch_nbi(ctx, &f, (const T *)x, right_pe);                                              \
    shmem_ctx_quiet(ctx);                                                                                 \
    CHECK(f == (T)23, "shmem_atomic_fetch_nbi(ctx)");                                                     \
    shmem_atomic_swap_nbi(&f, x, (T)30, right_pe);                                                        \
    shmem_quiet();                                                                                        \
    CHECK(f == (T)23, "shmem_atomic_swap_nbi");                                                           \
    shmem_atomic_swap_nbi(ctx, &f, x, (T)31, right_pe);                                                   \
    shmem_ctx_quiet(ctx);                                                                                 \
    CHECK(f == (T)30, "shmem_atomic_swap_nbi(ctx)");                                                      \
    shmem_atomic_compare_swap_nbi(&f, x, (T)31, (T)40, right_pe);                                         \
    shmem_quiet();                                                                                        \
    CHECK(f == (T)31, "shmem_atomic_compare_swap_nbi");                                                   \
    shmem_atomic_compare_swap_nbi(ctx, &f, x, (T)40, (T)41, right_pe);                                    \
    shmem_ctx_quiet(ctx);                                                                                 \
    CHECK(f == (T)40, "shmem_atomic_compare_swap_nbi(ctx)");                                              \
    shmem_atomic_fetch_inc_nbi(&f, x, right_pe);                                                          \
    shmem_quiet();                                                                                        \
    CHECK(f == (T)41, "shmem_atomic_fetch_inc_nbi");                                                      \
    shmem_atomic_fetch_inc_nbi(ctx, &f, x, right_pe);                                                     \
    shmem_ctx_quiet(ctx);                                                                                 \
    CHECK(f == (T)42, "shmem_atomic_fetch_inc_nbi(ctx)");                                                 \
    shmem_atomic_fetch_add_nbi(&f, x, (T)10, right_pe);                                                   \
    shmem_quiet();                                                                                        \
    CHECK(f == (T)43, "shmem_atomic_fetch_add_nbi");                                                      \
    shmem_atomic_fetch_add_nbi(ctx, &f, x, (T)10, right_pe);                                              \
    shmem_ctx_quiet(ctx);                                                                                 \
    CHECK(f == (T)53, "shmem_atomic_fetch_add_nbi(ctx)");                                                 \
    shmem_barrier_all();                                                                                  \
    CHECK(*x == (T)63, "the value the left PE left here");                                                \
    shmem_barrier_all();                                                                                  \
  }
/* float and double: the extended names only. */
#define EXT_AMO_TEST(T, slot)                                                               \
  static void amo_##T(void) {                                                               \
    T *x = (T *)(void *)&amo_x[slot], f = (T)0;                                             \
    section("atomics " #T);                                                                 \
    shmem_atomic_set(x, (T)1.5, right_pe);                                                  \
    shmem_quiet();                                                                          \
    CHECK(shmem_atomic_fetch(x, right_pe) == (T)1.5, "shmem_atomic_set");                   \
    shmem_atomic_set(ctx, x, (T)2.5, right_pe);                                             \
    shmem_ctx_quiet(ctx);                                                                   \
    CHECK(shmem_atomic_fetch(x, right_pe) == (T)2.5, "shmem_atomic_fetch");                 \
    CHECK(shmem_atomic_fetch(ctx, x, right_pe) == (T)2.5, "shmem_atomic_fetch(ctx)");       \
    CHECK(shmem_atomic_swap(x, (T)3.5, right_pe) == (T)2.5, "shmem_atomic_swap");           \
    CHECK(shmem_atomic_swap(ctx, x, (T)4.5, right_pe) == (T)3.5, "shmem_atomic_swap(ctx)"); \
    shmem_atomic_fetch_nbi(&f, x, right_pe);                                                \
    shmem_quiet();                                                                          \
    CHECK(f == (T)4.5, "shmem_atomic_fetch_nbi");                                           \
    shmem_atomic_swap_nbi(ctx, &f, x, (T)5.5, right_pe);                                    \
    shmem_ctx_quiet(ctx);                                                                   \
    CHECK(f == (T)4.5, "shmem_atomic_swap_nbi(ctx)");                                       \
    shmem_atomic_swap_nbi(&f, x, (T)6.5, right_pe);                                         \
    shmem_quiet();                                                                          \
    CHECK(f == (T)5.5, "shmem_atomic_swap_nbi");                                            \
    shmem_atomic_fetch_nbi(ctx, &f, x, right_pe);                                           \
    shmem_ctx_quiet(ctx);                                                                   \
    CHECK(f == (T)6.5, "shmem_atomic_fetch_nbi(ctx)");                                      \
    shmem_barrier_all();                                                                    \
    CHECK(*x == (T)6.5, "the value the left PE left here");                                 \
    shmem_barrier_all();                                                                    \
  }
/* The bitwise names on T (each step's operand makes and, or and xor give
 * different results). */
#define BITWISE_AMO_TEST(T, slot)                                                             \
  static void bitwise_##T(void) {                                                             \
    T *x = (T *)(void *)&amo_x[slot], f = (T)0;                                               \
    section("bitwise atomics " #T);                                                           \
    shmem_atomic_set(x, (T)0xF0, right_pe);                                                   \
    shmem_quiet();                                                                            \
    CHECK(shmem_atomic_fetch_and(x, (T)0x3C, right_pe) == (T)0xF0, "shmem_atomic_fetch_and"); \
    CHECK(shmem_atomic_fetch_and(ctx, x, (T)0x1F, right_pe) == (T)0x30, "fetch_and(ctx)");    \
    CHECK(shmem_atomic_fetch_or(x, (T)0x15, right_pe) == (T)0x10, "shmem_atomic_fetch_or");   \
    CHECK(shmem_atomic_fetch_or(ctx, x, (T)0x41, right_pe) == (T)0x15, "fetch_or(ctx)");      \
    CHECK(shmem_atomic_fetch_xor(x, (T)0xFF, right_pe) == (T)0x55, "shmem_atomic_fetch_xor"); \
    CHECK(shmem_atomic_fetch_xor(ctx, x, (T)0x0F, right_pe) == (T)0xAA, "fetch_xor(ctx)");    \
    shmem_atomic_and(x, (T)0xF3, right_pe); /* 0xA5 -> 0xA1 */                                \
    shmem_quiet();                                                                            \
    shmem_atomic_and(ctx, x, (T)0xE1, right_pe); /* -> 0xA1 */                                \
    shmem_quiet();                                                                            \
    shmem_atomic_or(x, (T)0x03, right_pe); /* -> 0xA3 */                                      \
    shmem_quiet();                                                                            \
    shmem_atomic_or(ctx, x, (T)0x09, right_pe); /* -> 0xAB */                                 \
    shmem_quiet();                                                                            \
    shmem_atomic_xor(x, (T)0x01, right_pe); /* -> 0xAA */                                     \
    shmem_quiet();                                                                            \
    shmem_atomic_xor(ctx, x, (T)0xF0, right_pe); /* -> 0x5A */                                \
    shmem_quiet();                                                                            \
    CHECK(shmem_atomic_fetch(x, right_pe) == (T)0x5A, "and, or, xor: %#llx",                  \
          (unsigned long long)shmem_atomic_fetch(x, right_pe));                               \
    shmem_atomic_fetch_and_nbi(&f, x, (T)0x1E, right_pe); /* -> 0x1A */                       \
    shmem_quiet();                                                                            \
    CHECK(f == (T)0x5A, "shmem_atomic_fetch_and_nbi");                                        \
    shmem_atomic_fetch_and_nbi(ctx, &f, x, (T)0x0F, right_pe); /* -> 0x0A */                  \
    shmem_ctx_quiet(ctx);                                                                     \
    CHECK(f == (T)0x1A, "shmem_atomic_fetch_and_nbi(ctx)");                                   \
    shmem_atomic_fetch_or_nbi(&f, x, (T)0x32, right_pe); /* -> 0x3A */                        \
    shmem_quiet();                                                                            \
    CHECK(f == (T)0x0A, "shmem_atomic_fetch_or_nbi");                                         \
    shmem_atomic_fetch_or_nbi(ctx, &f, x, (T)0x03, right_pe); /* -> 0x3B */                   \
    shmem_ctx_quiet(ctx);                                                                     \
    CHECK(f == (T)0x3A, "shmem_atomic_fetch_or_nbi(ctx)");                                    \
    shmem_atomic_fetch_xor_nbi(&f, x, (T)0x03, right_pe); /* -> 0x38 */                       \
    shmem_quiet();                                                                            \
    CHECK(f == (T)0x3B, "shmem_atomic_fetch_xor_nbi");                                        \
    shmem_atomic_fetch_xor_nbi(ctx, &f, x, (T)0x18, right_pe); /* -> 0x20 */                  \
    shmem_ctx_quiet(ctx);                                                                     \
    CHECK(f == (T)0x38, "shmem_atomic_fetch_xor_nbi(ctx)");                                   \
    shmem_barrier_all();                                                                      \
    CHECK(*x == (T)0x20, "the value the left PE left here: %#llx", (unsigned long long)*x);   \
    shmem_barrier_all();                                                                      \
  }
typedef unsigned int uint;
typedef long long llong;
/* X(type, slot of amo_x) */
#define AMO_TEST_TYPES(X) \
  X(int, 0) X(long, 1) X(llong, 2) X(uint, 3) X(int32_t, 4) X(uint64_t, 5) X(size_t, 6) X(ptrdiff_t, 7)
#define BITWISE_TEST_TYPES(X) X(uint, 10) X(int32_t, 11) X(int64_t, 12) X(uint64_t, 13)
AMO_TEST_TYPES(AMO_TEST)
EXT_AMO_TEST(float, 8)
EXT_AMO_TEST(double, 9)
BITWISE_TEST_TYPES(BITWISE_AMO_TEST)

/* The generic names before 1.4 (deprecated): int, long, long long, and
 * float and double for swap, fetch and set. */
static void old_atomics(void) {
  int *xi = (int *)(void *)&amo_x[0];
  long *xl = &amo_x[1];
  long long *xll = (long long *)(void *)&amo_x[2];
  double *xd = (double *)(void *)&amo_x[9];
  section("atomics before 1.4");
  shmem_set(xi, 1, right_pe);
  shmem_set(xl, 2L, right_pe);
  shmem_set(xll, 3LL, right_pe);
  shmem_set(xd, 0.5, right_pe);
  shmem_quiet();
  CHECK(shmem_fetch(xi, right_pe) == 1 && shmem_fetch(xl, right_pe) == 2L && shmem_fetch(xll, right_pe) == 3LL,
        "shmem_fetch");
  CHECK(shmem_fetch((const double *)xd, right_pe) == 0.5, "shmem_fetch (double)");
  CHECK(shmem_swap(xd, 1.5, right_pe) == 0.5, "shmem_swap (double)");
  CHECK(shmem_swap(xl, 20L, right_pe) == 2L, "shmem_swap (long)");
  CHECK(shmem_cswap(xi, 1, 10, right_pe) == 1, "shmem_cswap (int)");
  CHECK(shmem_finc(xll, right_pe) == 3LL, "shmem_finc (long long)");
  CHECK(shmem_fadd(xi, 5, right_pe) == 10, "shmem_fadd (int)");
  shmem_inc(xl, right_pe);
  shmem_add(xll, 100LL, right_pe);
  shmem_barrier_all();
  CHECK(*xi == 15 && *xl == 21 && *xll == 104 && *xd == 1.5, "what the left PE left here: %d %ld %lld %g", *xi, *xl,
        *xll, *xd);
  shmem_barrier_all();
}

/* -------------------------------------------- point-to-point synchronisation */

/* Every wait_until and test name on T: the left PE writes 1, 2, 3, 4 into
 * this PE's iv[0..3]. */
static long p2p_iv[4 * 8];
#define P2P_TEST(T, slot)                                                                                   \
  static void p2p_##T(void) {                                                                               \
    T *iv = (T *)(void *)&p2p_iv[4 * (slot)];                                                               \
    T cmpv[4] = {1, 2, 3, 4}, some[4] = {1, 9, 3, 9};                                                       \
    int skip0[4] = {1, 0, 0, 0};                                                                            \
    size_t idx[4], n;                                                                                       \
    int k;                                                                                                  \
    section("point-to-point " #T);                                                                          \
    for (k = 0; k < 4; k++) iv[k] = (T)0;                                                                   \
    CHECK(shmem_test(&iv[0], SHMEM_CMP_EQ, (T)1) == 0, "shmem_test before the writes");                     \
    CHECK(shmem_test_all(iv, 4, NULL, SHMEM_CMP_GT, (T)0) == 0, "shmem_test_all before the writes");        \
    CHECK(shmem_test_any(iv, 4, NULL, SHMEM_CMP_NE, (T)0) == SIZE_MAX, "shmem_test_any before the writes"); \
    CHECK(shmem_test_some(iv, 4, idx, NULL, SHMEM_CMP_NE, (T)0) == 0, "shmem_test_some before the writes"); \
    shmem_barrier_all();                                                                                    \
    for (k = 0; k < 4; k++) shmem_p(&iv[k], (T)(k + 1), right_pe);                                          \
    shmem_wait_until(&iv[3], SHMEM_CMP_EQ, (T)4);                                                           \
    shmem_wait_until_all(iv, 4, NULL, SHMEM_CMP_GT, (T)0);                                                  \
    for (k = 0; k < 4; k++) CHECK(iv[k] == (T)(k + 1), "shmem_wait_until_all: [%d]", k);                    \
    n = shmem_wait_until_any(iv, 4, skip0, SHMEM_CMP_LE, (T)2);                                             \
    CHECK(n == 1, "shmem_wait_until_any (0 skipped): %zu", n);                                              \
    n = shmem_wait_until_some(iv, 4, idx, NULL, SHMEM_CMP_GE, (T)3);                                        \
    CHECK(n == 2 && idx[0] == 2 && idx[1] == 3, "shmem_wait_until_some: %zu", n);                           \
    shmem_wait_until_all_vector(iv, 4, NULL, SHMEM_CMP_EQ, cmpv);                                           \
    n = shmem_wait_until_any_vector(iv, 4, skip0, SHMEM_CMP_EQ, cmpv);                                      \
    CHECK(n >= 1 && n <= 3, "shmem_wait_until_any_vector: %zu", n);                                         \
    n = shmem_wait_until_some_vector(iv, 4, idx, NULL, SHMEM_CMP_EQ, some);                                 \
    CHECK(n == 2 && idx[0] == 0 && idx[1] == 2, "shmem_wait_until_some_vector: %zu", n);                    \
    CHECK(shmem_test(&iv[1], SHMEM_CMP_EQ, (T)2) == 1, "shmem_test");                                       \
    CHECK(shmem_test_all(iv, 4, NULL, SHMEM_CMP_LT, (T)5) == 1, "shmem_test_all");                          \
    CHECK(shmem_test_any(iv, 4, NULL, SHMEM_CMP_EQ, (T)4) == 3, "shmem_test_any");                          \
    n = shmem_test_some(iv, 4, idx, skip0, SHMEM_CMP_LE, (T)3);                                             \
    CHECK(n == 2 && idx[0] == 1 && idx[1] == 2, "shmem_test_some: %zu", n);                                 \
    CHECK(shmem_test_all_vector(iv, 4, NULL, SHMEM_CMP_EQ, cmpv) == 1, "shmem_test_all_vector");            \
    CHECK(shmem_test_all_vector(iv, 4, NULL, SHMEM_CMP_EQ, some) == 0, "shmem_test_all_vector, unequal");   \
    n = shmem_test_any_vector(iv, 4, skip0, SHMEM_CMP_EQ, some);                                            \
    CHECK(n == 2, "shmem_test_any_vector: %zu", n);                                                         \
    n = shmem_test_some_vector(iv, 4, idx, NULL, SHMEM_CMP_NE, some);                                       \
    CHECK(n == 2 && idx[0] == 1 && idx[1] == 3, "shmem_test_some_vector: %zu", n);                          \
    shmem_barrier_all();                                                                                    \
  }
typedef unsigned short ushort;
/* X(type, slot of p2p_iv) */
#define P2P_TEST_TYPES(X) \
  X(short, 0) X(int, 1) X(long, 2) X(ushort, 3) X(int32_t, 4) X(uint64_t, 5) X(size_t, 6) X(ptrdiff_t, 7)
P2P_TEST_TYPES(P2P_TEST)

/* ---------------------------------------------------------- collectives */

/* broadcast, collect, fcollect, alltoall and alltoalls on T over the world. */
#define COLL_TEST(T)                                                                                                 \
  static void coll_##T(void) {                                                                                       \
    T *src = (T *)(void *)pool_a, *dst = (T *)(void *)pool_b;                                                        \
    int k, j, at, root = npes - 1;                                                                                   \
    section("collectives " #T);                                                                                      \
    for (k = 0; k < NR * npes; k++) src[k] = VAL(T, me, k);                                                          \
    shmem_barrier_all();                                                                                             \
    CHECK(shmem_broadcast(SHMEM_TEAM_WORLD, dst, src, NR, root) == 0, "shmem_broadcast");                            \
    for (k = 0; k < NR; k++) CHECK(dst[k] == VAL(T, root, k), "shmem_broadcast [%d]", k);                            \
    shmem_barrier_all();                                                                                             \
    /* collect: PE j gives j + 1 elements */                                                                         \
    CHECK(shmem_collect(SHMEM_TEAM_WORLD, dst, src, (size_t)me + 1) == 0, "shmem_collect");                          \
    for (j = 0, at = 0; j < npes; j++)                                                                               \
      for (k = 0; k <= j; k++, at++) CHECK(dst[at] == VAL(T, j, k), "shmem_collect: PE %d [%d]", j, k);              \
    shmem_barrier_all();                                                                                             \
    CHECK(shmem_fcollect(SHMEM_TEAM_WORLD, dst, src, NR) == 0, "shmem_fcollect");                                    \
    for (j = 0; j < npes; j++)                                                                                       \
      for (k = 0; k < NR; k++) CHECK(dst[j * NR + k] == VAL(T, j, k), "shmem_fcollect: PE %d [%d]", j, k);           \
    shmem_barrier_all();                                                                                             \
    /* alltoall: block j of PE i's src goes to block i of PE j's dst */                                              \
    CHECK(shmem_alltoall(SHMEM_TEAM_WORLD, dst, src, NR) == 0, "shmem_alltoall");                                    \
    for (j = 0; j < npes; j++)                                                                                       \
      for (k = 0; k < NR; k++) CHECK(dst[j * NR + k] == VAL(T, j, me * NR + k), "shmem_alltoall: PE %d [%d]", j, k); \
    shmem_barrier_all();                                                                                             \
    /* alltoalls, source stride 1, dest stride 2, 2 elements a PE */                                                 \
    CHECK(shmem_alltoalls(SHMEM_TEAM_WORLD, dst, src, 2, 1, 2) == 0, "shmem_alltoalls");                             \
    for (j = 0; j < npes; j++)                                                                                       \
      for (k = 0; k < 2; k++)                                                                                        \
        CHECK(dst[2 * (j * 2 + k)] == VAL(T, j, me * 2 + k), "shmem_alltoalls: PE %d [%d]", j, k);                   \
    shmem_barrier_all();                                                                                             \
  }
typedef unsigned char uchar;
#define COLL_TEST_TYPES(X) X(char) X(uchar) X(int) X(double) X(float) X(int64_t) X(uint16_t) X(size_t)
COLL_TEST_TYPES(COLL_TEST)

/* The reductions on T over the world: PE j gives j + 1 + k at index k. */
#define REDUCE_ARITH_TEST(T)                                                                 \
  static void reduce_##T(void) {                                                             \
    T *src = (T *)(void *)pool_a, *dst = (T *)(void *)pool_b;                                \
    T sum, prod, mn, mx;                                                                     \
    int k, j;                                                                                \
    section("reductions " #T);                                                               \
    for (k = 0; k < 4; k++) src[k] = (T)(me + 1 + k);                                        \
    shmem_barrier_all();                                                                     \
    CHECK(shmem_sum_reduce(SHMEM_TEAM_WORLD, dst, src, 4) == 0, "shmem_sum_reduce");         \
    for (k = 0; k < 4; k++) {                                                                \
      for (j = 0, sum = 0; j < npes; j++) sum += (T)(j + 1 + k);                             \
      CHECK(dst[k] == sum, "shmem_sum_reduce [%d]", k);                                      \
    }                                                                                        \
    CHECK(shmem_prod_reduce(SHMEM_TEAM_WORLD, dst, src, 4) == 0, "shmem_prod_reduce");       \
    for (k = 0; k < 4; k++) {                                                                \
      for (j = 0, prod = 1; j < npes; j++) prod *= (T)(j + 1 + k);                           \
      CHECK(dst[k] == prod, "shmem_prod_reduce [%d]", k);                                    \
    }                                                                                        \
    CHECK(shmem_min_reduce(SHMEM_TEAM_WORLD, dst, src, 4) == 0, "shmem_min_reduce");         \
    CHECK(shmem_max_reduce(SHMEM_TEAM_WORLD, &dst[4], src, 4) == 0, "shmem_max_reduce");     \
    for (k = 0; k < 4; k++) {                                                                \
      mn = (T)(1 + k), mx = (T)(npes + k);                                                   \
      CHECK(dst[k] == mn && dst[4 + k] == mx, "shmem_min_reduce, shmem_max_reduce [%d]", k); \
    }                                                                                        \
    shmem_barrier_all();                                                                     \
  }
/* and, or, xor: PE j gives the bit j % 8 and 0xF0. */
#define REDUCE_BITWISE_TEST(T)                                                           \
  static void reduce_bits_##T(void) {                                                    \
    T *src = (T *)(void *)pool_a, *dst = (T *)(void *)pool_b;                            \
    T want_or = 0, want_xor = 0;                                                         \
    int j;                                                                               \
    section("bitwise reductions " #T);                                                   \
    src[0] = (T)(0xF0 | (1 << (me % 4)));                                                \
    for (j = 0; j < npes; j++) want_or |= (T)(0xF0 | (1 << (j % 4)));                    \
    for (j = 0; j < npes; j++) want_xor ^= (T)(0xF0 | (1 << (j % 4)));                   \
    shmem_barrier_all();                                                                 \
    CHECK(shmem_and_reduce(SHMEM_TEAM_WORLD, &dst[0], src, 1) == 0, "shmem_and_reduce"); \
    CHECK(shmem_or_reduce(SHMEM_TEAM_WORLD, &dst[1], src, 1) == 0, "shmem_or_reduce");   \
    CHECK(shmem_xor_reduce(SHMEM_TEAM_WORLD, &dst[2], src, 1) == 0, "shmem_xor_reduce"); \
    CHECK(dst[0] == (T)0xF0, "shmem_and_reduce: %#llx", (unsigned long long)dst[0]);     \
    CHECK(dst[1] == want_or, "shmem_or_reduce: %#llx", (unsigned long long)dst[1]);      \
    CHECK(dst[2] == want_xor, "shmem_xor_reduce: %#llx", (unsigned long long)dst[2]);    \
    shmem_barrier_all();                                                                 \
  }
typedef signed char schar;
/* clang-format off */
#define REDUCE_ARITH_TEST_TYPES(X) \
  X(schar) X(short) X(int) X(long) X(ullong) X(float) X(double) X(ldouble) X(int8_t) X(uint32_t) X(size_t) \
  X(ptrdiff_t)
#define REDUCE_BITWISE_TEST_TYPES(X) X(uchar) X(uint) X(int8_t) X(int16_t) X(int32_t) X(uint64_t) X(size_t)
/* clang-format on */
REDUCE_ARITH_TEST_TYPES(REDUCE_ARITH_TEST)
REDUCE_BITWISE_TEST_TYPES(REDUCE_BITWISE_TEST)

/* Sums and products of complex numbers: PE j gives (j + 1) + i. */
static void reduce_complex(void) {
  double _Complex *sd = (double _Complex *)(void *)pool_a, *dd = (double _Complex *)(void *)pool_b;
  float _Complex *sf = (float _Complex *)(void *)&sd[2], *df = (float _Complex *)(void *)&dd[2];
  double _Complex sum = 0, prod = 1;
  int j;
  section("complex reductions");
  sd[0] = (double)(me + 1) + 1.0 * I;
  sf[0] = (float)(me + 1) + 1.0f * I;
  for (j = 0; j < npes; j++) sum += (double)(j + 1) + 1.0 * I, prod *= (double)(j + 1) + 1.0 * I;
  shmem_barrier_all();
  CHECK(shmem_sum_reduce(SHMEM_TEAM_WORLD, dd, sd, 1) == 0, "shmem_sum_reduce (double _Complex)");
  CHECK(shmem_prod_reduce(SHMEM_TEAM_WORLD, &dd[1], sd, 1) == 0, "shmem_prod_reduce (double _Complex)");
  CHECK(shmem_sum_reduce(SHMEM_TEAM_WORLD, df, sf, 1) == 0, "shmem_sum_reduce (float _Complex)");
  CHECK(shmem_prod_reduce(SHMEM_TEAM_WORLD, &df[1], sf, 1) == 0, "shmem_prod_reduce (float _Complex)");
  CHECK(dd[0] == sum && dd[1] == prod, "double _Complex: sum %g%+gi, product %g%+gi", creal(dd[0]), cimag(dd[0]),
        creal(dd[1]), cimag(dd[1]));
  CHECK(df[0] == (float _Complex)sum && df[1] == (float _Complex)prod, "float _Complex: sum %g%+gi, product %g%+gi",
        (double)crealf(df[0]), (double)cimagf(df[0]), (double)crealf(df[1]), (double)cimagf(df[1]));
  shmem_barrier_all();
}

/* ------------------------------------------------------------------- main */

#define CALL_RMA(T) rma_##T();
#define CALL_AMO(T, slot) amo_##T();
#define CALL_BITWISE(T, slot) bitwise_##T();
#define CALL_P2P(T, slot) p2p_##T();
#define CALL_COLL(T) coll_##T();
#define CALL_REDUCE(T) reduce_##T();
#define CALL_REDUCE_BITS(T) reduce_bits_##T();

int main(void) {
  shmem_init();
  checks_start();
  if (npes < 2) {
    fprintf(stderr, "generic: needs 2 PEs or more (hixlrun -n 2)\n");
    shmem_global_exit(2);
  }
  pool_a = (unsigned char *)shmem_malloc(1 << 16);
  pool_b = (unsigned char *)shmem_malloc(1 << 16);
  CHECK(pool_a != NULL && pool_b != NULL, "shmem_malloc");
  CHECK(shmem_ctx_create(0, &ctx) == 0, "shmem_ctx_create");

  RMA_TEST_TYPES(CALL_RMA)
  AMO_TEST_TYPES(CALL_AMO)
  amo_float();
  amo_double();
  BITWISE_TEST_TYPES(CALL_BITWISE)
  old_atomics();
  P2P_TEST_TYPES(CALL_P2P)
  COLL_TEST_TYPES(CALL_COLL)
  REDUCE_ARITH_TEST_TYPES(CALL_REDUCE)
  REDUCE_BITWISE_TEST_TYPES(CALL_REDUCE_BITS)
  reduce_complex();

  section("end");
  shmem_ctx_destroy(ctx);
  checks_report("shmem generic", NULL);
  shmem_free(pool_b);
  shmem_free(pool_a);
  shmem_finalize();
  return 0;
}

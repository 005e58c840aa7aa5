/* The OpenSHMEM conformance suite: atomics (standard, extended, bitwise, the
 * names before 1.4) and atomics under contention. */
#include "conformance.h"

/* clang-format off */
#define AMO_TYPES(X) \
  X(int, int) \
  X(long, long) \
  X(long long, longlong) \
  X(unsigned int, uint) \
  X(unsigned long, ulong) \
  X(unsigned long long, ulonglong) \
  X(int32_t, int32) \
  X(int64_t, int64) \
  X(uint32_t, uint32) \
  X(uint64_t, uint64) \
  X(size_t, size) \
  X(ptrdiff_t, ptrdiff)
#define EXT_AMO_TYPES(X) \
  AMO_TYPES(X) \
  X(float, float) \
  X(double, double)
#define BITWISE_AMO_TYPES(X) \
  X(unsigned int, uint) \
  X(unsigned long, ulong) \
  X(unsigned long long, ulonglong) \
  X(int32_t, int32) \
  X(int64_t, int64) \
  X(uint32_t, uint32) \
  X(uint64_t, uint64)
/* clang-format on */

/* ---------------------------------------------------------------- atomics */

#define AMO_TEST(T, N)                                                                          \
  static void amo_##N(void) {                                                                   \
    T *v = (T *)pool_a, r, f = 0;                                                               \
    section("atomics " #T);                                                                     \
    v[0] = v[1] = v[2] = 0;                                                                     \
    shmem_barrier_all();                                                                        \
    r = shmem_##N##_atomic_fetch(&v[0], right_pe);                                              \
    CHECK(r == 0, "fetch: %Lg", (long double)r);                                                \
    r = shmem_##N##_atomic_fetch_inc(&v[0], right_pe);                                          \
    CHECK(r == 0, "fetch_inc: %Lg", (long double)r);                                            \
    shmem_##N##_atomic_inc(&v[0], right_pe);                                                    \
    shmem_fence();                                                                              \
    r = shmem_##N##_atomic_fetch_add(&v[0], 10, right_pe);                                      \
    CHECK(r == 2, "inc; fence; fetch_add: %Lg", (long double)r);                                \
    shmem_##N##_atomic_add(&v[0], 5, right_pe);                                                 \
    shmem_quiet();                                                                              \
    r = shmem_##N##_atomic_compare_swap(&v[0], 17, 40, right_pe);                               \
    CHECK(r == 17, "add; quiet; compare_swap: %Lg", (long double)r);                            \
    r = shmem_##N##_atomic_compare_swap(&v[0], 17, 99, right_pe);                               \
    CHECK(r == 40, "compare_swap (no swap): %Lg", (long double)r);                              \
    shmem_##N##_atomic_fetch_inc_nbi(&f, &v[0], right_pe);                                      \
    shmem_quiet();                                                                              \
    CHECK(f == 40, "fetch_inc_nbi: %Lg", (long double)f);                                       \
    shmem_##N##_atomic_fetch_add_nbi(&f, &v[0], 9, right_pe);                                   \
    shmem_quiet();                                                                              \
    CHECK(f == 41, "fetch_add_nbi: %Lg", (long double)f);                                       \
    shmem_##N##_atomic_compare_swap_nbi(&f, &v[0], 50, 60, right_pe);                           \
    shmem_quiet();                                                                              \
    CHECK(f == 50, "compare_swap_nbi: %Lg", (long double)f);                                    \
    shmem_##N##_atomic_compare_swap_nbi(&f, &v[0], 1, 70, right_pe);                            \
    shmem_quiet();                                                                              \
    CHECK(f == 60, "compare_swap_nbi (no swap): %Lg", (long double)f);                          \
    r = shmem_ctx_##N##_atomic_fetch_add(SHMEM_CTX_DEFAULT, &v[0], 4, right_pe);                \
    CHECK(r == 60, "ctx fetch_add: %Lg", (long double)r);                                       \
    shmem_ctx_##N##_atomic_inc(SHMEM_CTX_DEFAULT, &v[0], right_pe);                             \
    shmem_ctx_##N##_atomic_add(SHMEM_CTX_DEFAULT, &v[0], 5, right_pe);                          \
    shmem_ctx_quiet(SHMEM_CTX_DEFAULT);                                                         \
    r = shmem_ctx_##N##_atomic_fetch_inc(SHMEM_CTX_DEFAULT, &v[0], right_pe);                   \
    CHECK(r == 70, "ctx inc, add, quiet, fetch_inc: %Lg", (long double)r);                      \
    r = shmem_ctx_##N##_atomic_compare_swap(SHMEM_CTX_DEFAULT, &v[0], 71, 3, right_pe);         \
    CHECK(r == 71, "ctx compare_swap: %Lg", (long double)r);                                    \
    shmem_ctx_##N##_atomic_fetch_inc_nbi(SHMEM_CTX_DEFAULT, &f, &v[0], right_pe);               \
    shmem_ctx_quiet(SHMEM_CTX_DEFAULT);                                                         \
    CHECK(f == 3, "ctx fetch_inc_nbi: %Lg", (long double)f);                                    \
    shmem_ctx_##N##_atomic_fetch_add_nbi(SHMEM_CTX_DEFAULT, &f, &v[0], 6, right_pe);            \
    shmem_ctx_quiet(SHMEM_CTX_DEFAULT);                                                         \
    CHECK(f == 4, "ctx fetch_add_nbi: %Lg", (long double)f);                                    \
    shmem_ctx_##N##_atomic_compare_swap_nbi(SHMEM_CTX_DEFAULT, &f, &v[0], 10, 12, right_pe);    \
    shmem_ctx_quiet(SHMEM_CTX_DEFAULT);                                                         \
    CHECK(f == 10, "ctx compare_swap_nbi: %Lg", (long double)f);                                \
    /* modular arithmetic: adding (T)-1 is subtracting 1, signed or not */                      \
    shmem_##N##_atomic_set(&v[1], 5, right_pe);                                                 \
    shmem_fence();                                                                              \
    r = shmem_##N##_atomic_fetch_add(&v[1], (T)-1, right_pe);                                   \
    CHECK(r == 5, "set; fence; fetch_add(-1): %Lg", (long double)r);                            \
    r = shmem_##N##_atomic_fetch(&v[1], right_pe);                                              \
    CHECK(r == 4, "after fetch_add(-1): %Lg", (long double)r);                                  \
    /* on my own PE */                                                                          \
    shmem_##N##_atomic_add(&v[2], 3, me);                                                       \
    shmem_quiet();                                                                              \
    r = shmem_##N##_atomic_fetch_inc(&v[2], me);                                                \
    CHECK(r == 3, "fetch_inc on my own PE: %Lg", (long double)r);                               \
    shmem_barrier_all();                                                                        \
    CHECK(v[0] == 12, "the left neighbour's atomics left %Lg, want 12", (long double)v[0]);     \
    CHECK(v[1] == 4, "the left neighbour's fetch_add(-1) left %Lg, want 4", (long double)v[1]); \
    CHECK(v[2] == 4, "atomics on my own PE left %Lg, want 4", (long double)v[2]);               \
  }
AMO_TYPES(AMO_TEST)

#define EXT_AMO_TEST(T, N)                                                            \
  static void ext_amo_##N(void) {                                                     \
    T *v = (T *)pool_a, r, f = 0;                                                     \
    section("atomic fetch/set/swap " #T);                                             \
    v[0] = 0;                                                                         \
    shmem_barrier_all();                                                              \
    shmem_##N##_atomic_set(&v[0], (T)2.5, right_pe);                                  \
    shmem_fence();                                                                    \
    r = shmem_##N##_atomic_fetch(&v[0], right_pe);                                    \
    CHECK(r == (T)2.5, "set; fence; fetch: %Lg", (long double)r);                     \
    r = shmem_##N##_atomic_swap(&v[0], (T)4.5, right_pe);                             \
    CHECK(r == (T)2.5, "swap: %Lg", (long double)r);                                  \
    shmem_##N##_atomic_swap_nbi(&f, &v[0], (T)8.5, right_pe);                         \
    shmem_quiet();                                                                    \
    CHECK(f == (T)4.5, "swap_nbi: %Lg", (long double)f);                              \
    shmem_##N##_atomic_fetch_nbi(&f, &v[0], right_pe);                                \
    shmem_quiet();                                                                    \
    CHECK(f == (T)8.5, "fetch_nbi: %Lg", (long double)f);                             \
    shmem_ctx_##N##_atomic_set(SHMEM_CTX_DEFAULT, &v[0], (T)16.5, right_pe);          \
    shmem_ctx_fence(SHMEM_CTX_DEFAULT);                                               \
    r = shmem_ctx_##N##_atomic_fetch(SHMEM_CTX_DEFAULT, &v[0], right_pe);             \
    CHECK(r == (T)16.5, "ctx set; fence; fetch: %Lg", (long double)r);                \
    r = shmem_ctx_##N##_atomic_swap(SHMEM_CTX_DEFAULT, &v[0], (T)32.5, right_pe);     \
    CHECK(r == (T)16.5, "ctx swap: %Lg", (long double)r);                             \
    shmem_ctx_##N##_atomic_swap_nbi(SHMEM_CTX_DEFAULT, &f, &v[0], (T)64.5, right_pe); \
    shmem_ctx_quiet(SHMEM_CTX_DEFAULT);                                               \
    CHECK(f == (T)32.5, "ctx swap_nbi: %Lg", (long double)f);                         \
    shmem_ctx_##N##_atomic_fetch_nbi(SHMEM_CTX_DEFAULT, &f, &v[0], right_pe);         \
    shmem_ctx_quiet(SHMEM_CTX_DEFAULT);                                               \
    CHECK(f == (T)64.5, "ctx fetch_nbi: %Lg", (long double)f);                        \
    shmem_barrier_all();                                                              \
    CHECK(v[0] == (T)64.5, "the left neighbour's swaps left %Lg", (long double)v[0]); \
  }
EXT_AMO_TYPES(EXT_AMO_TEST)

#define BITWISE_AMO_TEST(T, N)                                                                       \
  static void bitwise_amo_##N(void) {                                                                \
    T *v = (T *)pool_a, r, f = 0;                                                                    \
    section("bitwise atomics " #T);                                                                  \
    v[0] = 0;                                                                                        \
    shmem_barrier_all();                                                                             \
    shmem_##N##_atomic_set(&v[0], (T)0xF0F0, right_pe);                                              \
    shmem_fence();                                                                                   \
    r = shmem_##N##_atomic_fetch_and(&v[0], (T)0xFF00, right_pe);                                    \
    CHECK(r == (T)0xF0F0, "fetch_and: %Lg", (long double)r);                                         \
    shmem_##N##_atomic_and(&v[0], (T)0x3000, right_pe);                                              \
    shmem_fence();                                                                                   \
    r = shmem_##N##_atomic_fetch_or(&v[0], (T)0x000F, right_pe);                                     \
    CHECK(r == (T)0x3000, "and; fence; fetch_or: %Lg", (long double)r);                              \
    shmem_##N##_atomic_or(&v[0], (T)0x0F00, right_pe);                                               \
    shmem_quiet();                                                                                   \
    r = shmem_##N##_atomic_fetch_xor(&v[0], (T)0xFFFF, right_pe);                                    \
    CHECK(r == (T)0x3F0F, "or; quiet; fetch_xor: %Lg", (long double)r);                              \
    shmem_##N##_atomic_xor(&v[0], (T)0x00FF, right_pe);                                              \
    shmem_fence();                                                                                   \
    shmem_##N##_atomic_fetch_and_nbi(&f, &v[0], (T)0x0FFF, right_pe);                                \
    shmem_quiet();                                                                                   \
    CHECK(f == (T)0xC00F, "xor; fence; fetch_and_nbi: %Lg", (long double)f);                         \
    shmem_##N##_atomic_fetch_or_nbi(&f, &v[0], (T)0x1000, right_pe);                                 \
    shmem_quiet();                                                                                   \
    CHECK(f == (T)0x000F, "fetch_or_nbi: %Lg", (long double)f);                                      \
    shmem_##N##_atomic_fetch_xor_nbi(&f, &v[0], (T)0x100F, right_pe);                                \
    shmem_quiet();                                                                                   \
    CHECK(f == (T)0x100F, "fetch_xor_nbi: %Lg", (long double)f);                                     \
    r = shmem_ctx_##N##_atomic_fetch_or(SHMEM_CTX_DEFAULT, &v[0], (T)0x5, right_pe);                 \
    CHECK(r == 0, "ctx fetch_or: %Lg", (long double)r);                                              \
    shmem_ctx_##N##_atomic_or(SHMEM_CTX_DEFAULT, &v[0], (T)0x50, right_pe);                          \
    shmem_ctx_fence(SHMEM_CTX_DEFAULT);                                                              \
    r = shmem_ctx_##N##_atomic_fetch_and(SHMEM_CTX_DEFAULT, &v[0], (T)0x0F, right_pe);               \
    CHECK(r == (T)0x55, "ctx or; fence; fetch_and: %Lg", (long double)r);                            \
    shmem_ctx_##N##_atomic_and(SHMEM_CTX_DEFAULT, &v[0], (T)0x4, right_pe);                          \
    shmem_ctx_fence(SHMEM_CTX_DEFAULT);                                                              \
    r = shmem_ctx_##N##_atomic_fetch_xor(SHMEM_CTX_DEFAULT, &v[0], (T)0xC, right_pe);                \
    CHECK(r == (T)0x4, "ctx and; fence; fetch_xor: %Lg", (long double)r);                            \
    shmem_ctx_##N##_atomic_xor(SHMEM_CTX_DEFAULT, &v[0], (T)0x1, right_pe);                          \
    shmem_ctx_quiet(SHMEM_CTX_DEFAULT);                                                              \
    shmem_ctx_##N##_atomic_fetch_and_nbi(SHMEM_CTX_DEFAULT, &f, &v[0], (T)0x7, right_pe);            \
    shmem_ctx_quiet(SHMEM_CTX_DEFAULT);                                                              \
    CHECK(f == (T)0x9, "ctx xor; quiet; fetch_and_nbi: %Lg", (long double)f);                        \
    shmem_ctx_##N##_atomic_fetch_or_nbi(SHMEM_CTX_DEFAULT, &f, &v[0], (T)0x30, right_pe);            \
    shmem_ctx_quiet(SHMEM_CTX_DEFAULT);                                                              \
    CHECK(f == (T)0x1, "ctx fetch_or_nbi: %Lg", (long double)f);                                     \
    shmem_ctx_##N##_atomic_fetch_xor_nbi(SHMEM_CTX_DEFAULT, &f, &v[0], ~(T)0, right_pe);             \
    shmem_ctx_quiet(SHMEM_CTX_DEFAULT);                                                              \
    CHECK(f == (T)0x31, "ctx fetch_xor_nbi: %Lg", (long double)f);                                   \
    shmem_barrier_all();                                                                             \
    CHECK(v[0] == (T) ~(T)0x31, "the left neighbour's bitwise atomics left %Lg", (long double)v[0]); \
  }
BITWISE_AMO_TYPES(BITWISE_AMO_TEST)

/* The atomics' names before 1.4. */
#define OLD_AMO_TEST(T, N)                                                                  \
  static void old_amo_##N(void) {                                                           \
    T *v = (T *)pool_a, r;                                                                  \
    section("atomics before 1.4 " #T);                                                      \
    v[0] = 0;                                                                               \
    shmem_barrier_all();                                                                    \
    shmem_##N##_set(&v[0], 3, right_pe);                                                    \
    shmem_fence();                                                                          \
    r = shmem_##N##_fetch(&v[0], right_pe);                                                 \
    CHECK(r == 3, "shmem_" #N "_set/fetch: %Lg", (long double)r);                           \
    r = shmem_##N##_fadd(&v[0], 4, right_pe);                                               \
    CHECK(r == 3, "shmem_" #N "_fadd: %Lg", (long double)r);                                \
    r = shmem_##N##_finc(&v[0], right_pe);                                                  \
    CHECK(r == 7, "shmem_" #N "_finc: %Lg", (long double)r);                                \
    shmem_##N##_add(&v[0], 10, right_pe);                                                   \
    shmem_##N##_inc(&v[0], right_pe);                                                       \
    shmem_quiet();                                                                          \
    r = shmem_##N##_cswap(&v[0], 19, 30, right_pe);                                         \
    CHECK(r == 19, "shmem_" #N "_add, inc, cswap: %Lg", (long double)r);                    \
    r = shmem_##N##_cswap(&v[0], 19, 31, right_pe);                                         \
    CHECK(r == 30, "shmem_" #N "_cswap (no swap): %Lg", (long double)r);                    \
    r = shmem_##N##_swap(&v[0], 40, right_pe);                                              \
    CHECK(r == 30, "shmem_" #N "_swap: %Lg", (long double)r);                               \
    shmem_barrier_all();                                                                    \
    CHECK(v[0] == 40, "the left neighbour's old-name atomics left %Lg", (long double)v[0]); \
  }
OLD_AMO_TEST(int, int)
OLD_AMO_TEST(long, long)
OLD_AMO_TEST(long long, longlong)

#define OLD_EXT_AMO_TEST(T, N)                                                 \
  static void old_ext_amo_##N(void) {                                          \
    T *v = (T *)pool_a, r;                                                     \
    section("fetch/set/swap before 1.4 " #T);                                  \
    v[0] = 0;                                                                  \
    shmem_barrier_all();                                                       \
    shmem_##N##_set(&v[0], (T)1.25, right_pe);                                 \
    shmem_fence();                                                             \
    r = shmem_##N##_fetch(&v[0], right_pe);                                    \
    CHECK(r == (T)1.25, "shmem_" #N "_set/fetch: %g", (double)r);              \
    r = shmem_##N##_swap(&v[0], (T)-7.5, right_pe);                            \
    CHECK(r == (T)1.25, "shmem_" #N "_swap: %g", (double)r);                   \
    shmem_barrier_all();                                                       \
    CHECK(v[0] == (T)-7.5, "the left neighbour's swap left %g", (double)v[0]); \
  }
OLD_EXT_AMO_TEST(float, float)
OLD_EXT_AMO_TEST(double, double)

static void test_old_swap(void) {
  long *v = (long *)pool_a, r;
  section("shmem_swap (long)");
  v[0] = 0;
  shmem_barrier_all();
  r = (shmem_swap)(&v[0], 100 + me, right_pe); /* the function, not the generic name */
  CHECK(r == 0, "shmem_swap: %ld", r);
  shmem_barrier_all();
  CHECK(v[0] == 100 + left_pe, "shmem_swap left %ld", v[0]);
}

/* Every PE hammers PE 0: totals exact. */
static void test_contention(void) {
  enum { ITERS = 400, CAS_ITERS = 100 };
  long *cnt = (long *)pool_a, *fetch_sum = (long *)pool_b, *all_sum = (long *)pool_b + 1, prev = -1, r;
  int *icnt = (int *)(pool_a + 64);
  uint64_t *ucnt = (uint64_t *)(pool_a + 128), *bits = (uint64_t *)(pool_a + 192);
  long long *cas = (long long *)(pool_a + 256);
  int i;

  section("atomic contention on PE 0");
  memset(pool_a, 0, 512);
  *fetch_sum = 0;
  shmem_barrier_all();
  for (i = 0; i < ITERS; i++) {
    r = shmem_long_atomic_fetch_add(cnt, 1, 0);
    CHECK(r > prev && r < (long)npes * ITERS, "fetch_add under contention returned %ld after %ld", r, prev);
    prev = r;
    *fetch_sum += r;
    shmem_int_atomic_inc(icnt, 0);
    shmem_uint64_atomic_add(ucnt, (uint64_t)me + 1, 0);
  }
  for (i = 0; i < CAS_ITERS; i++) {
    long long old = shmem_longlong_atomic_fetch(cas, 0), seen;
    while ((seen = shmem_longlong_atomic_compare_swap(cas, old, old + 1, 0)) != old) old = seen;
  }
  shmem_uint64_atomic_or(bits, (uint64_t)1 << (me % 64), 0);
  shmem_barrier_all();
  if (me == 0) {
    long want = (long)npes * ITERS;
    uint64_t want_bits = 0;
    for (i = 0; i < npes; i++) want_bits |= (uint64_t)1 << (i % 64);
    CHECK(*cnt == want, "fetch_add total %ld, want %ld", *cnt, want);
    CHECK(*icnt == (int)want, "int inc total %d, want %ld", *icnt, want);
    CHECK(*ucnt == (uint64_t)ITERS * (uint64_t)npes * (uint64_t)(npes + 1) / 2, "uint64 add total %llu",
          (unsigned long long)*ucnt);
    CHECK(*cas == (long long)npes * CAS_ITERS, "compare_swap loop total %lld, want %d", *cas, npes * CAS_ITERS);
    CHECK(*bits == want_bits, "or total %llx", (unsigned long long)*bits);
  }
  /* every value fetched exactly once: their sum is 0 + 1 + ... + (n*ITERS - 1) */
  CHECK(shmem_long_sum_reduce(SHMEM_TEAM_WORLD, all_sum, fetch_sum, 1) == 0, "sum_reduce");
  {
    long total = (long)npes * ITERS;
    CHECK(*all_sum == total * (total - 1) / 2, "the fetched values sum to %ld, want %ld", *all_sum,
          total * (total - 1) / 2);
  }
}

/* The atomics sections, in order. */
void test_atomics(void) {
#define CALL_AMO(T, N) amo_##N();
  AMO_TYPES(CALL_AMO)
#define CALL_EXT_AMO(T, N) ext_amo_##N();
  EXT_AMO_TYPES(CALL_EXT_AMO)
#define CALL_BITWISE_AMO(T, N) bitwise_amo_##N();
  BITWISE_AMO_TYPES(CALL_BITWISE_AMO)
  old_amo_int();
  old_amo_long();
  old_amo_longlong();
  old_ext_amo_float();
  old_ext_amo_double();
  test_old_swap();
  test_contention();
}

/* The OpenSHMEM conformance suite: the legacy active-set collectives (pSync
 * barriers, broadcast, collect, alltoall(s), the _to_all reductions), and
 * collectives on global and static variables. */
#include "conformance.h"

/* The legacy collectives' pSync arrays. */
static long psync_barrier[SHMEM_BARRIER_SYNC_SIZE];
static long psync_bcast[SHMEM_BCAST_SYNC_SIZE];
static long psync_collect[SHMEM_COLLECT_SYNC_SIZE];
static long psync_reduce[SHMEM_REDUCE_SYNC_SIZE];
static long psync_a2a[SHMEM_ALLTOALL_SYNC_SIZE];
static long psync_a2as[SHMEM_ALLTOALLS_SYNC_SIZE];

/* clang-format off */
#define TOALL_BITWISE_TYPES(X) \
  X(short, short) \
  X(int, int) \
  X(long, long) \
  X(long long, longlong)
#define TOALL_ARITH_TYPES(X) \
  TOALL_BITWISE_TYPES(X) \
  X(float, float) \
  X(double, double) \
  X(long double, longdouble)
/* clang-format on */

void psync_init(void) {
  int i;
  for (i = 0; i < SHMEM_BARRIER_SYNC_SIZE; i++) psync_barrier[i] = SHMEM_SYNC_VALUE;
  for (i = 0; i < SHMEM_BCAST_SYNC_SIZE; i++) psync_bcast[i] = SHMEM_SYNC_VALUE;
  for (i = 0; i < SHMEM_COLLECT_SYNC_SIZE; i++) psync_collect[i] = SHMEM_SYNC_VALUE;
  for (i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) psync_reduce[i] = SHMEM_SYNC_VALUE;
  for (i = 0; i < SHMEM_ALLTOALL_SYNC_SIZE; i++) psync_a2a[i] = SHMEM_SYNC_VALUE;
  for (i = 0; i < SHMEM_ALLTOALLS_SYNC_SIZE; i++) psync_a2as[i] = SHMEM_SYNC_VALUE;
}

/* ------------------------------------------- the legacy active-set collectives */

/* An active set (aset_t): PE_start, logPE_stride, PE_size; my index in it, or -1.
 * Every PE runs each step (members set up, then shmem_barrier_all, then the
 * members call), so that a peer never writes into a dest that is being set up
 * and pSync is never reused before every PE is done with it. */
aset_t aset_make(int start, int log, int size) {
  aset_t a;
  int s = 1 << log;
  a.start = start;
  a.log = log;
  a.size = size;
  a.idx = (me >= start && (me - start) % s == 0 && (me - start) / s < size) ? (me - start) / s : -1;
  return a;
}
static int aset_pe(aset_t a, int i) { return a.start + (i << a.log); }

static void legacy_barrier(aset_t a) {
  long *box = (long *)pool_b + 8;
  box[0] = 0;
  shmem_barrier_all();
  if (a.idx >= 0) {
    shmem_long_p(box, 300 + me, aset_pe(a, (a.idx + 1) % a.size));
    shmem_barrier(a.start, a.log, a.size, psync_barrier); /* completes the put */
    CHECK(box[0] == 300 + aset_pe(a, (a.idx - 1 + a.size) % a.size), "shmem_barrier: the put before it: %ld", box[0]);
    shmem_barrier(a.start, a.log, a.size, psync_barrier);
    shmem_long_p(box, 400 + me, aset_pe(a, (a.idx + 1) % a.size));
    shmem_quiet();
    shmem_sync(a.start, a.log, a.size, psync_barrier);
    CHECK(box[0] == 400 + aset_pe(a, (a.idx - 1 + a.size) % a.size), "quiet + shmem_sync: %ld", box[0]);
  }
  shmem_barrier_all();
}

#define LEGACY_COLL_TEST(BITS, CT)                                                                                   \
  static void legacy_coll_##BITS(aset_t a) {                                                                         \
    CT *src = (CT *)pool_a, *dst = (CT *)pool_b;                                                                     \
    int root, i, j, k, off;                                                                                          \
    /* every PE makes the same barrier_all calls, whatever the size of its set */                                    \
    for (root = 0; root < npes; root++) {                                                                            \
      if (a.idx >= 0 && root < a.size) {                                                                             \
        for (k = 0; k < 6; k++) {                                                                                    \
          src[k] = (CT)(a.idx * 1000 + k);                                                                           \
          dst[k] = (CT)7777;                                                                                         \
        }                                                                                                            \
      }                                                                                                              \
      shmem_barrier_all();                                                                                           \
      if (a.idx < 0 || root >= a.size) continue;                                                                     \
      shmem_broadcast##BITS(dst, src, 5, root, a.start, a.log, a.size, psync_bcast);                                 \
      for (k = 0; k < 5; k++) {                                                                                      \
        CT want = a.idx == root ? (CT)7777 : (CT)(root * 1000 + k);                                                  \
        CHECK(dst[k] == want, "shmem_broadcast" #BITS "(root %d of set %d,%d,%d): [%d] = %llu, want %llu", root,     \
              a.start, a.log, a.size, k, (unsigned long long)dst[k], (unsigned long long)want);                      \
      }                                                                                                              \
      CHECK(dst[5] == (CT)7777, "shmem_broadcast" #BITS " wrote past nelems");                                       \
    }                                                                                                                \
    if (a.idx >= 0) {                                                                                                \
      for (k = 0; k < 4; k++) src[k] = (CT)(a.idx * 100 + k);                                                        \
      for (k = 0; k < 8 * a.size; k++) dst[k] = (CT)7777;                                                            \
    }                                                                                                                \
    shmem_barrier_all();                                                                                             \
    if (a.idx >= 0) {                                                                                                \
      shmem_collect##BITS(dst, src, (size_t)(a.idx % 3 + 1), a.start, a.log, a.size, psync_collect);                 \
      for (i = 0, off = 0; i < a.size; i++)                                                                          \
        for (k = 0; k < i % 3 + 1; k++, off++)                                                                       \
          CHECK(dst[off] == (CT)(i * 100 + k), "shmem_collect" #BITS ": [%d] = %llu", off,                           \
                (unsigned long long)dst[off]);                                                                       \
      CHECK(dst[off] == (CT)7777, "shmem_collect" #BITS " wrote past its end");                                      \
      for (k = 0; k < 8 * a.size; k++) dst[k] = (CT)7777;                                                            \
    }                                                                                                                \
    shmem_barrier_all();                                                                                             \
    if (a.idx >= 0) {                                                                                                \
      shmem_fcollect##BITS(dst, src, 3, a.start, a.log, a.size, psync_collect);                                      \
      for (i = 0; i < a.size; i++)                                                                                   \
        for (k = 0; k < 3; k++)                                                                                      \
          CHECK(dst[3 * i + k] == (CT)(i * 100 + k), "shmem_fcollect" #BITS ": [%d]", 3 * i + k);                    \
      CHECK(dst[3 * a.size] == (CT)7777, "shmem_fcollect" #BITS " wrote past its end");                              \
      for (j = 0; j < a.size; j++)                                                                                   \
        for (k = 0; k < 2; k++) src[2 * j + k] = (CT)(a.idx * 100 + j * 10 + k);                                     \
      for (k = 0; k < 8 * a.size; k++) dst[k] = (CT)7777;                                                            \
    }                                                                                                                \
    shmem_barrier_all();                                                                                             \
    if (a.idx >= 0) {                                                                                                \
      shmem_alltoall##BITS(dst, src, 2, a.start, a.log, a.size, psync_a2a);                                          \
      for (i = 0; i < a.size; i++)                                                                                   \
        for (k = 0; k < 2; k++)                                                                                      \
          CHECK(dst[2 * i + k] == (CT)(i * 100 + a.idx * 10 + k), "shmem_alltoall" #BITS ": [%d] = %llu", 2 * i + k, \
                (unsigned long long)dst[2 * i + k]);                                                                 \
      CHECK(dst[2 * a.size] == (CT)7777, "shmem_alltoall" #BITS " wrote past its end");                              \
      /* alltoalls: dst stride 3, sst 2, 2 elements a block */                                                       \
      for (k = 0; k < 8 * a.size; k++) src[k] = (CT)5555;                                                            \
      for (j = 0; j < a.size; j++)                                                                                   \
        for (k = 0; k < 2; k++) src[j * 2 * 2 + k * 2] = (CT)(a.idx * 100 + j * 10 + k);                             \
      for (k = 0; k < 8 * a.size; k++) dst[k] = (CT)7777;                                                            \
    }                                                                                                                \
    shmem_barrier_all();                                                                                             \
    if (a.idx >= 0) {                                                                                                \
      shmem_alltoalls##BITS(dst, src, 3, 2, 2, a.start, a.log, a.size, psync_a2as);                                  \
      for (i = 0; i < a.size; i++)                                                                                   \
        for (k = 0; k < 6; k++)                                                                                      \
          CHECK(dst[6 * i + k] == (k % 3 == 0 ? (CT)(i * 100 + a.idx * 10 + k / 3) : (CT)7777),                      \
                "shmem_alltoalls" #BITS ": [%d] = %llu", 6 * i + k, (unsigned long long)dst[6 * i + k]);             \
    }                                                                                                                \
    shmem_barrier_all();                                                                                             \
  }
LEGACY_COLL_TEST(32, uint32_t)
LEGACY_COLL_TEST(64, uint64_t)

#define TOALL_TEST(T, N, OP, INIT, COMBINE)                                                                        \
  static void toall_##N##_##OP(aset_t a) {                                                                         \
    T *src = (T *)pool_a, *dst = (T *)pool_b, *wrk = (T *)pool_w;                                                  \
    int i, k, pass;                                                                                                \
    for (pass = 0; pass < 2; pass++) {                                                                             \
      T *from = pass == 0 ? src : dst;                                                                             \
      if (a.idx >= 0) {                                                                                            \
        for (k = 0; k < NRED; k++) {                                                                               \
          from[k] = INIT(T, a.idx, k);                                                                             \
          if (pass == 0) dst[k] = SENT(T);                                                                         \
        }                                                                                                          \
        dst[NRED] = SENT(T);                                                                                       \
      }                                                                                                            \
      shmem_barrier_all();                                                                                         \
      if (a.idx < 0) continue;                                                                                     \
      shmem_##N##_##OP##_to_all(dst, from, NRED, a.start, a.log, a.size, wrk, psync_reduce);                       \
      for (k = 0; k < NRED; k++) {                                                                                 \
        T want = INIT(T, 0, k);                                                                                    \
        for (i = 1; i < a.size; i++) want = (T)COMBINE(want, INIT(T, i, k));                                       \
        CHECK(dst[k] == want, "shmem_" #N "_" #OP "_to_all(set %d,%d,%d)%s: [%d] = %Lg, want %Lg", a.start, a.log, \
              a.size, pass ? " in place" : "", k, (long double)dst[k], (long double)want);                         \
      }                                                                                                            \
      CHECK(dst[NRED] == SENT(T), "shmem_" #N "_" #OP "_to_all wrote past nreduce");                               \
    }                                                                                                              \
    shmem_barrier_all();                                                                                           \
  }
#define TOALL_BITWISE(T, N)               \
  TOALL_TEST(T, N, and, BIT_INIT, OP_AND) \
  TOALL_TEST(T, N, or, BIT_INIT, OP_OR)   \
  TOALL_TEST(T, N, xor, BIT_INIT, OP_XOR)
#define TOALL_ARITH(T, N)                  \
  TOALL_TEST(T, N, min, MM_S_INIT, OP_MIN) \
  TOALL_TEST(T, N, max, MM_S_INIT, OP_MAX) \
  TOALL_TEST(T, N, sum, SUM_INIT, OP_SUM)  \
  TOALL_TEST(T, N, prod, PROD_S_INIT, OP_PROD)
TOALL_BITWISE_TYPES(TOALL_BITWISE)
TOALL_ARITH_TYPES(TOALL_ARITH)

/* Complex sums and products (the parts set through the array view C11 gives complex types). */
static double _Complex cd(double re, double im) {
  double _Complex z;
  ((double *)&z)[0] = re;
  ((double *)&z)[1] = im;
  return z;
}
static float _Complex cf(float re, float im) {
  float _Complex z;
  ((float *)&z)[0] = re;
  ((float *)&z)[1] = im;
  return z;
}
#define CRE(z) (((const double *)&(z))[0])
#define CIM(z) (((const double *)&(z))[1])
#define FRE(z) (((const float *)&(z))[0])
#define FIM(z) (((const float *)&(z))[1])

static void toall_complex(aset_t a) {
  double _Complex *dsrc = (double _Complex *)pool_a, *ddst = (double _Complex *)pool_b;
  double _Complex *dwrk = (double _Complex *)pool_w;
  float _Complex *fsrc = (float _Complex *)pool_a, *fdst = (float _Complex *)pool_b;
  float _Complex *fwrk = (float _Complex *)pool_w;
  int i, k;

  if (a.idx >= 0)
    for (k = 0; k < NRED; k++) dsrc[k] = cd(a.idx + k + 0.5, (double)(a.idx - k));
  shmem_barrier_all();
  if (a.idx >= 0) {
    shmem_complexd_sum_to_all(ddst, dsrc, NRED, a.start, a.log, a.size, dwrk, psync_reduce);
    for (k = 0; k < NRED; k++) {
      double re = 0, im = 0;
      for (i = 0; i < a.size; i++) {
        re += i + k + 0.5;
        im += i - k;
      }
      CHECK(CRE(ddst[k]) == re && CIM(ddst[k]) == im, "shmem_complexd_sum_to_all: [%d] = %g%+gi, want %g%+gi", k,
            CRE(ddst[k]), CIM(ddst[k]), re, im);
    }
    /* factors 1 and i: the product is i^(how many i) */
    for (k = 0; k < NRED; k++) dsrc[k] = (a.idx + k) % 2 ? cd(0, 1) : cd(1, 0);
  }
  shmem_barrier_all();
  if (a.idx >= 0) {
    shmem_complexd_prod_to_all(ddst, dsrc, NRED, a.start, a.log, a.size, dwrk, psync_reduce);
    for (k = 0; k < NRED; k++) {
      int m = 0;
      double re, im;
      for (i = 0; i < a.size; i++) m += (i + k) % 2;
      re = m % 4 == 0 ? 1 : m % 4 == 2 ? -1 : 0;
      im = m % 4 == 1 ? 1 : m % 4 == 3 ? -1 : 0;
      CHECK(CRE(ddst[k]) == re && CIM(ddst[k]) == im, "shmem_complexd_prod_to_all: [%d] = %g%+gi, want %g%+gi", k,
            CRE(ddst[k]), CIM(ddst[k]), re, im);
    }
    for (k = 0; k < NRED; k++) fsrc[k] = cf((float)(a.idx + k) + 0.25f, (float)k);
  }
  shmem_barrier_all();
  if (a.idx >= 0) {
    shmem_complexf_sum_to_all(fdst, fsrc, NRED, a.start, a.log, a.size, fwrk, psync_reduce);
    for (k = 0; k < NRED; k++) {
      float re = 0, im = 0;
      for (i = 0; i < a.size; i++) {
        re += (float)(i + k) + 0.25f;
        im += (float)k;
      }
      CHECK(FRE(fdst[k]) == re && FIM(fdst[k]) == im, "shmem_complexf_sum_to_all: [%d] = %g%+gi, want %g%+gi", k,
            (double)FRE(fdst[k]), (double)FIM(fdst[k]), (double)re, (double)im);
    }
    for (k = 0; k < NRED; k++) fsrc[k] = cf(2.0f, 0.0f);
  }
  shmem_barrier_all();
  if (a.idx >= 0) {
    shmem_complexf_prod_to_all(fdst, fsrc, NRED, a.start, a.log, a.size, fwrk, psync_reduce);
    for (k = 0; k < NRED; k++)
      CHECK(FRE(fdst[k]) == (float)(1 << a.size) && FIM(fdst[k]) == 0.0f,
            "shmem_complexf_prod_to_all: [%d] = %g%+gi, want %d", k, (double)FRE(fdst[k]), (double)FIM(fdst[k]),
            1 << a.size);
  }
  shmem_barrier_all();
}

void legacy_on(aset_t a, const char *name) {
  static char title[160];
  snprintf(title, sizeof title, "legacy active-set collectives: %s (my set %d,%d,%d)", name, a.start, a.log, a.size);
  section(title);
  legacy_barrier(a);
  legacy_coll_32(a);
  legacy_coll_64(a);
#define CALL_TOALL_BITWISE(T, N) \
  toall_##N##_and(a);            \
  toall_##N##_or(a);             \
  toall_##N##_xor(a);
#define CALL_TOALL_ARITH(T, N) \
  toall_##N##_min(a);          \
  toall_##N##_max(a);          \
  toall_##N##_sum(a);          \
  toall_##N##_prod(a);
  TOALL_BITWISE_TYPES(CALL_TOALL_BITWISE)
  TOALL_ARITH_TYPES(CALL_TOALL_ARITH)
  toall_complex(a);
}

/* ----------------------------------------- collectives on global and static data */

/* Collectives whose source and dest are global/static variables (not the heap). */
static int coll_gsrc[64], coll_gdst[64];
static long coll_lsrc[8], coll_ldst[8];

void test_static_collectives(void) {
  int root, i, k, off, total = 0;
  aset_t all = aset_make(0, 0, npes);

  section("collectives on global and static variables");
  for (root = 0; root < npes; root++) {
    for (k = 0; k < 16; k++) {
      coll_gsrc[k] = me * 100 + k;
      coll_gdst[k] = -1;
    }
    TSYNC(SHMEM_TEAM_WORLD);
    CHECK(shmem_int_broadcast(SHMEM_TEAM_WORLD, coll_gdst, coll_gsrc, 16, root) == 0, "int_broadcast");
    for (k = 0; k < 16; k++)
      CHECK(coll_gdst[k] == root * 100 + k, "int_broadcast(root %d) into a static: [%d] = %d", root, k, coll_gdst[k]);
  }
  for (i = 0; i < npes; i++) total += i % 3 + 1;
  for (k = 0; k < total + 2; k++) coll_gdst[k] = -1;
  TSYNC(SHMEM_TEAM_WORLD);
  CHECK(shmem_int_collect(SHMEM_TEAM_WORLD, coll_gdst, coll_gsrc, (size_t)(me % 3 + 1)) == 0, "int_collect");
  for (i = 0, off = 0; i < npes; i++)
    for (k = 0; k < i % 3 + 1; k++, off++)
      CHECK(coll_gdst[off] == i * 100 + k, "int_collect into a static: [%d] = %d", off, coll_gdst[off]);
  for (k = 0; k < 2 * npes + 1; k++) coll_gdst[k] = -1;
  TSYNC(SHMEM_TEAM_WORLD);
  CHECK(shmem_int_fcollect(SHMEM_TEAM_WORLD, coll_gdst, coll_gsrc, 2) == 0, "int_fcollect");
  for (i = 0; i < npes; i++)
    for (k = 0; k < 2; k++)
      CHECK(coll_gdst[2 * i + k] == i * 100 + k, "int_fcollect into a static: [%d] = %d", 2 * i + k,
            coll_gdst[2 * i + k]);
  for (k = 0; k < npes; k++) coll_gsrc[k] = me * 100 + k;
  for (k = 0; k < npes + 1; k++) coll_gdst[k] = -1;
  TSYNC(SHMEM_TEAM_WORLD);
  CHECK(shmem_int_alltoall(SHMEM_TEAM_WORLD, coll_gdst, coll_gsrc, 1) == 0, "int_alltoall");
  for (i = 0; i < npes; i++)
    CHECK(coll_gdst[i] == i * 100 + me, "int_alltoall into a static: [%d] = %d", i, coll_gdst[i]);
  for (k = 0; k < 8; k++) {
    coll_lsrc[k] = me + k;
    coll_ldst[k] = -1;
  }
  TSYNC(SHMEM_TEAM_WORLD);
  CHECK(shmem_long_sum_reduce(SHMEM_TEAM_WORLD, coll_ldst, coll_lsrc, 8) == 0, "long_sum_reduce");
  for (k = 0; k < 8; k++)
    CHECK(coll_ldst[k] == (long)npes * (npes - 1) / 2 + (long)npes * k, "long_sum_reduce into a static: [%d] = %ld", k,
          coll_ldst[k]);
  /* the legacy forms */
  for (k = 0; k < 8; k++) coll_ldst[k] = -1;
  shmem_barrier_all();
  shmem_long_max_to_all(coll_ldst, coll_lsrc, 8, all.start, all.log, all.size, (long *)pool_w, psync_reduce);
  for (k = 0; k < 8; k++)
    CHECK(coll_ldst[k] == npes - 1 + k, "long_max_to_all into a static: [%d] = %ld", k, coll_ldst[k]);
  for (k = 0; k < 8; k++) coll_ldst[k] = -1;
  shmem_barrier_all();
  shmem_broadcast64(coll_ldst, coll_lsrc, 8, npes - 1, all.start, all.log, all.size, psync_bcast);
  for (k = 0; k < 8; k++)
    CHECK(coll_ldst[k] == (me == npes - 1 ? -1 : npes - 1 + k), "broadcast64 into a static: [%d] = %ld", k,
          coll_ldst[k]);
  shmem_barrier_all();
}

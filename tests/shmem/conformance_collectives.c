/* The OpenSHMEM conformance suite: the collectives on teams (broadcast,
 * collect, fcollect, alltoall(s), their mem forms, every reduction), and large
 * collectives on the world team. */
#include "conformance.h"

/* clang-format off */
#define REDUCE_BITWISE_TYPES(X) \
  X(unsigned char, uchar) \
  X(unsigned short, ushort) \
  X(unsigned int, uint) \
  X(unsigned long, ulong) \
  X(unsigned long long, ulonglong) \
  X(int8_t, int8) \
  X(int16_t, int16) \
  X(int32_t, int32) \
  X(int64_t, int64) \
  X(uint8_t, uint8) \
  X(uint16_t, uint16) \
  X(uint32_t, uint32) \
  X(uint64_t, uint64) \
  X(size_t, size)
/* min/max and sum/prod: the unsigned and the signed ones apart (signed ones see negative values) */
#define REDUCE_UNSIGNED_TYPES(X) \
  X(char, char) \
  X(unsigned char, uchar) \
  X(unsigned short, ushort) \
  X(unsigned int, uint) \
  X(unsigned long, ulong) \
  X(unsigned long long, ulonglong) \
  X(uint8_t, uint8) \
  X(uint16_t, uint16) \
  X(uint32_t, uint32) \
  X(uint64_t, uint64) \
  X(size_t, size)
#define REDUCE_SIGNED_TYPES(X) \
  X(signed char, schar) \
  X(short, short) \
  X(int, int) \
  X(long, long) \
  X(long long, longlong) \
  X(ptrdiff_t, ptrdiff) \
  X(int8_t, int8) \
  X(int16_t, int16) \
  X(int32_t, int32) \
  X(int64_t, int64) \
  X(float, float) \
  X(double, double) \
  X(long double, longdouble)
/* clang-format on */

/* ------------------------------------------------------ collectives on teams */

#define COLL_TEST(T, N)                                                                                                \
  static void coll_##N(shmem_team_t team) {                                                                            \
    T *src = (T *)pool_a, *dst = (T *)pool_b;                                                                          \
    int tme = shmem_team_my_pe(team), tn = shmem_team_n_pes(team), root, i, j, k, off, rc;                             \
    /* broadcast from every root; the root's own dest is written too (1.5) */                                          \
    for (root = 0; root < tn; root++) {                                                                                \
      for (k = 0; k < NR; k++) {                                                                                       \
        src[k] = VAL(T, tme, k);                                                                                       \
        dst[k] = SENT(T);                                                                                              \
      }                                                                                                                \
      dst[NR] = SENT(T);                                                                                               \
      TSYNC(team);                                                                                                     \
      rc = shmem_##N##_broadcast(team, dst, src, NR, root);                                                            \
      CHECK(rc == 0, "shmem_" #N "_broadcast = %d", rc);                                                               \
      for (k = 0; k < NR; k++)                                                                                         \
        CHECK(dst[k] == VAL(T, root, k), "shmem_" #N "_broadcast(root %d): [%d] = %Lg", root, k, (long double)dst[k]); \
      CHECK(dst[NR] == SENT(T), "shmem_" #N "_broadcast wrote past nelems");                                           \
    }                                                                                                                  \
    /* collect: team PE i gives i % 3 + 1 elements, then i % 3 (PE 0 gives none) */                                    \
    for (j = 0; j < 2; j++) {                                                                                          \
      int mine = tme % 3 + (j == 0 ? 1 : 0), total = 0;                                                                \
      for (i = 0; i < tn; i++) total += i % 3 + (j == 0 ? 1 : 0);                                                      \
      for (k = 0; k < 4; k++) src[k] = VAL(T, tme, k);                                                                 \
      for (k = 0; k < total + 2; k++) dst[k] = SENT(T);                                                                \
      TSYNC(team);                                                                                                     \
      rc = shmem_##N##_collect(team, dst, src, (size_t)mine);                                                          \
      CHECK(rc == 0, "shmem_" #N "_collect = %d", rc);                                                                 \
      for (i = 0, off = 0; i < tn; i++) {                                                                              \
        int cnt = i % 3 + (j == 0 ? 1 : 0);                                                                            \
        for (k = 0; k < cnt; k++, off++)                                                                               \
          CHECK(dst[off] == VAL(T, i, k), "shmem_" #N "_collect: [%d] (PE %d's %d) = %Lg", off, i, k,                  \
                (long double)dst[off]);                                                                                \
      }                                                                                                                \
      CHECK(dst[total] == SENT(T), "shmem_" #N "_collect wrote past its %d elements", total);                          \
    }                                                                                                                  \
    /* fcollect */                                                                                                     \
    for (k = 0; k < 3; k++) src[k] = VAL(T, tme, k + 5);                                                               \
    for (k = 0; k < 3 * tn + 1; k++) dst[k] = SENT(T);                                                                 \
    TSYNC(team);                                                                                                       \
    rc = shmem_##N##_fcollect(team, dst, src, 3);                                                                      \
    CHECK(rc == 0, "shmem_" #N "_fcollect = %d", rc);                                                                  \
    for (i = 0; i < tn; i++)                                                                                           \
      for (k = 0; k < 3; k++) CHECK(dst[3 * i + k] == VAL(T, i, k + 5), "shmem_" #N "_fcollect: [%d]", 3 * i + k);     \
    CHECK(dst[3 * tn] == SENT(T), "shmem_" #N "_fcollect wrote past its end");                                         \
    /* alltoall: block j of my source goes to team PE j */                                                             \
    for (j = 0; j < tn; j++)                                                                                           \
      for (k = 0; k < 3; k++) src[3 * j + k] = VAL(T, tme * 8 + j, k);                                                 \
    for (k = 0; k < 3 * tn + 1; k++) dst[k] = SENT(T);                                                                 \
    TSYNC(team);                                                                                                       \
    rc = shmem_##N##_alltoall(team, dst, src, 3);                                                                      \
    CHECK(rc == 0, "shmem_" #N "_alltoall = %d", rc);                                                                  \
    for (i = 0; i < tn; i++)                                                                                           \
      for (k = 0; k < 3; k++)                                                                                          \
        CHECK(dst[3 * i + k] == VAL(T, i * 8 + tme, k), "shmem_" #N "_alltoall: [%d] = %Lg", 3 * i + k,                \
              (long double)dst[3 * i + k]);                                                                            \
    CHECK(dst[3 * tn] == SENT(T), "shmem_" #N "_alltoall wrote past its end");                                         \
    /* alltoalls, dst stride 2, sst 3, 2 elements a block */                                                           \
    for (k = 0; k < 6 * tn; k++) src[k] = SENT(T);                                                                     \
    for (j = 0; j < tn; j++)                                                                                           \
      for (k = 0; k < 2; k++) src[j * 2 * 3 + k * 3] = VAL(T, tme * 8 + j, k + 1);                                     \
    for (k = 0; k < 4 * tn + 1; k++) dst[k] = (T)0;                                                                    \
    TSYNC(team);                                                                                                       \
    rc = shmem_##N##_alltoalls(team, dst, src, 2, 3, 2);                                                               \
    CHECK(rc == 0, "shmem_" #N "_alltoalls = %d", rc);                                                                 \
    for (i = 0; i < tn; i++)                                                                                           \
      for (k = 0; k < 4; k++)                                                                                          \
        CHECK(dst[4 * i + k] == (k % 2 == 0 ? VAL(T, i * 8 + tme, k / 2 + 1) : (T)0),                                  \
              "shmem_" #N "_alltoalls: [%d] = %Lg", 4 * i + k, (long double)dst[4 * i + k]);                           \
    CHECK(dst[4 * tn] == (T)0, "shmem_" #N "_alltoalls wrote past its end");                                           \
    TSYNC(team);                                                                                                       \
  }
RMA_TYPES(COLL_TEST)

static void coll_mem(shmem_team_t team) {
  unsigned char *src = pool_a, *dst = pool_b;
  int tme = shmem_team_my_pe(team), tn = shmem_team_n_pes(team), root, i, j, k, off, rc;
  for (root = 0; root < tn; root++) {
    for (k = 0; k < 37; k++) src[k] = (unsigned char)(tme * 40 + k);
    memset(dst, 0xee, 38);
    TSYNC(team);
    rc = shmem_broadcastmem(team, dst, src, 37, root);
    CHECK(rc == 0, "shmem_broadcastmem = %d", rc);
    for (k = 0; k < 37; k++)
      CHECK(dst[k] == (unsigned char)(root * 40 + k), "shmem_broadcastmem(root %d): [%d]", root, k);
    CHECK(dst[37] == 0xee, "shmem_broadcastmem wrote past nelems");
  }
  for (k = 0; k < tn + 9; k++) src[k] = (unsigned char)(tme * 20 + k);
  memset(dst, 0xee, 64 * (size_t)tn);
  TSYNC(team);
  rc = shmem_collectmem(team, dst, src, (size_t)(tme + 5));
  CHECK(rc == 0, "shmem_collectmem = %d", rc);
  for (i = 0, off = 0; i < tn; i++)
    for (k = 0; k < i + 5; k++, off++)
      CHECK(dst[off] == (unsigned char)(i * 20 + k), "shmem_collectmem: [%d] = %d", off, dst[off]);
  CHECK(dst[off] == 0xee, "shmem_collectmem wrote past its end");
  memset(dst, 0xee, 64 * (size_t)tn);
  TSYNC(team);
  rc = shmem_fcollectmem(team, dst, src, 9);
  CHECK(rc == 0, "shmem_fcollectmem = %d", rc);
  for (i = 0; i < tn; i++)
    for (k = 0; k < 9; k++) CHECK(dst[9 * i + k] == (unsigned char)(i * 20 + k), "shmem_fcollectmem: [%d]", 9 * i + k);
  CHECK(dst[9 * tn] == 0xee, "shmem_fcollectmem wrote past its end");
  for (j = 0; j < tn; j++)
    for (k = 0; k < 5; k++) src[5 * j + k] = (unsigned char)(tme * 50 + j * 7 + k);
  memset(dst, 0xee, 64 * (size_t)tn);
  TSYNC(team);
  rc = shmem_alltoallmem(team, dst, src, 5);
  CHECK(rc == 0, "shmem_alltoallmem = %d", rc);
  for (i = 0; i < tn; i++)
    for (k = 0; k < 5; k++)
      CHECK(dst[5 * i + k] == (unsigned char)(i * 50 + tme * 7 + k), "shmem_alltoallmem: [%d]", 5 * i + k);
  CHECK(dst[5 * tn] == 0xee, "shmem_alltoallmem wrote past its end");
  /* alltoallsmem: bytes, dst stride 3, sst 2, 2 bytes a block */
  memset(src, 0, 8 * (size_t)tn);
  for (j = 0; j < tn; j++)
    for (k = 0; k < 2; k++) src[j * 2 * 2 + k * 2] = (unsigned char)(tme * 50 + j * 7 + k + 1);
  memset(dst, 0, 64 * (size_t)tn);
  TSYNC(team);
  rc = shmem_alltoallsmem(team, dst, src, 3, 2, 2);
  CHECK(rc == 0, "shmem_alltoallsmem = %d", rc);
  for (i = 0; i < tn; i++)
    for (k = 0; k < 6; k++)
      CHECK(dst[6 * i + k] == (k % 3 == 0 ? (unsigned char)(i * 50 + tme * 7 + k / 3 + 1) : 0),
            "shmem_alltoallsmem: [%d] = %d", 6 * i + k, dst[6 * i + k]);
  TSYNC(team);
}

/* Reductions: dest on every PE of the team; once more in place (source == dest). */

#define RED_TEST(T, N, OP, INIT, COMBINE)                                                                          \
  static void red_##N##_##OP(shmem_team_t team) {                                                                  \
    T *src = (T *)pool_a, *dst = (T *)pool_b;                                                                      \
    int tme = shmem_team_my_pe(team), tn = shmem_team_n_pes(team), i, k, rc, pass;                                 \
    for (pass = 0; pass < 2; pass++) {                                                                             \
      T *from = pass == 0 ? src : dst;                                                                             \
      for (k = 0; k < NRED; k++) {                                                                                 \
        from[k] = INIT(T, tme, k);                                                                                 \
        if (pass == 0) dst[k] = SENT(T);                                                                           \
      }                                                                                                            \
      dst[NRED] = SENT(T);                                                                                         \
      TSYNC(team);                                                                                                 \
      rc = shmem_##N##_##OP##_reduce(team, dst, from, NRED);                                                       \
      CHECK(rc == 0, "shmem_" #N "_" #OP "_reduce = %d", rc);                                                      \
      for (k = 0; k < NRED; k++) {                                                                                 \
        T want = INIT(T, 0, k);                                                                                    \
        for (i = 1; i < tn; i++) want = (T)COMBINE(want, INIT(T, i, k));                                           \
        CHECK(dst[k] == want, "shmem_" #N "_" #OP "_reduce%s: [%d] = %Lg, want %Lg", pass ? " (in place)" : "", k, \
              (long double)dst[k], (long double)want);                                                             \
      }                                                                                                            \
      CHECK(dst[NRED] == SENT(T), "shmem_" #N "_" #OP "_reduce wrote past nreduce");                               \
      TSYNC(team);                                                                                                 \
    }                                                                                                              \
  }
#define RED_BITWISE(T, N)               \
  RED_TEST(T, N, and, BIT_INIT, OP_AND) \
  RED_TEST(T, N, or, BIT_INIT, OP_OR)   \
  RED_TEST(T, N, xor, BIT_INIT, OP_XOR)
#define RED_UNSIGNED(T, N)               \
  RED_TEST(T, N, min, MM_U_INIT, OP_MIN) \
  RED_TEST(T, N, max, MM_U_INIT, OP_MAX) \
  RED_TEST(T, N, sum, SUM_INIT, OP_SUM)  \
  RED_TEST(T, N, prod, PROD_INIT, OP_PROD)
#define RED_SIGNED(T, N)                 \
  RED_TEST(T, N, min, MM_S_INIT, OP_MIN) \
  RED_TEST(T, N, max, MM_S_INIT, OP_MAX) \
  RED_TEST(T, N, sum, SUM_INIT, OP_SUM)  \
  RED_TEST(T, N, prod, PROD_S_INIT, OP_PROD)
REDUCE_BITWISE_TYPES(RED_BITWISE)
REDUCE_UNSIGNED_TYPES(RED_UNSIGNED)
REDUCE_SIGNED_TYPES(RED_SIGNED)

void collectives_on(shmem_team_t team, const char *name) {
  static char title[128];
  int tme;
  snprintf(title, sizeof title, "collectives on the %s team", name);
  section(title);
  if (team == SHMEM_TEAM_INVALID) return;
  tme = shmem_team_my_pe(team);
  CHECK(tme >= 0, "team_my_pe(%s) = %d", name, tme);
  TSYNC(team);
#define CALL_COLL(T, N) coll_##N(team);
  RMA_TYPES(CALL_COLL)
  coll_mem(team);
  snprintf(title, sizeof title, "reductions on the %s team", name);
  section_name = title;
#define CALL_RED_BITWISE(T, N) \
  red_##N##_and(team);         \
  red_##N##_or(team);          \
  red_##N##_xor(team);
#define CALL_RED_ARITH(T, N) \
  red_##N##_min(team);       \
  red_##N##_max(team);       \
  red_##N##_sum(team);       \
  red_##N##_prod(team);
  REDUCE_BITWISE_TYPES(CALL_RED_BITWISE)
  REDUCE_UNSIGNED_TYPES(CALL_RED_ARITH)
  REDUCE_SIGNED_TYPES(CALL_RED_ARITH)
}

/* ------------------------------------------------ large collectives */

void test_large_collectives(void) {
  const size_t each = (size_t)(POOL_BYTES / npes / 2) & ~(size_t)7;
  const int nred = 20000;
  unsigned char *src = pool_a, *dst = pool_b;
  long *lsrc = (long *)pool_a, *ldst = (long *)pool_b;
  size_t i;
  int pe, k;

  section("large collectives on the world team");
  for (i = 0; i < (size_t)POOL_BYTES / 2; i++) src[i] = (unsigned char)(me * 29 + i * 7);
  shmem_barrier_all();
  CHECK(shmem_fcollectmem(SHMEM_TEAM_WORLD, dst, src, each) == 0, "fcollectmem of %zu bytes each", each);
  for (pe = 0; pe < npes; pe++)
    for (i = 0; i < each; i++) {
      unsigned char want = (unsigned char)(pe * 29 + i * 7);
      if (dst[(size_t)pe * each + i] != want)
        CHECK(dst[(size_t)pe * each + i] == want, "fcollectmem(%zu each): PE %d's byte %zu = %d", each, pe, i,
              dst[(size_t)pe * each + i]);
    }
  CHECK(1, "large fcollectmem");
  shmem_barrier_all();
  CHECK(shmem_broadcastmem(SHMEM_TEAM_WORLD, dst, src, POOL_BYTES / 2, npes - 1) == 0, "broadcastmem of 512 KiB");
  for (i = 0; i < (size_t)POOL_BYTES / 2; i++) {
    unsigned char want = (unsigned char)((npes - 1) * 29 + i * 7);
    if (dst[i] != want) CHECK(dst[i] == want, "broadcastmem: byte %zu = %d", i, dst[i]);
  }
  CHECK(1, "large broadcastmem");
  shmem_barrier_all();
  for (k = 0; k < nred; k++) lsrc[k] = (long)me * k + 1;
  shmem_barrier_all();
  CHECK(shmem_long_sum_reduce(SHMEM_TEAM_WORLD, ldst, lsrc, (size_t)nred) == 0, "long_sum_reduce of %d", nred);
  for (k = 0; k < nred; k++) {
    long want = (long)npes * (npes - 1) / 2 * k + npes;
    if (ldst[k] != want) CHECK(ldst[k] == want, "sum_reduce of %d longs: [%d] = %ld, want %ld", nred, k, ldst[k], want);
  }
  CHECK(1, "large sum_reduce");
  shmem_barrier_all();
}

/* ------------------------------------------------ back-to-back collectives */

/* Collectives called again and again with no barrier between them, into
 * dest arrays in turn, each reused only once every PE is done with it (the
 * standard leaves that to the program): a PE already in a later call must
 * never be counted for a slower one's part of this one, at a PE still
 * waiting for that slower one. */
static int check_fcollect(long *d, int k, const char *what) {
  int pe;
  for (pe = 0; pe < npes; pe++) {
    if (d[pe] != (long)k * 1000 + pe) {
      CHECK(d[pe] == (long)k * 1000 + pe, "fcollect %d %s: PE %d's part is %ld", k, what, pe, d[pe]);
      return 1;
    }
  }
  return 0;
}

static long b2b_psync[2][SHMEM_REDUCE_SYNC_SIZE];
static long b2b_pwrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE];

void test_back_to_back_collectives(int calls) {
  long *src = (long *)pool_a, *dst[4];
  int k, pe, i, bad = 0;

  section("back-to-back fcollect, alltoall, broadcast and sum_reduce on the world team");
  for (i = 0; i < 4; i++) dst[i] = (long *)pool_b + (size_t)i * 2 * (size_t)npes;
  shmem_barrier_all();
  /* A PE one call ahead (it has every part of this one) delivers into the
   * other dest. */
  for (k = 0; k < calls && !bad; k++) {
    src[0] = (long)k * 1000 + me;
    CHECK(shmem_long_fcollect(SHMEM_TEAM_WORLD, dst[k % 2], src, 1) == 0, "fcollect %d", k);
    bad = check_fcollect(dst[k % 2], k, "back to back");
  }
  shmem_barrier_all();
  for (k = 0; k < calls && !bad; k++) {
    long *d = dst[k % 2];
    for (pe = 0; pe < npes; pe++) src[pe] = (long)k * 1000 + me * 10 + pe;
    CHECK(shmem_long_alltoall(SHMEM_TEAM_WORLD, d, src, 1) == 0, "alltoall %d", k);
    for (pe = 0; pe < npes; pe++) {
      if (d[pe] != (long)k * 1000 + pe * 10 + me) {
        CHECK(d[pe] == (long)k * 1000 + pe * 10 + me, "alltoall %d of %d back to back: PE %d's part is %ld", k, calls,
              pe, d[pe]);
        bad = 1;
      }
    }
  }
  /* A broadcast's root returns at once, and a PE that has its part goes on:
   * one may be two calls ahead (dest reused four calls later, after an
   * fcollect that waited for every PE). */
  shmem_barrier_all();
  for (k = 0; k < calls && !bad; k++) {
    long *d = dst[k % 4];
    const int root = (k / 2) % npes;
    src[0] = (long)k * 1000 + me;
    if (k % 2 == 1) {
      CHECK(shmem_long_broadcast(SHMEM_TEAM_WORLD, d, src, 1, root) == 0, "broadcast %d", k);
      if (me != root && d[0] != (long)k * 1000 + root) {
        CHECK(d[0] == (long)k * 1000 + root, "broadcast %d of %d among fcollects: got %ld", k, calls, d[0]);
        bad = 1;
      }
    } else {
      CHECK(shmem_long_fcollect(SHMEM_TEAM_WORLD, d, src, 1) == 0, "fcollect %d", k);
      bad = check_fcollect(d, k, "among broadcasts");
    }
  }
  /* Small reductions (every source pushed to every PE) back to back, in
   * place every other call, and between broadcasts whose root runs ahead. */
  shmem_barrier_all();
  for (k = 0; k < calls && !bad; k++) {
    long *d = dst[k % 4];
    const long want = (long)npes * k * 1000 + (long)npes * (npes - 1) / 2;
    if (k % 3 == 2) {
      src[0] = (long)k * 1000 + me;
      CHECK(shmem_long_broadcast(SHMEM_TEAM_WORLD, d, src, 1, k % npes) == 0, "broadcast %d", k);
      continue;
    }
    src[0] = src[1] = (long)k * 1000 + me;
    if (k % 2 == 1) {
      CHECK(shmem_long_sum_reduce(SHMEM_TEAM_WORLD, src, src, 2) == 0, "sum_reduce %d in place", k);
      d = src;
    } else {
      CHECK(shmem_long_sum_reduce(SHMEM_TEAM_WORLD, d, src, 2) == 0, "sum_reduce %d", k);
    }
    if (d[0] != want || d[1] != want) {
      CHECK(d[0] == want && d[1] == want, "sum_reduce %d of %d back to back: %ld and %ld, want %ld", k, calls, d[0],
            d[1], want);
      bad = 1;
    }
  }
  /* The legacy form on an active set of every PE, two pSync in turn (as
   * OSU's reduce program calls it): counted as the world team's. */
  for (i = 0; i < SHMEM_REDUCE_SYNC_SIZE; i++) b2b_psync[0][i] = b2b_psync[1][i] = SHMEM_SYNC_VALUE;
  shmem_barrier_all();
  for (k = 0; k < calls && !bad; k++) {
    long *d = dst[k % 4];
    const long want = (long)npes * k * 1000 + (long)npes * (npes - 1) / 2;
    src[0] = (long)k * 1000 + me;
    shmem_long_sum_to_all(d, src, 1, 0, 0, npes, b2b_pwrk, b2b_psync[k % 2]);
    if (d[0] != want) {
      CHECK(d[0] == want, "sum_to_all %d of %d back to back: %ld, want %ld", k, calls, d[0], want);
      bad = 1;
    }
  }
  shmem_barrier_all();
}

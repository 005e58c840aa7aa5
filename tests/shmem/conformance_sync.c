/* The OpenSHMEM conformance suite: ordering (fence, quiet), point-to-point
 * synchronisation (wait_until, test, their vector forms), locks, and
 * barrier_all / sync_all. */
#include "conformance.h"

/* The locks, and the counter they guard. */
static long lock_word, lock_word2;
static long lock_counter;

/* clang-format off */
#define P2P_TYPES(X) \
  X(short, short) \
  X(int, int) \
  X(long, long) \
  X(long long, longlong) \
  X(unsigned short, ushort) \
  X(unsigned int, uint) \
  X(unsigned long, ulong) \
  X(unsigned long long, ulonglong) \
  X(int32_t, int32) \
  X(int64_t, int64) \
  X(uint32_t, uint32) \
  X(uint64_t, uint64) \
  X(size_t, size) \
  X(ptrdiff_t, ptrdiff)
/* clang-format on */

/* The indices a _some call returned, in ascending order (the standard does not fix their order). */
static void sort_idx(size_t *idx, size_t n) {
  size_t i, j;
  for (i = 1; i < n; i++)
    for (j = i; j > 0 && idx[j - 1] > idx[j]; j--) {
      size_t t = idx[j];
      idx[j] = idx[j - 1];
      idx[j - 1] = t;
    }
}

/* ------------------------------------------------------------- ordering */

static long quiet_box[512];

void test_fence_quiet(void) {
  enum { K = 512, ROUNDS = 40 };
  long *data = (long *)pool_a, *flag = (long *)pool_b, *ack = (long *)pool_b + 1, *src;
  long r;
  int i;

  section("fence ordering");
  *flag = 0;
  *ack = 0;
  src = (long *)malloc(sizeof(long) * K * ROUNDS);
  CHECK(src != NULL, "malloc");
  for (r = 0; r < ROUNDS; r++)
    for (i = 0; i < K; i++) src[r * K + i] = r + 1;
  shmem_barrier_all();
  for (r = 1; r <= ROUNDS; r++) {
    /* data in several puts of several kinds, a fence, then the flag: whoever sees the flag sees the data */
    if (r % 3 == 0) {
      shmem_long_put_nbi(data, src + (r - 1) * K, K, right_pe);
    } else if (r % 3 == 1) {
      shmem_long_put(data, src + (r - 1) * K, K / 2, right_pe);
      shmem_long_put_nbi(data + K / 2, src + (r - 1) * K, K / 2, right_pe);
    } else {
      for (i = 0; i < K; i += 64) shmem_long_put(data + i, src + (r - 1) * K, 64, right_pe);
    }
    if (r % 2)
      shmem_fence();
    else
      shmem_ctx_fence(SHMEM_CTX_DEFAULT);
    shmem_long_p(flag, r, right_pe);
    shmem_long_wait_until(flag, SHMEM_CMP_GE, r);
    CHECK(*flag == r, "round %ld: flag %ld", r, *flag);
    for (i = 0; i < K; i++) {
      if (data[i] != r) CHECK(data[i] == r, "round %ld: the flag came before the data: [%d] = %ld", r, i, data[i]);
    }
    shmem_long_atomic_set(ack, r, left_pe);
    shmem_long_wait_until(ack, SHMEM_CMP_GE, r);
  }
  CHECK(1, "fence rounds");

  section("quiet");
  for (i = 0; i < K; i++) src[i] = 7000 + me;
  shmem_long_put_nbi(data, src, K, right_pe);
  shmem_quiet();
  shmem_long_atomic_set(flag, -1, right_pe);
  shmem_long_wait_until(flag, SHMEM_CMP_EQ, -1);
  for (i = 0; i < K; i++) {
    if (data[i] != 7000 + left_pe) CHECK(data[i] == 7000 + left_pe, "quiet: the flag came before the data: [%d]", i);
  }
  CHECK(1, "quiet");
  /* the same into a static array: where globals are not mapped (the relay) the puts are carried by the peer's
     progress thread, and the flag (in the mapped heap) is a store of our own */
  shmem_barrier_all();
  for (r = 1; r <= 8; r++) {
    for (i = 0; i < K; i++) src[i] = 100 * r + me;
    if (r % 2)
      shmem_long_put_nbi(quiet_box, src, K, right_pe);
    else
      shmem_long_put(quiet_box, src, K, right_pe);
    shmem_quiet();
    shmem_long_atomic_set(flag, -1 - r, right_pe);
    shmem_long_wait_until(flag, SHMEM_CMP_EQ, -1 - r);
    for (i = 0; i < K; i++) {
      if (quiet_box[i] != 100 * r + left_pe)
        CHECK(quiet_box[i] == 100 * r + left_pe, "quiet (static): the flag came before the data: [%d] = %ld", i,
              quiet_box[i]);
    }
    shmem_long_atomic_set(ack, -1 - r, left_pe);
    shmem_long_wait_until(ack, SHMEM_CMP_EQ, -1 - r);
  }
  CHECK(1, "quiet (static)");
  shmem_barrier_all();
  free(src);
}

/* ------------------------------------------------------ point-to-point sync */

#define P2P_TEST(T, N)                                                                                        \
  static void p2p_##N(void) {                                                                                 \
    T *v = (T *)pool_a;                                                                                       \
    int status[4] = {0, 1, 0, 0}; /* element 1 excluded */                                                    \
    int all_excluded[4] = {1, 1, 1, 1};                                                                       \
    size_t idx[4], got, i;                                                                                    \
    T cmpv[4];                                                                                                \
    section("wait_until/test " #T);                                                                           \
    memset(v, 0, 16 * sizeof(T));                                                                             \
    v[0] = 5;                                                                                                 \
    /* the comparison operators */                                                                            \
    CHECK(shmem_##N##_test(&v[0], SHMEM_CMP_EQ, 5) == 1, "test EQ");                                          \
    CHECK(shmem_##N##_test(&v[0], SHMEM_CMP_EQ, 4) == 0, "test EQ false");                                    \
    CHECK(shmem_##N##_test(&v[0], SHMEM_CMP_NE, 5) == 0, "test NE false");                                    \
    CHECK(shmem_##N##_test(&v[0], SHMEM_CMP_NE, 6) == 1, "test NE");                                          \
    CHECK(shmem_##N##_test(&v[0], SHMEM_CMP_GT, 4) == 1, "test GT");                                          \
    CHECK(shmem_##N##_test(&v[0], SHMEM_CMP_GT, 5) == 0, "test GT false");                                    \
    CHECK(shmem_##N##_test(&v[0], SHMEM_CMP_GE, 5) == 1, "test GE");                                          \
    CHECK(shmem_##N##_test(&v[0], SHMEM_CMP_GE, 6) == 0, "test GE false");                                    \
    CHECK(shmem_##N##_test(&v[0], SHMEM_CMP_LT, 6) == 1, "test LT");                                          \
    CHECK(shmem_##N##_test(&v[0], SHMEM_CMP_LT, 5) == 0, "test LT false");                                    \
    CHECK(shmem_##N##_test(&v[0], SHMEM_CMP_LE, 5) == 1, "test LE");                                          \
    CHECK(shmem_##N##_test(&v[0], SHMEM_CMP_LE, 4) == 0, "test LE false");                                    \
    shmem_##N##_wait_until(&v[0], SHMEM_CMP_GE, 5); /* already true */                                        \
    v[0] = 0;                                                                                                 \
    shmem_barrier_all();                                                                                      \
    /* waits that the left neighbour ends */                                                                  \
    shmem_##N##_p(&v[0], 3, right_pe);                                                                        \
    shmem_##N##_wait_until(&v[0], SHMEM_CMP_EQ, 3);                                                           \
    CHECK(v[0] == 3, "wait_until EQ 3: %Lg", (long double)v[0]);                                              \
    shmem_##N##_p(&v[9], 8, right_pe);                                                                        \
    shmem_##N##_wait(&v[9], 0); /* until it is not 0 */                                                       \
    CHECK(v[9] == 8, "shmem_" #N "_wait: %Lg", (long double)v[9]);                                            \
    shmem_##N##_p(&v[10], 9, right_pe);                                                                       \
    while (!shmem_##N##_test(&v[10], SHMEM_CMP_GT, 8)) {                                                      \
    }                                                                                                         \
    CHECK(v[10] == 9, "test loop: %Lg", (long double)v[10]);                                                  \
    shmem_barrier_all();                                                                                      \
    /* nothing written yet into v[1..4] */                                                                    \
    CHECK(shmem_##N##_test_all(&v[1], 4, status, SHMEM_CMP_EQ, 1) == 0, "test_all before the writes");        \
    CHECK(shmem_##N##_test_any(&v[1], 4, status, SHMEM_CMP_EQ, 1) == SIZE_MAX, "test_any before the writes"); \
    CHECK(shmem_##N##_test_some(&v[1], 4, idx, status, SHMEM_CMP_EQ, 1) == 0, "test_some before the writes"); \
    got = shmem_##N##_wait_until_any(&v[1], 4, all_excluded, SHMEM_CMP_EQ, 0);                                \
    CHECK(got == SIZE_MAX, "wait_until_any with every element excluded: %zu", got);                           \
    got = shmem_##N##_wait_until_some(&v[1], 4, idx, all_excluded, SHMEM_CMP_EQ, 0);                          \
    CHECK(got == 0, "wait_until_some with every element excluded: %zu", got);                                 \
    got = shmem_##N##_wait_until_any(&v[1], 0, NULL, SHMEM_CMP_EQ, 0);                                        \
    CHECK(got == SIZE_MAX, "wait_until_any of 0 elements: %zu", got);                                         \
    shmem_barrier_all();                                                                                      \
    /* the excluded element and then one more: wait_until_any sees only index 2 */                            \
    shmem_##N##_p(&v[2], 1, right_pe);                                                                        \
    shmem_##N##_p(&v[3], 1, right_pe);                                                                        \
    got = shmem_##N##_wait_until_any(&v[1], 4, status, SHMEM_CMP_EQ, 1);                                      \
    CHECK(got == 2, "wait_until_any returned %zu, want 2", got);                                              \
    shmem_barrier_all(); /* before the left neighbour writes the elements wait_until_any must not see */      \
    shmem_##N##_p(&v[1], 1, right_pe);                                                                        \
    shmem_##N##_p(&v[4], 1, right_pe);                                                                        \
    shmem_##N##_wait_until_all(&v[1], 4, status, SHMEM_CMP_EQ, 1);                                            \
    CHECK(v[1] == 1 && v[3] == 1 && v[4] == 1, "wait_until_all returned early");                              \
    shmem_##N##_p(&v[6], 2, right_pe);                                                                        \
    got = shmem_##N##_wait_until_some(&v[5], 3, idx, NULL, SHMEM_CMP_NE, 0);                                  \
    CHECK(got == 1 && idx[0] == 1, "wait_until_some: %zu indices, first %zu", got, idx[0]);                   \
    shmem_barrier_all();                                                                                      \
    /* every write has landed: v[1..4] = 1 */                                                                 \
    CHECK(shmem_##N##_test_all(&v[1], 4, status, SHMEM_CMP_EQ, 1) == 1, "test_all");                          \
    CHECK(shmem_##N##_test_all(&v[1], 4, NULL, SHMEM_CMP_EQ, 1) == 1, "test_all (no status)");                \
    got = shmem_##N##_test_any(&v[1], 4, status, SHMEM_CMP_EQ, 1);                                            \
    CHECK(got == 0 || got == 2 || got == 3, "test_any returned %zu", got);                                    \
    got = shmem_##N##_test_some(&v[1], 4, idx, status, SHMEM_CMP_EQ, 1);                                      \
    sort_idx(idx, got < 4 ? got : 4);                                                                         \
    CHECK(got == 3 && idx[0] == 0 && idx[1] == 2 && idx[2] == 3, "test_some: %zu indices", got);              \
    got = shmem_##N##_wait_until_some(&v[1], 4, idx, status, SHMEM_CMP_EQ, 1);                                \
    sort_idx(idx, got < 4 ? got : 4);                                                                         \
    CHECK(got == 3 && idx[0] == 0 && idx[1] == 2 && idx[2] == 3, "wait_until_some: %zu indices", got);        \
    /* vectors: v[1..4] = 1 against {1, 9, 1, 0} */                                                           \
    cmpv[0] = 1;                                                                                              \
    cmpv[1] = 9;                                                                                              \
    cmpv[2] = 1;                                                                                              \
    cmpv[3] = 0;                                                                                              \
    CHECK(shmem_##N##_test_all_vector(&v[1], 4, NULL, SHMEM_CMP_EQ, cmpv) == 0, "test_all_vector");           \
    CHECK(shmem_##N##_test_all_vector(&v[1], 4, status, SHMEM_CMP_GE, cmpv) == 1, "test_all_vector GE");      \
    got = shmem_##N##_test_any_vector(&v[1], 4, status, SHMEM_CMP_EQ, cmpv);                                  \
    CHECK(got == 0 || got == 2, "test_any_vector returned %zu", got);                                         \
    got = shmem_##N##_test_some_vector(&v[1], 4, idx, NULL, SHMEM_CMP_EQ, cmpv);                              \
    sort_idx(idx, got < 4 ? got : 4);                                                                         \
    CHECK(got == 2 && idx[0] == 0 && idx[1] == 2, "test_some_vector: %zu indices", got);                      \
    got = shmem_##N##_wait_until_any_vector(&v[1], 4, status, SHMEM_CMP_NE, cmpv);                            \
    CHECK(got == 3, "wait_until_any_vector returned %zu", got);                                               \
    got = shmem_##N##_wait_until_some_vector(&v[1], 4, idx, NULL, SHMEM_CMP_LE, cmpv);                        \
    sort_idx(idx, got < 4 ? got : 4);                                                                         \
    CHECK(got == 3 && idx[0] == 0 && idx[1] == 1 && idx[2] == 2, "wait_until_some_vector: %zu indices", got); \
    shmem_##N##_wait_until_all_vector(&v[1], 4, status, SHMEM_CMP_GE, cmpv);                                  \
    shmem_barrier_all();                                                                                      \
    /* waits on vectors that the left neighbour ends */                                                       \
    cmpv[0] = 4;                                                                                              \
    cmpv[1] = 0;                                                                                              \
    shmem_##N##_p(&v[12], 4, right_pe);                                                                       \
    shmem_##N##_wait_until_all_vector(&v[12], 2, NULL, SHMEM_CMP_GE, cmpv);                                   \
    CHECK(v[12] == 4, "wait_until_all_vector: %Lg", (long double)v[12]);                                      \
    shmem_##N##_p(&v[14], 6, right_pe);                                                                       \
    got = shmem_##N##_wait_until_any_vector(&v[13], 2, NULL, SHMEM_CMP_GT, cmpv);                             \
    CHECK(got == 1 && v[14] == 6, "wait_until_any_vector returned %zu", got);                                 \
    shmem_barrier_all();                                                                                      \
    for (i = 0; i < 16; i++) v[i] = 0;                                                                        \
  }
P2P_TYPES(P2P_TEST)

static void test_p2p_legacy(void) {
  long *v = (long *)pool_a;
  section("shmem_wait, shmem_wait_until (long)");
  v[0] = v[1] = 0;
  shmem_barrier_all();
  shmem_long_p(&v[0], 5, right_pe);
  shmem_wait(&v[0], 0);
  CHECK(v[0] == 5, "shmem_wait: %ld", v[0]);
  shmem_long_p(&v[1], 6, right_pe);
  (shmem_wait_until)(&v[1], SHMEM_CMP_EQ, 6); /* the function, not the generic name */
  CHECK(v[1] == 6, "shmem_wait_until: %ld", v[1]);
  CHECK(_SHMEM_CMP_EQ == SHMEM_CMP_EQ && _SHMEM_CMP_LE == SHMEM_CMP_LE, "the _SHMEM_CMP_ constants");
  shmem_barrier_all();
}

/* The wait/test sections, in order. */
void test_p2p(void) {
#define CALL_P2P(T, N) p2p_##N();
  P2P_TYPES(CALL_P2P)
  test_p2p_legacy();
}

/* ------------------------------------------------------------------ locks */

void test_locks(void) {
  enum { ITERS = 100 };
  int i;

  section("locks");
  lock_counter = 0;
  shmem_barrier_all();
  for (i = 0; i < ITERS; i++) {
    long v;
    if (i % 2) {
      shmem_set_lock(&lock_word);
    } else {
      while (shmem_test_lock(&lock_word) != 0) {
      }
    }
    /* a non-atomic read-modify-write of PE 0's counter, made safe by the lock */
    v = shmem_long_g(&lock_counter, 0);
    shmem_long_p(&lock_counter, v + 1, 0);
    shmem_clear_lock(&lock_word);
  }
  shmem_barrier_all();
  if (me == 0)
    CHECK(lock_counter == (long)npes * ITERS, "the locked counter is %ld, want %ld", lock_counter, (long)npes * ITERS);

  section("test_lock on a held lock");
  if (me == 0) shmem_set_lock(&lock_word2);
  shmem_barrier_all();
  if (me != 0) CHECK(shmem_test_lock(&lock_word2) == 1, "shmem_test_lock acquired a lock PE 0 holds");
  shmem_barrier_all();
  if (me == 0) shmem_clear_lock(&lock_word2);
  shmem_barrier_all();
  if (me == npes - 1) {
    CHECK(shmem_test_lock(&lock_word2) == 0, "shmem_test_lock on a free lock");
    shmem_clear_lock(&lock_word2);
  }
}

/* ----------------------------------------------------- barrier_all, sync_all */

void test_barrier_all(void) {
  long *box = (long *)pool_b;
  int r;
  section("barrier_all, sync_all");
  memset(box, 0, 32 * sizeof(long));
  shmem_barrier_all();
  for (r = 0; r < 20; r++) {
    shmem_long_p(&box[r], r * 100 + me, right_pe); /* completed by the barrier */
    shmem_barrier_all();
    CHECK(box[r] == r * 100 + left_pe, "barrier_all round %d: %ld", r, box[r]);
  }
  shmem_long_p(&box[25], 77 + me, right_pe);
  shmem_quiet();
  shmem_sync_all();
  CHECK(box[25] == 77 + left_pe, "quiet + sync_all: %ld", box[25]);
  shmem_barrier_all();
}

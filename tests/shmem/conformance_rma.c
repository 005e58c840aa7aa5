/* The OpenSHMEM conformance suite: RMA (every typed put/get form, the sized
 * and mem forms, puts with a signal), and RMA on my own PE. */
#include "conformance.h"

static uint64_t sig_word[4]; /* signals in static memory */

/* ------------------------------------------------------------------ RMA */

#define RMA_TEST(T, N)                                                                                                 \
  static void rma_##N(void) {                                                                                          \
    T *buf = (T *)pool_a, src[NR], got[2 * NR];                                                                        \
    uint64_t s;                                                                                                        \
    int i;                                                                                                             \
    section("RMA " #T);                                                                                                \
    memset(pool_a, 0, 10 * NR * sizeof(T));                                                                            \
    for (i = 0; i < NR; i++) {                                                                                         \
      src[i] = VAL(T, me, i);                                                                                          \
      buf[NR + i] = VAL(T, me, NR + i);                                                                                \
    }                                                                                                                  \
    shmem_barrier_all();                                                                                               \
    /* put and get */                                                                                                  \
    shmem_##N##_put(buf, src, NR, right_pe);                                                                           \
    shmem_##N##_get(got, buf + NR, NR, right_pe);                                                                      \
    for (i = 0; i < NR; i++)                                                                                           \
      CHECK(got[i] == VAL(T, right_pe, NR + i), "shmem_" #N "_get: [%d] = %Lg", i, (long double)got[i]);               \
    shmem_barrier_all();                                                                                               \
    for (i = 0; i < NR; i++)                                                                                           \
      CHECK(buf[i] == VAL(T, left_pe, i), "shmem_" #N "_put: [%d] = %Lg", i, (long double)buf[i]);                     \
    /* p and g */                                                                                                      \
    shmem_##N##_p(&buf[2 * NR + 2], VAL(T, me, 77), right_pe);                                                         \
    got[0] = shmem_##N##_g(&buf[NR + 5], right_pe);                                                                    \
    CHECK(got[0] == VAL(T, right_pe, NR + 5), "shmem_" #N "_g = %Lg", (long double)got[0]);                            \
    shmem_barrier_all();                                                                                               \
    CHECK(buf[2 * NR + 2] == VAL(T, left_pe, 77), "shmem_" #N "_p: %Lg", (long double)buf[2 * NR + 2]);                \
    CHECK(buf[2 * NR + 1] == 0 && buf[2 * NR + 3] == 0, "shmem_" #N "_p wrote next to its target");                    \
    /* iput: src[0, 2, .., 8] into the right's buf[3NR + 0, 3, .., 12]; iget: the right's buf[NR + 0, 3, .., 12]       \
     * into got[0, 2, .., 8] */                                                                                        \
    shmem_##N##_iput(buf + 3 * NR, src, 3, 2, 5, right_pe);                                                            \
    memset(got, 0, sizeof got);                                                                                        \
    shmem_##N##_iget(got, buf + NR, 2, 3, 5, right_pe);                                                                \
    for (i = 0; i < 10; i++)                                                                                           \
      CHECK(got[i] == (i % 2 == 0 ? VAL(T, right_pe, NR + 3 * (i / 2)) : (T)0), "shmem_" #N "_iget: [%d] = %Lg", i,    \
            (long double)got[i]);                                                                                      \
    shmem_barrier_all();                                                                                               \
    for (i = 0; i < 15; i++)                                                                                           \
      CHECK(buf[3 * NR + i] == (i % 3 == 0 ? VAL(T, left_pe, 2 * (i / 3)) : (T)0), "shmem_" #N "_iput: [%d] = %Lg", i, \
            (long double)buf[3 * NR + i]);                                                                             \
    /* the non-blocking forms, completed by quiet */                                                                   \
    for (i = 0; i < NR; i++) src[i] = VAL(T, me, 40 + i);                                                              \
    shmem_##N##_put_nbi(buf + 4 * NR, src, NR, right_pe);                                                              \
    memset(got, 0, sizeof got);                                                                                        \
    shmem_##N##_get_nbi(got, buf + NR, NR, right_pe);                                                                  \
    shmem_quiet();                                                                                                     \
    for (i = 0; i < NR; i++)                                                                                           \
      CHECK(got[i] == VAL(T, right_pe, NR + i), "shmem_" #N "_get_nbi: [%d] = %Lg", i, (long double)got[i]);           \
    shmem_barrier_all();                                                                                               \
    for (i = 0; i < NR; i++)                                                                                           \
      CHECK(buf[4 * NR + i] == VAL(T, left_pe, 40 + i), "shmem_" #N "_put_nbi: [%d] = %Lg", i,                         \
            (long double)buf[4 * NR + i]);                                                                             \
    /* the context forms on SHMEM_CTX_DEFAULT */                                                                       \
    shmem_ctx_##N##_put(SHMEM_CTX_DEFAULT, buf + 5 * NR, src, NR, right_pe);                                           \
    shmem_ctx_##N##_p(SHMEM_CTX_DEFAULT, &buf[5 * NR + NR / 2], VAL(T, me, 99), right_pe);                             \
    got[0] = shmem_ctx_##N##_g(SHMEM_CTX_DEFAULT, &buf[NR + 1], right_pe);                                             \
    CHECK(got[0] == VAL(T, right_pe, NR + 1), "shmem_ctx_" #N "_g = %Lg", (long double)got[0]);                        \
    memset(got, 0, sizeof got);                                                                                        \
    shmem_ctx_##N##_get(SHMEM_CTX_DEFAULT, got, buf + NR, NR, right_pe);                                               \
    for (i = 0; i < NR; i++)                                                                                           \
      CHECK(got[i] == VAL(T, right_pe, NR + i), "shmem_ctx_" #N "_get: [%d] = %Lg", i, (long double)got[i]);           \
    memset(got, 0, sizeof got);                                                                                        \
    shmem_ctx_##N##_iget(SHMEM_CTX_DEFAULT, got, buf + NR, 1, 2, 4, right_pe);                                         \
    for (i = 0; i < 4; i++)                                                                                            \
      CHECK(got[i] == VAL(T, right_pe, NR + 2 * i), "shmem_ctx_" #N "_iget: [%d] = %Lg", i, (long double)got[i]);      \
    shmem_ctx_##N##_iput(SHMEM_CTX_DEFAULT, buf + 6 * NR, src, 2, 1, 4, right_pe);                                     \
    shmem_ctx_##N##_put_nbi(SHMEM_CTX_DEFAULT, buf + 7 * NR, src, NR, right_pe);                                       \
    memset(got, 0, sizeof got);                                                                                        \
    shmem_ctx_##N##_get_nbi(SHMEM_CTX_DEFAULT, got, buf + NR, NR, right_pe);                                           \
    shmem_ctx_quiet(SHMEM_CTX_DEFAULT);                                                                                \
    for (i = 0; i < NR; i++)                                                                                           \
      CHECK(got[i] == VAL(T, right_pe, NR + i), "shmem_ctx_" #N "_get_nbi: [%d] = %Lg", i, (long double)got[i]);       \
    shmem_barrier_all();                                                                                               \
    for (i = 0; i < NR; i++) {                                                                                         \
      T want = i == NR / 2 ? VAL(T, left_pe, 99) : VAL(T, left_pe, 40 + i);                                            \
      CHECK(buf[5 * NR + i] == want, "shmem_ctx_" #N "_put/_p: [%d] = %Lg", i, (long double)buf[5 * NR + i]);          \
      CHECK(buf[7 * NR + i] == VAL(T, left_pe, 40 + i), "shmem_ctx_" #N "_put_nbi: [%d] = %Lg", i,                     \
            (long double)buf[7 * NR + i]);                                                                             \
    }                                                                                                                  \
    for (i = 0; i < 8; i++)                                                                                            \
      CHECK(buf[6 * NR + i] == (i % 2 == 0 ? VAL(T, left_pe, 40 + i / 2) : (T)0), "shmem_ctx_" #N "_iput: [%d] = %Lg", \
            i, (long double)buf[6 * NR + i]);                                                                          \
    /* put with signal: SET, then ADD twice (non-blocking and on a context) */                                         \
    shmem_##N##_put_signal(buf + 8 * NR, src, NR, &sig_word[0], (uint64_t)me + 1, SHMEM_SIGNAL_SET, right_pe);         \
    s = shmem_signal_wait_until(&sig_word[0], SHMEM_CMP_EQ, (uint64_t)left_pe + 1);                                    \
    CHECK(s == (uint64_t)left_pe + 1, "shmem_signal_wait_until returned %llu", (unsigned long long)s);                 \
    for (i = 0; i < NR; i++)                                                                                           \
      CHECK(buf[8 * NR + i] == VAL(T, left_pe, 40 + i), "shmem_" #N "_put_signal: [%d] = %Lg", i,                      \
            (long double)buf[8 * NR + i]);                                                                             \
    shmem_barrier_all();                                                                                               \
    memset(buf + 8 * NR, 0, NR * sizeof(T));                                                                           \
    shmem_barrier_all();                                                                                               \
    shmem_##N##_put_signal_nbi(buf + 8 * NR, src, NR / 2, &sig_word[1], 5, SHMEM_SIGNAL_ADD, right_pe);                \
    shmem_ctx_##N##_put_signal(SHMEM_CTX_DEFAULT, buf + 8 * NR + NR / 2, src + NR / 2, NR / 2, &sig_word[1], 7,        \
                               SHMEM_SIGNAL_ADD, right_pe);                                                            \
    shmem_ctx_##N##_put_signal_nbi(SHMEM_CTX_DEFAULT, buf + 6 * NR + 8, src, 4, &sig_word[1], 30, SHMEM_SIGNAL_ADD,    \
                                   right_pe);                                                                          \
    s = shmem_signal_wait_until(&sig_word[1], SHMEM_CMP_GE, 42);                                                       \
    CHECK(s == 42, "shmem_signal_wait_until(ADD 5 + 7 + 30) returned %llu", (unsigned long long)s);                    \
    CHECK(shmem_signal_fetch(&sig_word[1]) == 42, "shmem_signal_fetch = %llu",                                         \
          (unsigned long long)shmem_signal_fetch(&sig_word[1]));                                                       \
    for (i = 0; i < NR; i++)                                                                                           \
      CHECK(buf[8 * NR + i] == VAL(T, left_pe, 40 + i), "shmem_" #N "_put_signal(_nbi, ADD): [%d] = %Lg", i,           \
            (long double)buf[8 * NR + i]);                                                                             \
    for (i = 0; i < 4; i++)                                                                                            \
      CHECK(buf[6 * NR + 8 + i] == VAL(T, left_pe, 40 + i), "shmem_ctx_" #N "_put_signal_nbi: [%d] = %Lg", i,          \
            (long double)buf[6 * NR + 8 + i]);                                                                         \
    shmem_quiet();                                                                                                     \
    shmem_barrier_all();                                                                                               \
    sig_word[0] = sig_word[1] = 0;                                                                                     \
  }
RMA_TYPES(RMA_TEST)

/* Values that use every bit of a long double's significand; a long put and get. */
static void test_rma_extra(void) {
  long double ld[4], back[4];
  long double *lbuf = (long double *)pool_b;
  long *big = (long *)pool_a, *src;
  const int nbig = POOL_BYTES / (int)sizeof(long);
  int i;

  section("RMA long double significands, 1 MiB put/get");
  for (i = 0; i < 4; i++) ld[i] = (long double)(me + 1) / 3.0L + (long double)i / 7.0L;
  shmem_longdouble_put(lbuf, ld, 4, right_pe);
  shmem_barrier_all();
  for (i = 0; i < 4; i++) {
    long double want = (long double)(left_pe + 1) / 3.0L + (long double)i / 7.0L;
    CHECK(lbuf[i] == want, "long double put: [%d] = %.21Lg, want %.21Lg", i, lbuf[i], want);
  }
  shmem_longdouble_get(back, lbuf, 4, right_pe);
  for (i = 0; i < 4; i++) CHECK(back[i] == ld[i], "long double get: [%d] = %.21Lg", i, back[i]);

  src = (long *)malloc(POOL_BYTES);
  CHECK(src != NULL, "malloc");
  for (i = 0; i < nbig; i++) src[i] = (long)me << 32 | i;
  shmem_barrier_all();
  shmem_long_put(big, src, (size_t)nbig, right_pe);
  shmem_barrier_all();
  for (i = 0; i < nbig; i++) {
    if (big[i] != ((long)left_pe << 32 | i))
      CHECK(big[i] == ((long)left_pe << 32 | i), "1 MiB put: [%d] = %lx", i, big[i]);
  }
  CHECK(1, "1 MiB put");
  memset(src, 0, POOL_BYTES);
  shmem_long_get(src, big, (size_t)nbig, right_pe);
  for (i = 0; i < nbig; i++) {
    if (src[i] != ((long)me << 32 | i)) CHECK(src[i] == ((long)me << 32 | i), "1 MiB get: [%d] = %lx", i, src[i]);
  }
  CHECK(1, "1 MiB get");
  free(src);
}

/* The sized forms: put8..put128, get, iput, iget, _nbi, _signal, ctx. */
#define PAT(src, i, bits) ((unsigned char)(((src)*53 + (i)*3 + (bits)) & 0xff))
#define SIZED_TEST(BITS)                                                                                               \
  static void sized_##BITS(void) {                                                                                     \
    enum { B = BITS / 8, NEL = 6 };                                                                                    \
    unsigned char *buf = pool_a, src[NEL * 3 * B], got[NEL * 3 * B];                                                   \
    int i, k;                                                                                                          \
    uint64_t s;                                                                                                        \
    section("sized RMA " #BITS);                                                                                       \
    memset(pool_a, 0, 16 * NEL * B);                                                                                   \
    for (i = 0; i < (int)sizeof src; i++) src[i] = PAT(me, i, BITS);                                                   \
    for (i = 0; i < NEL * B; i++) buf[NEL * B + i] = PAT(me + 1, i, BITS);                                             \
    *(uint64_t *)pool_b = 0;                                                                                           \
    shmem_barrier_all();                                                                                               \
    shmem_put##BITS(buf, src, NEL, right_pe);                                                                          \
    shmem_get##BITS(got, buf + NEL * B, NEL, right_pe);                                                                \
    for (i = 0; i < NEL * B; i++)                                                                                      \
      CHECK(got[i] == PAT(right_pe + 1, i, BITS), "shmem_get" #BITS ": byte %d = %d", i, got[i]);                      \
    shmem_barrier_all();                                                                                               \
    for (i = 0; i < NEL * B; i++) CHECK(buf[i] == PAT(left_pe, i, BITS), "shmem_put" #BITS ": byte %d", i);            \
    /* iput: element 3k of src into element 2k of the right's buf[2NEL*B..]; iget: element 2k of the right's           \
     * buf[NEL*B..] into element k of got */                                                                           \
    shmem_iput##BITS(buf + 2 * NEL * B, src, 2, 3, 2, right_pe);                                                       \
    memset(got, 0, sizeof got);                                                                                        \
    shmem_iget##BITS(got, buf + NEL * B, 1, 2, 3, right_pe);                                                           \
    for (k = 0; k < 3; k++)                                                                                            \
      for (i = 0; i < B; i++)                                                                                          \
        CHECK(got[k * B + i] == PAT(right_pe + 1, 2 * k * B + i, BITS), "shmem_iget" #BITS ": elem %d byte %d", k, i); \
    shmem_barrier_all();                                                                                               \
    for (k = 0; k < 4; k++)                                                                                            \
      for (i = 0; i < B; i++)                                                                                          \
        CHECK(buf[2 * NEL * B + k * B + i] == (k % 2 == 0 ? PAT(left_pe, 3 * (k / 2) * B + i, BITS) : 0),              \
              "shmem_iput" #BITS ": elem %d byte %d = %d", k, i, buf[2 * NEL * B + k * B + i]);                        \
    /* non-blocking, and on a context */                                                                               \
    shmem_put##BITS##_nbi(buf + 3 * NEL * B, src, NEL, right_pe);                                                      \
    memset(got, 0, sizeof got);                                                                                        \
    shmem_get##BITS##_nbi(got, buf + NEL * B, NEL, right_pe);                                                          \
    shmem_ctx_put##BITS(SHMEM_CTX_DEFAULT, buf + 4 * NEL * B, src + B, NEL, right_pe);                                 \
    shmem_ctx_put##BITS##_nbi(SHMEM_CTX_DEFAULT, buf + 5 * NEL * B, src + 2 * B, NEL, right_pe);                       \
    shmem_ctx_iput##BITS(SHMEM_CTX_DEFAULT, buf + 6 * NEL * B, src, 1, 2, 2, right_pe);                                \
    shmem_quiet();                                                                                                     \
    for (i = 0; i < NEL * B; i++) CHECK(got[i] == PAT(right_pe + 1, i, BITS), "shmem_get" #BITS "_nbi: byte %d", i);   \
    memset(got, 0, sizeof got);                                                                                        \
    shmem_ctx_get##BITS(SHMEM_CTX_DEFAULT, got, buf + NEL * B, 2, right_pe);                                           \
    shmem_ctx_get##BITS##_nbi(SHMEM_CTX_DEFAULT, got + 2 * B, buf + NEL * B + 2 * B, 2, right_pe);                     \
    shmem_ctx_iget##BITS(SHMEM_CTX_DEFAULT, got + 4 * B, buf + NEL * B, 1, 2, 2, right_pe);                            \
    shmem_ctx_quiet(SHMEM_CTX_DEFAULT);                                                                                \
    for (i = 0; i < 4 * B; i++)                                                                                        \
      CHECK(got[i] == PAT(right_pe + 1, i, BITS), "shmem_ctx_get" #BITS "(_nbi): byte %d", i);                         \
    for (i = 0; i < B; i++) {                                                                                          \
      CHECK(got[4 * B + i] == PAT(right_pe + 1, i, BITS), "shmem_ctx_iget" #BITS ": byte %d", i);                      \
      CHECK(got[5 * B + i] == PAT(right_pe + 1, 2 * B + i, BITS), "shmem_ctx_iget" #BITS ": byte %d", B + i);          \
    }                                                                                                                  \
    shmem_barrier_all();                                                                                               \
    for (i = 0; i < NEL * B; i++) {                                                                                    \
      CHECK(buf[3 * NEL * B + i] == PAT(left_pe, i, BITS), "shmem_put" #BITS "_nbi: byte %d", i);                      \
      CHECK(buf[4 * NEL * B + i] == PAT(left_pe, B + i, BITS), "shmem_ctx_put" #BITS ": byte %d", i);                  \
      CHECK(buf[5 * NEL * B + i] == PAT(left_pe, 2 * B + i, BITS), "shmem_ctx_put" #BITS "_nbi: byte %d", i);          \
    }                                                                                                                  \
    for (i = 0; i < B; i++) {                                                                                          \
      CHECK(buf[6 * NEL * B + i] == PAT(left_pe, i, BITS), "shmem_ctx_iput" #BITS ": byte %d", i);                     \
      CHECK(buf[6 * NEL * B + B + i] == PAT(left_pe, 2 * B + i, BITS), "shmem_ctx_iput" #BITS ": byte %d", B + i);     \
    }                                                                                                                  \
    /* with a signal */                                                                                                \
    shmem_put##BITS##_signal(buf + 7 * NEL * B, src, NEL, (uint64_t *)pool_b, 1, SHMEM_SIGNAL_ADD, right_pe);          \
    shmem_put##BITS##_signal_nbi(buf + 8 * NEL * B, src, NEL, (uint64_t *)pool_b, 2, SHMEM_SIGNAL_ADD, right_pe);      \
    s = shmem_signal_wait_until((uint64_t *)pool_b, SHMEM_CMP_EQ, 3);                                                  \
    CHECK(s == 3, "shmem_put" #BITS "_signal: the signal is %llu", (unsigned long long)s);                             \
    for (i = 0; i < NEL * B; i++) {                                                                                    \
      CHECK(buf[7 * NEL * B + i] == PAT(left_pe, i, BITS), "shmem_put" #BITS "_signal: byte %d", i);                   \
      CHECK(buf[8 * NEL * B + i] == PAT(left_pe, i, BITS), "shmem_put" #BITS "_signal_nbi: byte %d", i);               \
    }                                                                                                                  \
    CHECK(buf[9 * NEL * B] == 0, "shmem_put" #BITS "_signal_nbi wrote past its end");                                  \
    shmem_quiet();                                                                                                     \
    shmem_barrier_all();                                                                                               \
    *(uint64_t *)pool_b = 0;                                                                                           \
  }
SIZED_TEST(8)
SIZED_TEST(16)
SIZED_TEST(32)
SIZED_TEST(64)
SIZED_TEST(128)

/* putmem/getmem at odd sizes and offsets, and their signal and context forms. */
static void test_mem(void) {
  static const size_t sizes[] = {1, 7, 8, 63, 4099, 65536 + 5, 700001};
  unsigned char *buf = pool_a, *src, *got;
  uint64_t *sig = (uint64_t *)pool_b;
  size_t z, i, off;
  uint64_t s;

  section("putmem, getmem");
  src = (unsigned char *)malloc(POOL_BYTES);
  got = (unsigned char *)malloc(POOL_BYTES);
  CHECK(src != NULL && got != NULL, "malloc");
  for (z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
    size_t n = sizes[z];
    off = 3 + z; /* unaligned */
    for (i = 0; i < n + 1; i++) src[i] = (unsigned char)(me * 7 + i * 13 + z);
    memset(buf, 0xee, n + off + 8);
    shmem_barrier_all();
    shmem_putmem(buf + off, src + 1, n, right_pe);
    shmem_barrier_all();
    for (i = 0; i < n; i++) {
      unsigned char want = (unsigned char)(left_pe * 7 + (i + 1) * 13 + z);
      if (buf[off + i] != want)
        CHECK(buf[off + i] == want, "shmem_putmem(%zu bytes): byte %zu = %d", n, i, buf[off + i]);
    }
    CHECK(buf[off - 1] == 0xee && buf[off + n] == 0xee, "shmem_putmem(%zu bytes at +%zu) wrote outside its range", n,
          off);
    memset(got, 0, n + 2);
    shmem_getmem(got + 1, buf + off, n, right_pe);
    for (i = 0; i < n; i++) {
      unsigned char want = (unsigned char)(me * 7 + (i + 1) * 13 + z);
      if (got[1 + i] != want) CHECK(got[1 + i] == want, "shmem_getmem(%zu bytes): byte %zu = %d", n, i, got[1 + i]);
    }
    CHECK(got[0] == 0 && got[n + 1] == 0, "shmem_getmem(%zu bytes) wrote outside its range", n);
    shmem_barrier_all(); /* before the right neighbour sets up the next size */
  }
  /* non-blocking, contexts, signals */
  for (i = 0; i < 4096; i++) src[i] = (unsigned char)(me + i);
  memset(buf, 0, 5 * 4096);
  *sig = 0;
  shmem_barrier_all();
  shmem_putmem_nbi(buf, src, 4096, right_pe);
  shmem_ctx_putmem(SHMEM_CTX_DEFAULT, buf + 4096, src, 4096, right_pe);
  shmem_ctx_putmem_nbi(SHMEM_CTX_DEFAULT, buf + 2 * 4096, src, 4096, right_pe);
  shmem_putmem_signal(buf + 3 * 4096, src, 4096, sig, 1, SHMEM_SIGNAL_ADD, right_pe);
  shmem_putmem_signal_nbi(buf + 3 * 4096, src, 2048, sig, 10, SHMEM_SIGNAL_ADD, right_pe);
  shmem_ctx_putmem_signal(SHMEM_CTX_DEFAULT, buf + 4 * 4096, src, 2048, sig, 100, SHMEM_SIGNAL_ADD, right_pe);
  shmem_ctx_putmem_signal_nbi(SHMEM_CTX_DEFAULT, buf + 4 * 4096 + 2048, src + 2048, 2048, sig, 1000, SHMEM_SIGNAL_ADD,
                              right_pe);
  s = shmem_signal_wait_until(sig, SHMEM_CMP_EQ, 1111);
  CHECK(s == 1111, "putmem_signal: signal %llu", (unsigned long long)s);
  for (i = 0; i < 4096; i++) {
    unsigned char want = (unsigned char)(left_pe + i);
    if (buf[3 * 4096 + i] != want || buf[4 * 4096 + i] != want)
      CHECK(buf[3 * 4096 + i] == want && buf[4 * 4096 + i] == want, "shmem_(ctx_)putmem_signal(_nbi): byte %zu", i);
  }
  shmem_quiet();
  memset(got, 0, 3 * 4096);
  shmem_getmem_nbi(got, buf + 3 * 4096, 4096, right_pe);
  shmem_ctx_getmem(SHMEM_CTX_DEFAULT, got + 4096, buf + 3 * 4096, 4096, right_pe);
  shmem_ctx_getmem_nbi(SHMEM_CTX_DEFAULT, got + 2 * 4096, buf + 3 * 4096, 4096, right_pe);
  shmem_quiet();
  shmem_barrier_all();
  for (i = 0; i < 4096; i++) {
    unsigned char want = (unsigned char)(left_pe + i), back = (unsigned char)(me + i);
    if (buf[i] != want || buf[4096 + i] != want || buf[2 * 4096 + i] != want)
      CHECK(buf[i] == want && buf[4096 + i] == want && buf[2 * 4096 + i] == want,
            "shmem_putmem_nbi / ctx_putmem(_nbi): byte %zu", i);
    if (got[i] != back || got[4096 + i] != back || got[2 * 4096 + i] != back)
      CHECK(got[i] == back && got[4096 + i] == back && got[2 * 4096 + i] == back,
            "shmem_getmem_nbi / ctx_getmem(_nbi): byte %zu", i);
  }
  CHECK(1, "putmem/getmem nbi, ctx");
  shmem_barrier_all();
  *sig = 0;
  free(src);
  free(got);
}

/* The RMA sections, in order. */
void test_rma(void) {
#define CALL_RMA(T, N) rma_##N();
  RMA_TYPES(CALL_RMA)
  test_rma_extra();
  sized_8();
  sized_16();
  sized_32();
  sized_64();
  sized_128();
  test_mem();
}

/* ------------------------------------------------ my own PE, zero lengths */

void test_self_and_empty(void) {
  long *h = (long *)pool_a, src[8], back[8], r;
  int i;

  section("RMA and atomics on my own PE; zero-length transfers");
  for (i = 0; i < 8; i++) {
    src[i] = 60 + me + i;
    h[i] = 0;
  }
  shmem_long_put(h, src, 8, me);
  shmem_long_put(my_global, src, 8, me);
  shmem_quiet();
  for (i = 0; i < 8; i++)
    CHECK(h[i] == 60 + me + i && my_global[i] == 60 + me + i, "put to my own PE: [%d] = %ld, %ld", i, h[i],
          my_global[i]);
  shmem_long_get(back, my_global, 8, me);
  for (i = 0; i < 8; i++) CHECK(back[i] == 60 + me + i, "get from my own PE: [%d] = %ld", i, back[i]);
  shmem_long_p(&h[9], 5, me);
  shmem_quiet();
  CHECK(shmem_long_g(&h[9], me) == 5, "p/g on my own PE");
  r = shmem_long_atomic_fetch_add(&my_global[1], 10, me);
  CHECK(r == 61 + me && my_global[1] == 71 + me, "fetch_add on my own global: %ld, %ld", r, my_global[1]);
  shmem_barrier_all();
  /* zero elements: nothing moves, nothing fails */
  h[20] = 1234;
  shmem_barrier_all();
  shmem_putmem(&h[20], src, 0, right_pe);
  shmem_long_put(&h[20], src, 0, right_pe);
  shmem_long_iput(&h[20], src, 1, 1, 0, right_pe);
  shmem_long_put_nbi(&h[20], src, 0, right_pe);
  shmem_getmem(back, &h[20], 0, right_pe);
  shmem_long_get_nbi(back, &h[20], 0, right_pe);
  shmem_quiet();
  shmem_barrier_all();
  CHECK(h[20] == 1234, "a zero-length put changed the target: %ld", h[20]);
  memset(my_global, 0, sizeof my_global);
  shmem_barrier_all();
}

/* The OpenSHMEM conformance suite: setup (PE numbers, version, accessibility,
 * shmem_ptr), the symmetric heap's calls, and global and static variables. */
#include "conformance.h"

/* ------------------------------------------------------- global and static data */

long my_global[8];                                /* .bss, external linkage (conformance.h) */
int my_global_init[8] = {1, 2, 3, 4, 5, 6, 7, 8}; /* .data, external linkage */
static double static_arr[32];                     /* .bss, internal linkage */
static uint64_t static_init[4] = {11, 22, 33, 44};
static long static_counter;

/* ----------------------------------------------------------------- sections */

void test_setup(const char *mode) {
  int major = -1, minor = -1, pe, provided = -1;
  char name[SHMEM_MAX_NAME_LEN];
  long on_stack = 0;
  char *priv;
  long *heap = (long *)pool_a;

  section("setup");
  CHECK(npes >= 2, "this suite needs at least 2 PEs, got %d", npes);
  CHECK(me >= 0 && me < npes, "shmem_my_pe() = %d, shmem_n_pes() = %d", me, npes);
  CHECK(_my_pe() == me, "_my_pe() = %d, shmem_my_pe() = %d", _my_pe(), me);
  CHECK(_num_pes() == npes, "_num_pes() = %d, shmem_n_pes() = %d", _num_pes(), npes);
  shmem_query_thread(&provided);
  CHECK(provided >= SHMEM_THREAD_SINGLE && provided <= SHMEM_THREAD_MULTIPLE, "shmem_query_thread: %d", provided);
  if (strcmp(mode, "init_thread") == 0) {
    CHECK(provided == SHMEM_THREAD_MULTIPLE, "shmem_query_thread after init_thread(MULTIPLE): %d", provided);
  }

  shmem_info_get_version(&major, &minor);
  CHECK(major == SHMEM_MAJOR_VERSION && minor == SHMEM_MINOR_VERSION, "shmem_info_get_version: %d.%d", major, minor);
  CHECK(major == 1 && minor == 5, "shmem_info_get_version: %d.%d", major, minor);
  CHECK(_SHMEM_MAJOR_VERSION == 1 && _SHMEM_MINOR_VERSION == 5, "the _SHMEM_ version constants");
  memset(name, 'x', sizeof name);
  shmem_info_get_name(name);
  CHECK(memchr(name, '\0', sizeof name) != NULL, "shmem_info_get_name: no terminator in SHMEM_MAX_NAME_LEN bytes");
  CHECK(strlen(name) > 0 && strcmp(name, SHMEM_VENDOR_STRING) == 0,
        "shmem_info_get_name: '%s', SHMEM_VENDOR_STRING '%s'", name, SHMEM_VENDOR_STRING);

  for (pe = 0; pe < npes; pe++) CHECK(shmem_pe_accessible(pe) == 1, "shmem_pe_accessible(%d)", pe);
  CHECK(shmem_pe_accessible(-1) == 0, "shmem_pe_accessible(-1) = %d", shmem_pe_accessible(-1));
  CHECK(shmem_pe_accessible(npes) == 0, "shmem_pe_accessible(n_pes) = %d", shmem_pe_accessible(npes));

  for (pe = 0; pe < npes; pe++) {
    CHECK(shmem_addr_accessible(my_global, pe) == 1, "shmem_addr_accessible(my_global (.bss), %d)", pe);
    CHECK(shmem_addr_accessible(&my_global_init[3], pe) == 1, "shmem_addr_accessible(&my_global_init[3], %d)", pe);
    CHECK(shmem_addr_accessible(static_arr, pe) == 1, "shmem_addr_accessible(static_arr, %d)", pe);
    CHECK(shmem_addr_accessible(pool_a + 100, pe) == 1, "shmem_addr_accessible(shmem_malloc block + 100, %d)", pe);
  }
  CHECK(shmem_addr_accessible(&on_stack, right_pe) == 0, "shmem_addr_accessible(stack address %p, %d)",
        (void *)&on_stack, right_pe);
  priv = (char *)malloc(64);
  CHECK(priv != NULL, "malloc");
  CHECK(shmem_addr_accessible(priv, right_pe) == 0, "shmem_addr_accessible(libc malloc %p, %d)", (void *)priv,
        right_pe);
  free(priv);

  /* shmem_ptr: the address itself on my own PE; NULL or a pointer that reaches the peer's object. */
  heap[0] = 1000 + me;
  my_global[0] = 2000 + me;
  shmem_barrier_all();
  CHECK(shmem_ptr(heap, me) == (void *)heap, "shmem_ptr(heap, my_pe) = %p, want %p", shmem_ptr(heap, me), (void *)heap);
  CHECK(shmem_ptr(my_global, me) == (void *)my_global, "shmem_ptr(my_global, my_pe)");
  CHECK(shmem_ptr(&static_init[2], me) == (void *)&static_init[2], "shmem_ptr(&static_init[2], my_pe)");
  /* SHMEM_CONFORMANCE_MAPPED=1 (set where every PE is on this host and
   * promotion is on): every peer's heap and globals must be mapped here, so
   * that loads, stores and the CPU's atomics reach them. */
  const char *mapped = getenv("SHMEM_CONFORMANCE_MAPPED");
  for (pe = 0; pe < npes; pe++) {
    long *p = (long *)shmem_ptr(heap, pe);
    long *g = (long *)shmem_ptr(my_global, pe);
    if (mapped != NULL && strcmp(mapped, "1") == 0) {
      CHECK(p != NULL, "shmem_ptr(heap, %d) is NULL, though every PE is mapped here", pe);
      CHECK(g != NULL, "shmem_ptr(my_global, %d) is NULL: the globals are not mapped here (not promoted?)", pe);
    }
    if (p != NULL) CHECK(*p == 1000 + pe, "*shmem_ptr(heap, %d) = %ld, want %d", pe, *p, 1000 + pe);
    if (g != NULL) CHECK(*g == 2000 + pe, "*shmem_ptr(my_global, %d) = %ld, want %d", pe, *g, 2000 + pe);
  }
  shmem_barrier_all();
  my_global[0] = 0;
}

void test_memory(void) {
  long *a, *r, *h, *s, tmp[100];
  int *c, i, k;
  double *al, dv[24];
  char *big, bytes[16];
  void *blocks[12];

  section("memory: shmem_malloc, calloc, align, realloc, free");
  a = (long *)shmem_malloc(100 * sizeof(long));
  CHECK(a != NULL, "shmem_malloc(800)");
  CHECK((uintptr_t)a % _Alignof(max_align_t) == 0, "shmem_malloc: %p not aligned to %zu", (void *)a,
        _Alignof(max_align_t));
  for (i = 0; i < 100; i++) a[i] = me * 1000 + i;
  shmem_barrier_all();
  shmem_long_get(tmp, a, 100, right_pe);
  for (i = 0; i < 100; i++) CHECK(tmp[i] == right_pe * 1000 + i, "get from shmem_malloc block: [%d] = %ld", i, tmp[i]);

  c = (int *)shmem_calloc(50, sizeof(int));
  CHECK(c != NULL, "shmem_calloc(50, 4)");
  for (i = 0; i < 50; i++) CHECK(c[i] == 0, "shmem_calloc: [%d] = %d", i, c[i]);
  shmem_barrier_all();
  shmem_int_p(&c[10], me + 1, right_pe);
  shmem_barrier_all();
  for (i = 0; i < 50; i++)
    CHECK(c[i] == (i == 10 ? left_pe + 1 : 0), "put into shmem_calloc block: [%d] = %d", i, c[i]);

  al = (double *)shmem_align(4096, 24 * sizeof(double));
  CHECK(al != NULL && (uintptr_t)al % 4096 == 0, "shmem_align(4096) = %p", (void *)al);
  for (i = 0; i < 24; i++) dv[i] = me + i * 0.25;
  shmem_double_put(al, dv, 24, right_pe);
  shmem_barrier_all();
  for (i = 0; i < 24; i++) CHECK(al[i] == left_pe + i * 0.25, "put into shmem_align block: [%d] = %g", i, al[i]);

  h = (long *)shmem_malloc_with_hints(8 * sizeof(long), SHMEM_MALLOC_ATOMICS_REMOTE);
  CHECK(h != NULL, "shmem_malloc_with_hints(ATOMICS_REMOTE)");
  h[0] = 0;
  shmem_barrier_all();
  shmem_long_atomic_add(h, me + 1, 0);
  shmem_barrier_all();
  if (me == 0) CHECK(h[0] == (long)npes * (npes + 1) / 2, "atomic adds into shmem_malloc_with_hints: %ld", h[0]);
  shmem_free(h);
  h = (long *)shmem_malloc_with_hints(64, 0);
  CHECK(h != NULL, "shmem_malloc_with_hints(64, 0)");
  shmem_free(h);

  /* realloc: contents kept, the new part reachable */
  a = (long *)shmem_realloc(a, 4000 * sizeof(long));
  CHECK(a != NULL, "shmem_realloc(a, 32000)");
  for (i = 0; i < 100; i++) CHECK(a[i] == me * 1000 + i, "shmem_realloc kept [%d] = %ld", i, a[i]);
  shmem_barrier_all();
  shmem_long_p(&a[3999], 77 + me, right_pe);
  shmem_long_p(&a[50], 55 + me, right_pe);
  shmem_barrier_all();
  CHECK(a[3999] == 77 + left_pe, "put into the grown part of a reallocated block: %ld", a[3999]);
  CHECK(a[50] == 55 + left_pe, "put into a reallocated block: %ld", a[50]);
  a = (long *)shmem_realloc(a, 10 * sizeof(long));
  CHECK(a != NULL, "shmem_realloc(a, 80)");
  for (i = 0; i < 10; i++) CHECK(a[i] == me * 1000 + i, "shmem_realloc (shrunk) kept [%d] = %ld", i, a[i]);
  shmem_long_get(tmp, a, 10, left_pe);
  for (i = 0; i < 10; i++) CHECK(tmp[i] == left_pe * 1000 + i, "get from a shrunk block: [%d] = %ld", i, tmp[i]);
  shmem_barrier_all();
  r = (long *)shmem_realloc(NULL, 16 * sizeof(long));
  CHECK(r != NULL, "shmem_realloc(NULL, 128)");
  shmem_long_p(&r[15], 3 + me, right_pe);
  shmem_barrier_all();
  CHECK(r[15] == 3 + left_pe, "put into shmem_realloc(NULL) block: %ld", r[15]);

  /* zero sizes and NULL */
  CHECK(shmem_malloc(0) == NULL, "shmem_malloc(0) is not NULL");
  CHECK(shmem_calloc(0, 8) == NULL, "shmem_calloc(0, 8) is not NULL");
  CHECK(shmem_calloc(8, 0) == NULL, "shmem_calloc(8, 0) is not NULL");
  shmem_free(NULL);

  /* many blocks, disjoint, freed out of order */
  for (k = 0; k < 12; k++) {
    blocks[k] = shmem_malloc((size_t)(k * 1000 + 8));
    CHECK(blocks[k] != NULL, "shmem_malloc(%d)", k * 1000 + 8);
    memset(blocks[k], k, (size_t)(k * 1000 + 8));
  }
  shmem_barrier_all();
  for (k = 0; k < 12; k++) {
    long v = 100 * k + me;
    shmem_putmem((char *)blocks[k] + k * 1000, &v, sizeof v, right_pe);
  }
  shmem_barrier_all();
  for (k = 0; k < 12; k++) {
    long v;
    const unsigned char *b = (const unsigned char *)blocks[k];
    memcpy(&v, b + k * 1000, sizeof v);
    CHECK(v == 100 * k + left_pe, "block %d: %ld", k, v);
    for (i = 0; i < k * 1000; i++) {
      if (b[i] != k) CHECK(b[i] == k, "block %d overwritten at %d: %d", k, i, b[i]);
    }
  }
  for (k = 0; k < 12; k += 2) shmem_free(blocks[k]);
  for (k = 1; k < 12; k += 2) shmem_free(blocks[k]);

  /* a large block */
  big = (char *)shmem_malloc(8 << 20);
  CHECK(big != NULL, "shmem_malloc(8 MiB)");
  memset(bytes, 'a' + me, sizeof bytes);
  shmem_putmem(big + (8 << 20) - 16, bytes, 16, right_pe);
  shmem_barrier_all();
  for (i = 0; i < 16; i++)
    CHECK(big[(8 << 20) - 16 + i] == 'a' + left_pe, "end of an 8 MiB block: [%d] = %d", i, big[(8 << 20) - 16 + i]);
  shmem_free(big);

  /* the names before 1.2 */
  s = (long *)shmalloc(64 * sizeof(long));
  CHECK(s != NULL, "shmalloc");
  s[0] = 5;
  shmem_long_p(&s[63], 9 + me, right_pe);
  shmem_barrier_all();
  CHECK(s[63] == 9 + left_pe, "put into a shmalloc block: %ld", s[63]);
  s = (long *)shrealloc(s, 128 * sizeof(long));
  CHECK(s != NULL && s[0] == 5 && s[63] == 9 + left_pe, "shrealloc kept the contents");
  shfree(s);
  s = (long *)shmemalign(256, 32);
  CHECK(s != NULL && (uintptr_t)s % 256 == 0, "shmemalign(256) = %p", (void *)s);
  shfree(s);

  shmem_free(r);
  shmem_free(al);
  shmem_free(c);
  shmem_free(a);
}

void test_globals(void) {
  static long local_static[4]; /* a function's static: symmetric too */
  long v[8];
  double d[32];
  int i, pe;
  uint64_t g;

  section("global and static variables");
  CHECK(my_global_init[3] == 4, "initialised global: %d", my_global_init[3]);
  for (i = 0; i < 32; i++) static_arr[i] = me * 100 + i + 0.5;
  for (i = 0; i < 8; i++) v[i] = me * 10 + i;
  shmem_barrier_all();
  shmem_long_put(my_global, v, 8, right_pe);
  shmem_int_p(&my_global_init[2], 100 + me, right_pe);
  shmem_long_p(&local_static[1], me + 7, right_pe);
  shmem_long_atomic_inc(&static_counter, 0);
  shmem_double_get(d, static_arr, 32, left_pe);
  for (i = 0; i < 32; i++) CHECK(d[i] == left_pe * 100 + i + 0.5, "get from static_arr: [%d] = %g", i, d[i]);
  g = shmem_uint64_g(&static_init[1], right_pe);
  CHECK(g == 22, "shmem_uint64_g(&static_init[1]) = %llu", (unsigned long long)g);
  shmem_barrier_all();
  for (i = 0; i < 8; i++) CHECK(my_global[i] == left_pe * 10 + i, "put into my_global: [%d] = %ld", i, my_global[i]);
  for (i = 0; i < 8; i++)
    CHECK(my_global_init[i] == (i == 2 ? 100 + left_pe : i + 1), "put into my_global_init: [%d] = %d", i,
          my_global_init[i]);
  CHECK(local_static[1] == left_pe + 7 && local_static[0] == 0, "put into a function's static: %ld", local_static[1]);
  if (me == 0) CHECK(static_counter == npes, "atomic incs into a static: %ld", static_counter);
  for (pe = 0; pe < npes; pe++) {
    double x = shmem_double_g(&static_arr[5], pe);
    CHECK(x == pe * 100 + 5.5, "shmem_double_g(&static_arr[5], %d) = %g", pe, x);
  }
  shmem_barrier_all();
  memset(my_global, 0, sizeof my_global);
}

/* The OpenSHMEM conformance suite of hixl's front door (include/hixl/shmem/shmem.h).
 *
 * One C11 program written to the OpenSHMEM 1.5 standard (conformance.h and
 * conformance_*.c; this file holds main, the checks' counting and the
 * summary): it includes only <shmem.h> and the C library, and checks every
 * call family of the header at any number of PEs >= 2 (the expected values
 * depend on n).  Each section starts with shmem_barrier_all, so a failure
 * points at one section.  A failed CHECK prints file:line, the PE, the
 * section and what failed, then ends the job with shmem_global_exit(1).  PE 0 prints
 * "shmem conformance: N checks passed" at the end (N summed over the PEs).
 *
 * Usage: [SHMEM_CONFORMANCE_VERBOSE=1] conformance [init | start_pes | init_thread]
 *   init         shmem_init ... shmem_finalize (the default)
 *   start_pes    start_pes(0), and no shmem_finalize: the library finalizes at exit
 *   init_thread  shmem_init_thread(SHMEM_THREAD_MULTIPLE) ... shmem_finalize */
#include "conformance.h"

/* ------------------------------------------------------------------ checks */

unsigned char *pool_a, *pool_b, *pool_w;

/* ------------------------------------------------------------------- main */

static void run_all(const char *mode);

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "init";
  int provided = -1;

  if (strcmp(mode, "init") == 0) {
    shmem_init();
  } else if (strcmp(mode, "start_pes") == 0) {
    start_pes(0);
  } else if (strcmp(mode, "back_to_back") == 0) {
    shmem_init();
  } else if (strcmp(mode, "init_thread") == 0) {
    if (shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided) != 0) {
      fprintf(stderr, "shmem_init_thread(SHMEM_THREAD_MULTIPLE) failed\n");
      return 1;
    }
  } else {
    fprintf(stderr, "usage: %s [init | start_pes | init_thread | back_to_back]\n", argv[0]);
    return 2;
  }
  checks_start();
  if (strcmp(mode, "init_thread") == 0)
    CHECK(provided >= SHMEM_THREAD_SINGLE && provided <= SHMEM_THREAD_MULTIPLE, "init_thread provided %d", provided);

  pool_a = (unsigned char *)shmem_malloc(POOL_BYTES);
  pool_b = (unsigned char *)shmem_malloc(POOL_BYTES);
  pool_w = (unsigned char *)shmem_malloc(POOL_BYTES);
  CHECK(pool_a != NULL && pool_b != NULL && pool_w != NULL, "shmem_malloc(1 MiB) x 3");
  psync_init();

  if (strcmp(mode, "back_to_back") == 0) {
    /* Only the collectives called again and again, at more PEs than the
     * whole suite runs at (a race needs three: one slow, one ahead). */
    test_back_to_back_collectives(3000);
  } else {
    run_all(mode);
  }

  section("the end");
  shmem_free(pool_w);
  shmem_free(pool_b);
  shmem_free(pool_a);
  checks_report("shmem conformance", mode);
  if (strcmp(mode, "start_pes") != 0) shmem_finalize();
  return 0;
}

static void run_all(const char *mode) {
  test_setup(mode);
  test_memory();
  test_globals();
  test_rma();
  test_self_and_empty();
  test_fence_quiet();
  test_p2p();
  test_atomics();
  test_locks();
  test_contexts();
  test_teams();
  collectives_on(SHMEM_TEAM_WORLD, "world");
  test_large_collectives();
  test_back_to_back_collectives(100);
  collectives_on(team_even, "even (split_strided 0, 2)");
  collectives_on(team_x, "x (split_2d)");
  collectives_on(team_y, "y (split_2d)");
  section("team_destroy");
  if (team_even != SHMEM_TEAM_INVALID) shmem_team_destroy(team_even);
  shmem_team_destroy(team_x);
  shmem_team_destroy(team_y);
  legacy_on(aset_make(0, 0, npes), "all PEs");
  legacy_on(me % 2 == 0 ? aset_make(0, 1, (npes + 1) / 2) : aset_make(1, 1, npes / 2), "even and odd PEs");
  legacy_on(aset_make(1, 0, npes - 1), "PEs 1..n-1");
  test_static_collectives();
  test_barrier_all();
}

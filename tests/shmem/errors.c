/* Bad input to hixl's OpenSHMEM front door must end the job, with a message
 * on stderr that names the PE and the address (include/hixl/shmem/shmem.h:
 * "hixl prints what was wrong, naming the call, the PE and the address, and
 * ends the job as shmem_global_exit(1) does").  tests/shmem/errors_test.sh
 * runs each mode under hixlrun and checks the exit status and the message.
 *
 * Usage: errors MODE, MODE one of
 *   put-stack      PE 0 puts into a stack (non-symmetric) address on PE 1
 *   put-nbi-stack  the same with shmem_putmem_nbi + shmem_quiet
 *   get-stack      PE 0 gets from a stack address on PE 1
 *   amo-stack      PE 0 adds atomically to a stack address on PE 1
 *   bad-pe         PE 0 puts to PE n_pes (outside the world)
 *   global-exit    PE n-1 calls shmem_global_exit(7) while the others wait in a barrier
 * Each mode prints "errors: MODE: ... ADDRESS on PE N" on stdout first; every
 * other PE waits in shmem_barrier_all, which the failure must end. */
#include <shmem.h>

#include <stdio.h>
#include <string.h>

static long sym[4];

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  volatile long on_stack[4] = {0, 0, 0, 0};
  long src[4] = {1, 2, 3, 4}, dst[4];
  int me, npes;

  shmem_init();
  me = shmem_my_pe();
  npes = shmem_n_pes();
  if (npes < 2) {
    fprintf(stderr, "errors: needs at least 2 PEs\n");
    shmem_global_exit(2);
  }
  shmem_barrier_all();
  if (strcmp(mode, "put-stack") == 0) {
    if (me == 0) {
      printf("errors: put-stack: PE 0 puts 32 bytes to %p on PE 1\n", (void *)on_stack);
      fflush(stdout);
      shmem_long_put((long *)on_stack, src, 4, 1);
      shmem_quiet();
    }
  } else if (strcmp(mode, "put-nbi-stack") == 0) {
    if (me == 0) {
      printf("errors: put-nbi-stack: PE 0 puts 32 bytes to %p on PE 1\n", (void *)on_stack);
      fflush(stdout);
      shmem_putmem_nbi((void *)on_stack, src, sizeof src, 1);
      shmem_quiet();
    }
  } else if (strcmp(mode, "get-stack") == 0) {
    if (me == 0) {
      printf("errors: get-stack: PE 0 gets 32 bytes from %p on PE 1\n", (void *)on_stack);
      fflush(stdout);
      shmem_long_get(dst, (const long *)on_stack, 4, 1);
      printf("errors: get-stack: got %ld\n", dst[0]);
    }
  } else if (strcmp(mode, "amo-stack") == 0) {
    if (me == 0) {
      printf("errors: amo-stack: PE 0 adds to %p on PE 1\n", (void *)on_stack);
      fflush(stdout);
      shmem_long_atomic_add((long *)on_stack, 1, 1);
      shmem_quiet();
    }
  } else if (strcmp(mode, "bad-pe") == 0) {
    if (me == 0) {
      printf("errors: bad-pe: PE 0 puts to %p on PE %d\n", (void *)sym, npes);
      fflush(stdout);
      shmem_long_p(sym, 1, npes);
      shmem_quiet();
    }
  } else if (strcmp(mode, "global-exit") == 0) {
    if (me == npes - 1) {
      printf("errors: global-exit: PE %d calls shmem_global_exit(7)\n", me);
      fflush(stdout);
      shmem_global_exit(7);
    }
  } else {
    fprintf(stderr, "usage: %s put-stack|put-nbi-stack|get-stack|amo-stack|bad-pe|global-exit\n", argv[0]);
    shmem_global_exit(2);
  }
  /* the bad call must not return normally: every PE waits here until the job ends */
  shmem_barrier_all();
  fprintf(stderr, "errors: PE %d: mode %s: the job went on after the bad call\n", me, mode);
  shmem_finalize();
  return 0;
}

/* The check machinery of hixl's OpenSHMEM test programs (check.h). */
#include "check.h"

#include <shmem.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int me = -1, npes = 0, right_pe = 0, left_pe = 0;
const char *section_name = "init";
long n_checks;            /* symmetric: summed over the PEs at the end */
static long total_checks; /* symmetric: the sum */

void fail(const char *file, int line, const char *expr, const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "%s:%d: PE %d of %d: section '%s': CHECK(%s) failed: ", file, line, me, npes, section_name, expr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  shmem_global_exit(1);
  exit(1); /* not reached: shmem_global_exit does not return */
}

void checks_start(void) {
  me = shmem_my_pe();
  npes = shmem_n_pes();
  right_pe = (me + 1) % npes;
  left_pe = (me - 1 + npes) % npes;
}

void section(const char *name) {
  static int verbose = -1;
  shmem_barrier_all();
  section_name = name;
  if (verbose < 0) verbose = getenv("SHMEM_CONFORMANCE_VERBOSE") != NULL;
  if (verbose) {
    fprintf(stderr, "PE %d: section '%s'\n", me, name);
    fflush(stderr);
  }
}

void checks_report(const char *what, const char *detail) {
  if (shmem_long_sum_reduce(SHMEM_TEAM_WORLD, &total_checks, &n_checks, 1) != 0) {
    fprintf(stderr, "PE %d: the final sum_reduce failed\n", me);
    shmem_global_exit(1);
  }
  if (me == 0) {
    printf("%s: %ld checks passed (%d PEs%s%s)\n", what, total_checks, npes, detail ? ", " : "", detail ? detail : "");
    fflush(stdout);
  }
}

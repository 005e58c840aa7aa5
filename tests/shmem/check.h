/* What hixl's OpenSHMEM test programs share (conformance*.c, generic.c):
 * this PE's place in the world, the count of checks, and the report of a
 * failed one (file:line, the PE, the section, what failed), which ends the
 * job with shmem_global_exit(1). */
#ifndef HIXL_TESTS_SHMEM_CHECK_H
#define HIXL_TESTS_SHMEM_CHECK_H

extern int me, npes, right_pe, left_pe;
extern const char *section_name;
extern long n_checks; /* symmetric: summed over the PEs at the end */

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
void fail(const char *file, int line, const char *expr, const char *fmt, ...);

#define CHECK(cond, ...)                                       \
  do {                                                         \
    ++n_checks;                                                \
    if (!(cond)) fail(__FILE__, __LINE__, #cond, __VA_ARGS__); \
  } while (0)

/* After shmem_init: sets me, npes, right_pe and left_pe. */
void checks_start(void);

/* Every section starts with a barrier, so that a failure points at one
 * (SHMEM_CONFORMANCE_VERBOSE set: each section is named on stderr). */
void section(const char *name);

/* Sums the checks of every PE; PE 0 prints "WHAT: N checks passed (DETAIL)".
 * Collective over the world. */
void checks_report(const char *what, const char *detail);

#endif

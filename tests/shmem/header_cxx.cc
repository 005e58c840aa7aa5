// <shmem.h> in C++: the typed calls are declared with C linkage, and the
// C11 generic names (C only: shmem_generic.h) are not macros here.
#include <shmem.h>

#if defined(shmem_put) || defined(shmem_g) || defined(shmem_atomic_fetch) || defined(shmem_wait_until) || \
    defined(shmem_sum_reduce) || defined(shmem_swap) || defined(HIXL_SHMEM_SHMEM_GENERIC_H_)
#error "shmem.h defines the C11 generic names in C++"
#endif

// The names the generic macros would take stay the functions they are.
[[maybe_unused]] static void (*const wait_until)(long *, int, long) = shmem_wait_until;
[[maybe_unused]] static long (*const swap)(long *, long, int) = shmem_swap;
[[maybe_unused]] static int (*const sum_reduce)(shmem_team_t, long *, const long *, size_t) = shmem_long_sum_reduce;

/* The OpenSHMEM conformance suite of hixl's front door: what its files share.
 *
 * conformance_main.c holds main (check.h the CHECK machinery); each other
 * conformance_*.c file holds the sections of one area.  Symmetric data that
 * the checks use as remote targets lives in the file that uses it: every PE
 * runs the same program, so a global or static there is symmetric. */
#ifndef HIXL_TESTS_SHMEM_CONFORMANCE_H
#define HIXL_TESTS_SHMEM_CONFORMANCE_H

#include <shmem.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ checks */

#include "check.h"

/* A value that PE `src` writes at index i: small, positive, exact in every type. */
#define VAL(T, src, i) ((T)((((src)*31) + ((i)*7) + 1) % 101))
#define NR 16

/* Symmetric scratch, allocated once in main (shmem_malloc is collective over
 * the world, so the team sections, where only members call, use these). */
#define POOL_BYTES (1 << 20)
extern unsigned char *pool_a, *pool_b, *pool_w;

extern long my_global[8]; /* .bss, external linkage (conformance_setup.c) */

/* ------------------------------------------------------------ the type tables */

/* The types of the RMA calls and of the team collectives; each area's other
 * tables are in its own file. */
/* clang-format off */
#define RMA_TYPES(X) \
  X(float, float) \
  X(double, double) \
  X(long double, longdouble) \
  X(char, char) \
  X(signed char, schar) \
  X(short, short) \
  X(int, int) \
  X(long, long) \
  X(long long, longlong) \
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
  X(size_t, size) \
  X(ptrdiff_t, ptrdiff)
/* clang-format on */

/* ------------------------------------- collectives: team and legacy forms */

#define SENT(T) ((T)111) /* no VAL is 111 */

/* Peers may write into my dest as soon as they enter a collective: every
 * collective below starts after a sync that follows the local set-up. */
#define TSYNC(team) CHECK(shmem_team_sync(team) == 0, "shmem_team_sync")

/* Reductions (team and legacy): the inputs of team PE i at index k, and the
 * operators that combine them. */
#define NRED 8
#define BIT_INIT(T, i, k) ((T)((((i)*37 + (k)*11) ^ ((i) << ((k) % 5))) & 0x7f))
#define MM_U_INIT(T, i, k) ((T)(((i)*7 + (k)*3) % 11))
#define MM_S_INIT(T, i, k) ((T)(((i)*7 + (k)*3) % 11 - 5))
#define SUM_INIT(T, i, k) ((T)((T)((i) + (k) + 1) + (T)0.5))
#define PROD_INIT(T, i, k) ((T)(((i) + (k)) % 3 == 0 ? 2 : 1))
#define PROD_S_INIT(T, i, k) ((T)(((i) + (k)) % 3 == 0 ? 2 : ((i) + (k)) % 3 == 1 ? -1 : 1))
#define OP_AND(a, b) ((a) & (b))
#define OP_OR(a, b) ((a) | (b))
#define OP_XOR(a, b) ((a) ^ (b))
#define OP_MIN(a, b) ((b) < (a) ? (b) : (a))
#define OP_MAX(a, b) ((b) > (a) ? (b) : (a))
#define OP_SUM(a, b) ((a) + (b))
#define OP_PROD(a, b) ((a) * (b))

/* An active set of the legacy collectives: PE_start, logPE_stride, PE_size;
 * my index in it, or -1 (conformance_legacy.c). */
typedef struct {
  int start, log, size, idx;
} aset_t;
aset_t aset_make(int start, int log, int size);

/* The teams that test_teams makes and main destroys (conformance_teams.c). */
extern shmem_team_t team_even, team_x, team_y;

/* ----------------------------------------------------------------- sections */

/* conformance_setup.c */
void test_setup(const char *mode);
void test_memory(void);
void test_globals(void);
/* conformance_rma.c */
void test_rma(void);
void test_self_and_empty(void);
/* conformance_sync.c */
void test_fence_quiet(void);
void test_p2p(void);
void test_locks(void);
void test_barrier_all(void);
/* conformance_atomics.c */
void test_atomics(void);
/* conformance_teams.c */
void test_contexts(void);
void test_teams(void);
/* conformance_collectives.c */
void collectives_on(shmem_team_t team, const char *name);
void test_large_collectives(void);
void test_back_to_back_collectives(int calls);
/* conformance_legacy.c */
void psync_init(void);
void legacy_on(aset_t a, const char *name);
void test_static_collectives(void);

#endif /* HIXL_TESTS_SHMEM_CONFORMANCE_H */

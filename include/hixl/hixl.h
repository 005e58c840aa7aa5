/* hixl: one-sided put/get between processes.  The C API.
 *
 * Every int result is HIXL_SUCCESS (0) or a negative HIXL_ERR_* code; on
 * failure hixl_last_error() returns the calling thread's explanation.
 * After hixl_init every call is safe from any thread.  See README.md. */
#ifndef HIXL_HIXL_H_
#define HIXL_HIXL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HIXL_SUCCESS 0
#define HIXL_ERR_INVALID_ARG (-1)       /* null pointer, overflowing range, bad value */
#define HIXL_ERR_NOT_INITIALIZED (-2)   /* called before hixl_init or after hixl_finalize */
#define HIXL_ERR_NOT_REGISTERED (-3)    /* remote range not inside one registered region */
#define HIXL_ERR_INVALID_RANK (-4)      /* rank outside [0, world size) */
#define HIXL_ERR_TIMEOUT (-5)           /* a wait exceeded HIXL_TIMEOUT_MS */
#define HIXL_ERR_PEER_FAILED (-6)       /* a peer process died or left */
#define HIXL_ERR_NO_MEMORY (-7)         /* allocation or mapping failed */
#define HIXL_ERR_TRANSPORT (-8)         /* the transport failed (system error) */
#define HIXL_ERR_UNSUPPORTED (-9)       /* not available in this build or setting */
#define HIXL_ERR_ALREADY_INITIALIZED (-10) /* hixl_init called twice */
#define HIXL_ERR_BOOTSTRAP (-11)        /* environment or rendezvous problem */
#define HIXL_ERR_INTERNAL (-12)         /* a bug in hixl: please report it */

/* Joins the world described by the environment (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT, or Open MPI / PMI / Slurm variables).  Without
 * any of them the process is a world of one.  Collective. */
int hixl_init(void);
/* Collective: fences, waits for every rank, releases everything. */
int hixl_finalize(void);
/* This process's rank / the number of ranks; a negative code before init. */
int hixl_rank(void);
int hixl_world_size(void);

/* Symmetric memory: when every rank allocates the same sizes in the same
 * order, the returned pointer value addresses the same block on every rank.
 * Not collective.  NULL on failure (see hixl_last_error). 64-byte aligned. */
void *hixl_alloc(size_t size);
int hixl_free(void *ptr);

/* Makes [addr, addr+size) of this process reachable by peers.  Registering
 * the exact same range again counts a reference; a range that partly
 * overlaps a registered one is refused. */
int hixl_register_memory(void *addr, size_t size);
/* Drops one reference of the region that starts at addr.  When this returns,
 * no peer can access the region any more. */
int hixl_deregister_memory(void *addr);

/* Start a transfer; it may complete after the call returns.  The remote
 * range must lie inside one region registered (or allocated) on that rank.
 * The local buffer must not be touched until hixl_fence returns. */
int hixl_put(int dst_rank, const void *src_addr, uint64_t dst_addr, size_t size);
int hixl_get(int src_rank, uint64_t src_addr, void *dst_addr, size_t size);
/* Completes every transfer started by any thread of this process. */
int hixl_fence(void);
/* Collective; implies hixl_fence on every rank. */
int hixl_barrier(void);
/* Collective: recv receives bytes_per_rank bytes from each rank, in rank
 * order (recv holds world_size * bytes_per_rank bytes). */
int hixl_allgather(const void *send, void *recv, size_t bytes_per_rank);

/* The name of an error code ("HIXL_ERR_TIMEOUT: ..."); never NULL. */
const char *hixl_strerror(int err);
/* The calling thread's last failure in words ("" if none). */
const char *hixl_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* HIXL_HIXL_H_ */

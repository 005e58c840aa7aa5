/* hixl: one-sided put/get between processes.  The C API.
 *
 * Every int result is HIXL_SUCCESS (0) or a negative HIXL_ERR_* code; on
 * failure hixl_last_error() returns the calling thread's explanation.
 * After hixl_init every call is safe from any thread.  See README.md. */
#ifndef HIXL_HIXL_H_
#define HIXL_HIXL_H_

#include <stddef.h>
#include <stdint.h>

#include <hixl/hixl_errors.h> /* HIXL_ERROR_CODES: the one table the codes below follow */
/* Everything declared below is libhixl's exported API: the library is built
 * with hidden visibility, and only the public headers' declarations are
 * exported (nm -D libhixl.so lists no internal symbol). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* Conventions of every declaration below.
 * Threads: after hixl_init, every call is safe from any thread; hixl_init
 *   and hixl_finalize are called once per process, with no other hixl call
 *   running.
 * Blocking: a call returns without waiting for other processes unless its
 *   comment says it blocks; every wait is bounded by HIXL_TIMEOUT_MS
 *   (HIXL_ERR_TIMEOUT) or by the timeout it takes.
 * Ownership: hixl never frees or keeps the caller's pointers beyond the
 *   call, except memory registered until it is deregistered and transfer
 *   buffers until hixl_fence.  Strings hixl returns are hixl's: never free
 *   them (hixl_strerror's are static; hixl_last_error's stays valid until
 *   the calling thread's next hixl call). */

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: the rows of HIXL_ERROR_CODES (hixl_errors.h), written out as
 * literals so that #if and switch work; the build checks they equal it. */
#define HIXL_SUCCESS 0
#define HIXL_ERR_INVALID_ARG (-1)          /* null pointer, overflowing range, bad value */
#define HIXL_ERR_NOT_INITIALIZED (-2)      /* called before hixl_init or after hixl_finalize */
#define HIXL_ERR_NOT_REGISTERED (-3)       /* remote range not inside one registered region */
#define HIXL_ERR_INVALID_RANK (-4)         /* rank outside [0, world size) */
#define HIXL_ERR_TIMEOUT (-5)              /* a wait exceeded HIXL_TIMEOUT_MS */
#define HIXL_ERR_PEER_FAILED (-6)          /* a peer process died or left */
#define HIXL_ERR_NO_MEMORY (-7)            /* allocation or mapping failed */
#define HIXL_ERR_TRANSPORT (-8)            /* the transport failed (system error) */
#define HIXL_ERR_UNSUPPORTED (-9)          /* not available in this build or setting */
#define HIXL_ERR_ALREADY_INITIALIZED (-10) /* hixl_init called twice */
#define HIXL_ERR_BOOTSTRAP (-11)           /* environment or rendezvous problem */
#define HIXL_ERR_INTERNAL (-12)            /* a bug in hixl: please report it */
#define HIXL_ERR_QUEUE_FULL (-13)          /* the target's notification queue is full: retry later */
#define HIXL_ERR_NOT_CONNECTED (-14)       /* engine API: no live connection to that engine */
#define HIXL_ERR_ALREADY_CONNECTED (-15)   /* engine API: Connect to an engine already connected */

/* Joins the world described by the environment (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT, or Open MPI / PMI / Slurm variables).  Without
 * any of them the process is a world of one.  Collective: blocks until
 * every rank has joined and reaches every other. */
int hixl_init(void);
/* Collective: fences, blocks until every rank has called it, releases
 * everything (hixl_alloc'd memory included).  No other thread may be in a
 * hixl call. */
int hixl_finalize(void);
/* This process's rank / the number of ranks; a negative code before init.
 * Do not block. */
int hixl_rank(void);
int hixl_world_size(void);
/* The name of the transport that reaches `rank` from this process: "shm"
 * (same host; also this rank itself) or "ucx" (another host), as hixl_init
 * chose it (HIXL_TRANSPORT).  NULL on failure: HIXL_ERR_NOT_INITIALIZED or
 * HIXL_ERR_INVALID_RANK, see hixl_last_error.  Does not block; thread-safe.
 * The string belongs to hixl and stays valid until the process exits. */
const char *hixl_peer_transport(int rank);

/* Symmetric memory: when every rank allocates the same sizes in the same
 * order, the returned pointer value addresses the same block on every rank.
 * Not collective: does not wait for other ranks.  NULL on failure (see
 * hixl_last_error).  64-byte aligned.  The block belongs to hixl: release it
 * with hixl_free (hixl_finalize releases what is left). */
void *hixl_alloc(size_t size);
/* Releases a block of hixl_alloc (NULL is a no-op).  Blocks until every peer
 * that may access the block has forgotten it. */
int hixl_free(void *ptr);

/* Makes [addr, addr+size) of this process reachable by peers.  Registering
 * the exact same range again counts a reference; a range that partly
 * overlaps a registered one is refused.  The memory stays the caller's: it
 * must stay mapped until deregistered.  Does not wait for peers. */
int hixl_register_memory(void *addr, size_t size);
/* Drops one reference of the region that starts at addr.  When this returns,
 * no peer can access the region any more: dropping the last reference blocks
 * until every peer that may access it has forgotten it. */
int hixl_deregister_memory(void *addr);

/* Start a transfer; it may complete after the call returns.  The remote
 * range must lie inside one region registered (or allocated) on that rank.
 * The local buffer must not be touched until hixl_fence returns.  Neither
 * waits for the transfer to complete (either may copy the data, or wait for
 * room in the transport's queue, before returning). */
int hixl_put(int dst_rank, const void *src_addr, uint64_t dst_addr, size_t size);
int hixl_get(int src_rank, uint64_t src_addr, void *dst_addr, size_t size);
/* Completes every transfer started by any thread of this process: blocks
 * until each is done or has failed (the failure is returned here). */
int hixl_fence(void);
/* Collective: blocks until every rank has called it; implies hixl_fence on
 * every rank. */
int hixl_barrier(void);
/* Collective, blocks until every rank has called it: recv receives
 * bytes_per_rank bytes from each rank, in rank order (recv, the caller's,
 * holds world_size * bytes_per_rank bytes). */
int hixl_allgather(const void *send, void *recv, size_t bytes_per_rank);
/* Collective, blocks until every rank has called it: the size bytes at buf
 * on rank root are copied to buf on every other rank.  Every rank passes the
 * same root and size; a rank whose call does not match the root's gets
 * HIXL_ERR_INVALID_ARG, never other bytes. */
int hixl_broadcast(int root, void *buf, size_t size);

/* ---- Signals, atomics and notifications: telling a target that data
 * arrived, without asking it to take part. */

/* How hixl_put_signal updates the signal word. */
#define HIXL_SIGNAL_SET 0
#define HIXL_SIGNAL_ADD 1

/* Comparisons for hixl_wait_until / hixl_test. */
#define HIXL_CMP_EQ 0
#define HIXL_CMP_NE 1
#define HIXL_CMP_GT 2
#define HIXL_CMP_GE 3
#define HIXL_CMP_LT 4
#define HIXL_CMP_LE 5

/* Writes size bytes like hixl_put, then updates the 64-bit word at sig_addr
 * on dst_rank (SET to value, or ADD value).  Whoever sees the new signal
 * value sees the data.  sig_addr must be 8-byte aligned and registered (or
 * allocated) on dst_rank; signals in symmetric memory are fastest.  Does not
 * wait for completion, like hixl_put. */
int hixl_put_signal(int dst_rank, const void *src_addr, uint64_t dst_addr, size_t size, uint64_t sig_addr,
                    uint64_t value, int op);

/* Waits until the local 64-bit word *sig_addr compares true against value
 * (e.g. HIXL_CMP_GE): spins briefly, then sleeps.  HIXL_ERR_TIMEOUT after
 * timeout_ms (a negative timeout means HIXL_TIMEOUT_MS). */
int hixl_wait_until(const uint64_t *sig_addr, int cmp, uint64_t value, int64_t timeout_ms);
/* 1 if the comparison holds now, 0 if not, a negative code on bad input.
 * Does not block. */
int hixl_test(const uint64_t *sig_addr, int cmp, uint64_t value);

/* Atomic operations on a 64-bit word in memory that `rank` registered or
 * allocated (8-byte aligned).  Correct when several ranks hit one word at
 * once.  Each is ordered after the puts this process issued to `rank`
 * before it, and completes before it returns (blocks for a round trip to
 * `rank`).  `old` may be NULL where the old value is not wanted. */
int hixl_atomic_fetch(int rank, uint64_t addr, uint64_t *value);
int hixl_atomic_set(int rank, uint64_t addr, uint64_t value);
int hixl_atomic_add(int rank, uint64_t addr, uint64_t value);
int hixl_atomic_fetch_add(int rank, uint64_t addr, uint64_t value, uint64_t *old);
int hixl_atomic_swap(int rank, uint64_t addr, uint64_t value, uint64_t *old);
/* Stores desired if the word equals expected; *old receives the value seen. */
int hixl_atomic_compare_swap(int rank, uint64_t addr, uint64_t expected, uint64_t desired, uint64_t *old);

/* Notifications: small messages to a rank's queue, delivered after every
 * put the sender issued to that rank before them. */
#define HIXL_NOTIFY_MAX_BYTES 4096
typedef struct hixl_notification {
  int src_rank;
  uint32_t len;
  unsigned char data[HIXL_NOTIFY_MAX_BYTES];
} hixl_notification_t;
/* Delivers len <= HIXL_NOTIFY_MAX_BYTES bytes to dst_rank's queue; blocks
 * until this process's puts to dst_rank are complete and the message is queued there.
 * HIXL_ERR_QUEUE_FULL when the queue holds HIXL_NOTIFY_QUEUE_DEPTH
 * messages already (nothing is dropped: retry later). */
int hixl_notify(int dst_rank, const void *bytes, size_t len);
/* Takes up to max queued notifications without waiting; *count says how
 * many.  out is the caller's array of max entries. */
int hixl_get_notifications(hixl_notification_t *out, int max, int *count);
/* Waits for one notification (HIXL_ERR_TIMEOUT after timeout_ms; negative
 * means HIXL_TIMEOUT_MS). */
int hixl_wait_notification(hixl_notification_t *out, int64_t timeout_ms);

/* The name of an error code ("HIXL_ERR_TIMEOUT: ..."); never NULL. */
const char *hixl_strerror(int err);
/* The calling thread's last failure in words ("" if none). */
const char *hixl_last_error(void);

#ifdef __cplusplus
}
#endif

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#endif /* HIXL_HIXL_H_ */

// Signals over UCX: how a target learns, promptly, that a word it may be
// waiting on (hixl_wait_until) changed.  Two UCP active messages:
//
// * kPutSignal carries a put_signal whole, for data up to kMaxSignalData:
//   the data and the signal word's update.  The target's handler writes
//   the data, then updates the word (a sequentially consistent atomic, so
//   whoever sees the new value sees the data) and wakes its waiters.  One
//   message, one way: the latency of UCX's own active messages.  Larger
//   data goes by ucp_put_nbx first and the message carries the signal only.
// * kWake names a word a remote atomic (ucp_atomic_op_nbx) just changed:
//   the handler wakes that word's waiters.
//
// Every message is sent after a ucp_worker_fence, which orders it after
// every put and atomic issued to the peer before it.  Everything in a
// message is untrusted: the handlers check its size and that every range it
// names lies in a region this process has mapped (Regions), and drop it
// otherwise (logged once).  The handlers run inside ucp_worker_progress,
// holding the worker's mutex, so no region is unmapped while they write
// (Regions::Deregister takes that mutex).
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>

#include "transport/transport.h"
#include "transport/ucx/endpoint.h"

namespace hixl::transport::ucx {

class Regions;

// hixl's active message ids (UCP's own messages have their own space).
inline constexpr unsigned kPutSignalId = 0x68;
inline constexpr unsigned kWakeId = 0x69;

// The wire formats: fixed-size headers in host order (the peers share
// one), the data (kPutSignal) after them as the message's payload.
struct PutSignalHeader {
  uint64_t dst = 0;    // where the data goes (ignored with no data)
  uint64_t sig = 0;    // the signal word
  uint64_t value = 0;  // SET to it, or ADD it
  uint64_t op = 0;     // AtomicOp::kSet or AtomicOp::kAdd
};
struct WakeHeader {
  uint64_t addr = 0;
};

// The largest put_signal whose data travels in the signal's message.
inline constexpr size_t kMaxSignalData = 64 * 1024;

// Registers the handlers of both messages on w's worker, checking ranges
// against `regions` (which must outlive them: ClearSignalHandlers first).
// w->mu held.
Status SetSignalHandlers(Worker* w, const Regions* regions);
// Removes them.  w->mu held.
void ClearSignalHandlers(Worker* w);

// Starts a kPutSignal message to p: n bytes of data (n <= kMaxSignalData;
// 0: the signal only) for the peer's address dst, then op (kSet or kAdd)
// with value on its word at sig.  The caller counts the request, if one
// is returned, in p->outstanding (its completion counts it down).  w->mu
// held; the caller fenced the worker.
ucs_status_ptr_t SendPutSignal(Peer* p, const void* data, uint64_t dst, size_t n, uint64_t sig, AtomicOp op,
                               uint64_t value);
// Starts a kWake message naming the peer's word at addr (fire and forget:
// counted in p->outstanding until its completion frees it).  w->mu held.
ucs_status_ptr_t SendWake(Peer* p, uint64_t addr);

}  // namespace hixl::transport::ucx

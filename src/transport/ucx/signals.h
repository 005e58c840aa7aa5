// Signals over UCX: how a target learns, promptly, that a word it may be
// waiting on (hixl_wait_until) changed.  A UCP active message, kPutSignal,
// carries a put_signal whole, for data up to kMaxSignalData: the data and
// the signal word's update.  The target's handler writes the data, then
// updates the word (a sequentially consistent atomic, so whoever sees the
// new value sees the data) and wakes its waiters.  One message, one way:
// the latency of UCX's own active messages.  Larger data goes by
// ucp_put_nbx first and the message carries the signal only.  (Atomics,
// which wake waiters too, are hixl's active messages as well: atomics.h.)
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

// hixl's active message ids (UCP's own messages have their own space;
// atomics.h has two more).
inline constexpr unsigned kPutSignalId = 0x68;

// The wire formats: fixed-size headers in host order (the peers share
// one), the data (kPutSignal) after them as the message's payload.
struct PutSignalHeader {
  uint64_t dst = 0;    // where the data goes (ignored with no data)
  uint64_t sig = 0;    // the signal word
  uint64_t value = 0;  // SET to it, or ADD it
  uint64_t op = 0;     // AtomicOp::kSet or AtomicOp::kAdd
};

// The largest put_signal whose data travels in the signal's message.
inline constexpr size_t kMaxSignalData = 64 * 1024;

// Registers the handler of kPutSignal on w's worker, checking ranges
// against `regions` (which must outlive it: ClearSignalHandlers first).
// w->mu held.
Status SetSignalHandlers(Worker* w, const Regions* regions);
// Removes it.  w->mu held.
void ClearSignalHandlers(Worker* w);

// What hixl's messages share.  Sets (cb null: removes) the handler of
// message `id` on w's worker, which gets arg and whole messages.  w->mu held.
Status SetMessageHandler(Worker* w, unsigned id, ucp_am_recv_callback_t cb, const void* arg);
// Notes a message from a peer that breaks the rules, which the handler
// drops: the first one is logged (a peer cannot flood the log).
void DropMessage(const char* what, uint64_t addr, size_t len);

// Starts a kPutSignal message to p: n bytes of data (n <= kMaxSignalData;
// 0: the signal only) for the peer's address dst, then op (kSet or kAdd)
// with value on its word at sig.  The caller counts the request, if one
// is returned, in p->outstanding (its completion counts it down).  w->mu
// held; the caller fenced the worker.
ucs_status_ptr_t SendPutSignal(Peer* p, const void* data, uint64_t dst, size_t n, uint64_t sig, AtomicOp op,
                               uint64_t value);

}  // namespace hixl::transport::ucx

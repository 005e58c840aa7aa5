// Remote 64-bit atomics over UCX, carried by two of hixl's active messages
// rather than by UCX's atomics (ucp_atomic_op_nbx), which UCX emulates
// over TCP and which change the word without the target's threads
// noticing:
//
// * kAtomic asks the target to apply an operation to a word of its own
//   registered memory.  The target's handler applies it with the CPU's
//   atomic instruction (ApplyAtomic), wakes the word's futex waiters
//   (WakeWaiters) and answers with a kAtomicReply.
// * kAtomicReply carries the word's value before the operation, or why
//   the target refused it, back to the caller, which progresses the
//   worker until it comes (Worker::ProgressUntil).
//
// One round trip, and the target's progress thread is woken once (UCX's
// emulated atomic followed by a wake-up message woke it twice).  A request
// is sent after a ucp_worker_fence, as signals are (signals.h), which
// orders it after every put issued to the peer before it.  Everything in a
// message is untrusted: the request's word must be 8-byte aligned and lie
// in a region this process has mapped (Regions), its operation must be
// known, and a reply must name a call in flight; anything else is refused
// (a request is answered with an error) or dropped, and logged once.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <unordered_map>

#include "base/socket.h"
#include "transport/transport.h"
#include "transport/ucx/memory.h"

namespace hixl::transport::ucx {

// hixl's active message ids for atomics (signals.h has the others).
inline constexpr unsigned kAtomicId = 0x6a;
inline constexpr unsigned kAtomicReplyId = 0x6b;

// The wire formats: fixed-size headers in host order (the peers share one),
// no payload.
struct AtomicHeader {
  uint64_t token = 0;    // names the call in the reply
  uint64_t addr = 0;     // the word, in the target's address space
  uint64_t operand = 0;  // kSet/kAdd's value, kCompareSwap's new value
  uint64_t compare = 0;  // kCompareSwap's expected value
  uint64_t op = 0;       // an AtomicOp
};
// What a target answers: kOk with the value before the operation, or why
// it refused: the word is not in a region it has registered, or the
// request is malformed (an unknown operation, a word not 8-byte aligned).
enum class AtomicStatus : uint64_t { kOk = 0, kNotRegistered = 1, kMalformed = 2 };
struct AtomicReplyHeader {
  uint64_t token = 0;
  uint64_t old = 0;
  uint64_t status = 0;  // an AtomicStatus
};

// The atomics of one transport: the handlers of both messages on its
// worker, and the calls waiting for their replies.
class Atomics {
 public:
  // Checks requests against `regions`, which outlives this.
  Atomics(Worker* w, const Regions* regions) : w_(w), regions_(regions) {}
  Atomics(const Atomics&) = delete;
  Atomics& operator=(const Atomics&) = delete;

  // Registers the handlers (this must outlive them: ClearHandlers first).
  // w->mu held.
  Status SetHandlers();
  void ClearHandlers();

  // Applies op to the word at addr in the key's region; complete when it
  // returns (bounded by the deadline); *old receives the value before.
  // Takes the worker's mutex.
  Status Apply(const UcxKey& k, AtomicOp op, uint64_t addr, uint64_t operand, uint64_t compare, uint64_t* old,
               net::Deadline deadline);

 private:
  struct Call;
  static ucs_status_t OnRequest(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                const ucp_am_recv_param_t* param);
  static ucs_status_t OnReply(void* arg, const void* header, size_t header_length, void* data, size_t length,
                              const ucp_am_recv_param_t* param);
  // Answers a request on ep.  w->mu held.
  void Reply(ucp_ep_h ep, const AtomicReplyHeader& reply);

  Worker* const w_;
  const Regions* const regions_;
  // Guarded by w_->mu.
  std::unordered_map<uint64_t, Call*> calls_;  // by token: calls waiting for their reply
  uint64_t next_token_ = 1;
};

// Remote atomics whose state is still allocated in this process (in flight,
// or given up on and awaiting UCX's completion or the worker's end): tests
// check that it returns to zero.
int64_t LiveAtomicCalls();

}  // namespace hixl::transport::ucx

#include "transport/ucx/atomics.h"

#include <algorithm>
#include <atomic>
#include <memory>

#include "transport/ucx/endpoint.h"

namespace hixl::transport::ucx {

namespace {

std::atomic<int64_t> g_live_calls{0};

// One remote atomic in flight.  Its operand and reply live here, not on the
// caller's stack, so that a caller that gives up (HIXL_TIMEOUT_MS) leaves
// UCX nothing dangling.  The caller that gives up hands it to its worker;
// the completion then frees it, or, where UCX never completes the request
// (seen with UCX 1.13 for an atomic queued on an endpoint whose peer died
// during wire-up), the worker does when it goes.
struct AtomicCall {
  AtomicCall() { g_live_calls.fetch_add(1, std::memory_order_relaxed); }
  ~AtomicCall() { g_live_calls.fetch_sub(1, std::memory_order_relaxed); }
  AtomicCall(const AtomicCall&) = delete;
  AtomicCall& operator=(const AtomicCall&) = delete;

  Worker* w = nullptr;
  uint64_t operand = 0;  // ucp_atomic_op_nbx's buffer
  uint64_t reply = 0;    // its reply_buffer: the value before the operation
  bool done = false;
  bool abandoned = false;
  ucs_status_t status = UCS_OK;
};

// Completion of an atomic (worker mutex held).
void OnAtomicDone(void* request, ucs_status_t status, void* user_data) {
  auto* c = static_cast<AtomicCall*>(user_data);
  ucp_request_free(request);
  if (c->abandoned) {
    std::erase_if(c->w->abandoned, [c](const std::shared_ptr<void>& a) { return a.get() == c; });  // frees c
    return;
  }
  c->done = true;
  c->status = status;
  c->w->completed.store(true, std::memory_order_relaxed);
}

}  // namespace

Status RemoteAtomic(const UcxKey& k, AtomicOp op, uint64_t addr, uint64_t operand, uint64_t compare, uint64_t* old,
                    int64_t timeout_ms) {
  Peer* p = k.peer.get();
  Worker* w = p->w.get();
  // In ucp_atomic_op_nbx's terms: buffer X, remote word Y, reply Z.
  auto call = std::make_unique<AtomicCall>();
  call->w = w;
  call->operand = operand;
  ucp_atomic_op_t uop = UCP_ATOMIC_OP_ADD;
  switch (op) {
    case AtomicOp::kFetch:  // Y |= 0
      uop = UCP_ATOMIC_OP_OR;
      call->operand = 0;
      break;
    case AtomicOp::kSet:  // Y = X
      uop = UCP_ATOMIC_OP_SWAP;
      break;
    case AtomicOp::kAdd:  // Y += X
      uop = UCP_ATOMIC_OP_ADD;
      break;
    case AtomicOp::kCompareSwap:  // if (Y == X) Y = Z; Z takes the new value in and Y's old one out
      uop = UCP_ATOMIC_OP_CSWAP;
      call->operand = compare;
      call->reply = operand;
      break;
  }
  const net::Deadline deadline = net::DeadlineIn(timeout_ms);
  std::unique_lock lock(w->mu);
  HIXL_RETURN_IF_ERROR(Usable(p));
  // After every put this process issued to the peer before it.
  ucs_status_t st = ucp_worker_fence(w->worker);
  if (st != UCS_OK) return Failure(p, st, "a fence before an atomic");
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE |
                       UCP_OP_ATTR_FIELD_REPLY_BUFFER;
  param.cb.send = OnAtomicDone;
  param.user_data = call.get();
  param.datatype = ucp_dt_make_contig(sizeof(uint64_t));
  param.reply_buffer = &call->reply;
  ucs_status_ptr_t r = ucp_atomic_op_nbx(p->ep, uop, &call->operand, 1, addr, k.rkey, &param);
  if (UCS_PTR_IS_ERR(r)) return Failure(p, UCS_PTR_STATUS(r), fmt::format("an atomic at {:#x}", addr).c_str());
  if (r != nullptr && !w->ProgressUntil(lock, deadline, [&] { return call->done; })) {
    call->abandoned = true;
    w->abandoned.push_back(std::shared_ptr<AtomicCall>(std::move(call)));  // OnAtomicDone or ~Worker frees it
    lock.unlock();
    w->Kick();
    if (p->ep_error.load() != UCS_OK) return Failure(p, p->ep_error.load(), "an atomic");
    return Err(Errc::kTimeout, "ucx: an atomic on {} at {:#x} did not complete within HIXL_TIMEOUT_MS={}", p->Name(),
               addr, timeout_ms);
  }
  lock.unlock();
  if (r != nullptr) w->Kick();
  if (call->status != UCS_OK) return Failure(p, call->status, fmt::format("an atomic at {:#x}", addr).c_str());
  *old = call->reply;
  return Status::Ok();
}

int64_t LiveAtomicCalls() { return g_live_calls.load(); }

}  // namespace hixl::transport::ucx

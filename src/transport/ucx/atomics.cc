#include "transport/ucx/atomics.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "base/log.h"
#include "transport/ucx/endpoint.h"
#include "transport/ucx/signals.h"

namespace hixl::transport::ucx {

namespace {

std::atomic<int64_t> g_live_calls{0};

// A reply in flight: UCX reads its header until the send completes.  Kept
// in the worker's `abandoned` meanwhile, so that a reply UCX never
// completes (its caller died) goes with the worker.
struct ReplyMessage {
  Worker* w = nullptr;
  AtomicReplyHeader header;
};

// Completion of a reply that did not complete at once (worker mutex held).
// A reply that failed is the caller's to notice (its endpoint fails, or it
// times out).
void OnReplySent(void* request, ucs_status_t, void* user_data) {
  auto* m = static_cast<ReplyMessage*>(user_data);
  ucp_request_free(request);
  std::erase_if(m->w->abandoned, [m](const std::shared_ptr<void>& a) { return a.get() == m; });  // frees m
}

bool IsKnownOp(uint64_t op) { return op <= static_cast<uint64_t>(AtomicOp::kCompareSwap); }

// Whether a message is exactly a header of `want` bytes with no payload;
// if not, it is dropped (logged as `what`) and *status is the handler's
// answer to UCX (a rendezvous payload is released unread).
bool Wellformed(const char* what, size_t want, size_t header_length, size_t length, const ucp_am_recv_param_t* param,
                ucs_status_t* status) {
  if (header_length == want && length == 0) return true;
  DropMessage(what, 0, header_length + length);
  *status = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? UCS_ERR_INVALID_PARAM : UCS_OK;
  return false;
}

}  // namespace

// One remote atomic in flight.  UCX reads its request header until the
// send completes, which may be after the reply came or after the caller
// gave up (HIXL_TIMEOUT_MS): then the caller hands it to its worker, and
// the send's completion frees it, or, where UCX never completes the send
// (seen with UCX 1.13 for a request queued on an endpoint whose peer died
// during wire-up), the worker does when it goes.
struct Atomics::Call {
  Call() { g_live_calls.fetch_add(1, std::memory_order_relaxed); }
  ~Call() { g_live_calls.fetch_sub(1, std::memory_order_relaxed); }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  Worker* w = nullptr;
  AtomicHeader request;
  bool sending = false;  // the send did not complete yet
  bool abandoned = false;
  ucs_status_t send_status = UCS_OK;
  bool replied = false;
  AtomicReplyHeader reply;

  // Completion of the request's send that did not complete at once
  // (worker mutex held).
  static void OnSent(void* request, ucs_status_t status, void* user_data) {
    auto* c = static_cast<Call*>(user_data);
    ucp_request_free(request);
    if (c->abandoned) {
      std::erase_if(c->w->abandoned, [c](const std::shared_ptr<void>& a) { return a.get() == c; });  // frees c
      return;
    }
    c->sending = false;
    c->send_status = status;
    c->w->completed.store(true, std::memory_order_relaxed);
  }
};

Status Atomics::SetHandlers() {
  HIXL_RETURN_IF_ERROR(SetMessageHandler(w_, kAtomicId, OnRequest, this));
  return SetMessageHandler(w_, kAtomicReplyId, OnReply, this);
}

void Atomics::ClearHandlers() {
  (void)SetMessageHandler(w_, kAtomicId, nullptr, nullptr);
  (void)SetMessageHandler(w_, kAtomicReplyId, nullptr, nullptr);
}

ucs_status_t Atomics::OnRequest(void* arg, const void* header, size_t header_length, void*, size_t length,
                                const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Atomics*>(arg);
  ucs_status_t status = UCS_OK;
  if (!Wellformed("a malformed atomic", sizeof(AtomicHeader), header_length, length, param, &status)) return status;
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) || param->reply_ep == nullptr) {
    DropMessage("an atomic with no way to reply", 0, header_length);
    return UCS_OK;
  }
  AtomicHeader h;
  std::memcpy(&h, header, sizeof(h));
  AtomicReplyHeader reply{.token = h.token};
  uint64_t* changed = nullptr;  // the word whose waiters to wake
  if (!IsKnownOp(h.op) || h.addr % 8 != 0) {
    DropMessage("an unknown atomic operation or an unaligned word", h.addr, 8);
    reply.status = static_cast<uint64_t>(AtomicStatus::kMalformed);
  } else if (!self->regions_->CoversLocked(h.addr, 8)) {
    // Not logged: the region may have been deregistered meanwhile; the
    // caller reports it.
    reply.status = static_cast<uint64_t>(AtomicStatus::kNotRegistered);
  } else {
    // Sequentially consistent, as the shm transport's atomics are.
    auto* word = reinterpret_cast<uint64_t*>(h.addr);
    const auto op = static_cast<AtomicOp>(h.op);
    reply.old = ApplyAtomic(word, op, h.operand, h.compare);
    if (op != AtomicOp::kFetch) changed = word;
  }
  self->Reply(param->reply_ep, reply);
  self->w_->served_request = true;
  // After the reply, which the caller waits for (a waiter that wakes reads
  // the word, changed already).  The region stays mapped: w->mu is held.
  if (changed) WakeWaiters(changed);
  return UCS_OK;
}

ucs_status_t Atomics::OnReply(void* arg, const void* header, size_t header_length, void*, size_t length,
                              const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Atomics*>(arg);
  ucs_status_t status = UCS_OK;
  if (!Wellformed("a malformed atomic reply", sizeof(AtomicReplyHeader), header_length, length, param, &status)) {
    return status;
  }
  AtomicReplyHeader h;
  std::memcpy(&h, header, sizeof(h));
  // A reply to no call in flight is dropped silently: its caller may have
  // given up waiting for it.
  auto it = self->calls_.find(h.token);
  if (it == self->calls_.end()) return UCS_OK;
  Call* c = it->second;
  self->calls_.erase(it);  // a second reply with the token is dropped
  c->reply = h;
  c->replied = true;
  self->w_->completed.store(true, std::memory_order_relaxed);
  return UCS_OK;
}

void Atomics::Reply(ucp_ep_h ep, const AtomicReplyHeader& reply) {
  auto m = std::make_shared<ReplyMessage>();
  m->w = w_;
  m->header = reply;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  param.cb.send = OnReplySent;
  param.user_data = m.get();
  ucs_status_ptr_t r = ucp_am_send_nbx(ep, kAtomicReplyId, &m->header, sizeof(m->header), nullptr, 0, &param);
  if (UCS_PTR_IS_PTR(r)) {
    w_->abandoned.push_back(std::move(m));  // OnReplySent frees it
  } else if (UCS_PTR_IS_ERR(r)) {
    // The caller's endpoint failed: it notices that, or times out.
    HIXL_LOG_DEBUG("ucx: cannot send an atomic's reply: {}", ucs_status_string(UCS_PTR_STATUS(r)));
  }
}

Status Atomics::Apply(const UcxKey& k, AtomicOp op, uint64_t addr, uint64_t operand, uint64_t compare, uint64_t* old,
                      net::Deadline deadline) {
  Peer* p = k.peer.get();
  auto call = std::make_unique<Call>();
  call->w = w_;
  std::unique_lock lock(w_->mu);
  HIXL_RETURN_IF_ERROR(Usable(p));
  const uint64_t token = next_token_++;
  call->request = AtomicHeader{
      .token = token, .addr = addr, .operand = operand, .compare = compare, .op = static_cast<uint64_t>(op)};
  // After every put this process issued to the peer before it.
  ucs_status_t st = ucp_worker_fence(w_->worker);
  if (st != UCS_OK) return Failure(p, st, "a fence before an atomic");
  calls_.emplace(token, call.get());
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  // Eager, as signals: the handler takes the request in the message itself.
  param.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
  param.cb.send = Call::OnSent;
  param.user_data = call.get();
  ucs_status_ptr_t r = ucp_am_send_nbx(p->ep, kAtomicId, &call->request, sizeof(call->request), nullptr, 0, &param);
  if (UCS_PTR_IS_ERR(r)) {
    calls_.erase(token);
    return Failure(p, UCS_PTR_STATUS(r), fmt::format("an atomic at {:#x}", addr).c_str());
  }
  call->sending = UCS_PTR_IS_PTR(r);
  w_->ProgressUntil(lock, deadline,
                    [&] { return call->replied || call->send_status != UCS_OK || p->ep_error.load() != UCS_OK; });
  calls_.erase(token);  // a reply from now on is dropped
  const bool replied = call->replied;
  const AtomicReplyHeader reply = call->reply;
  const ucs_status_t send_status = call->send_status;
  if (call->sending) {
    call->abandoned = true;
    w_->abandoned.push_back(std::shared_ptr<Call>(std::move(call)));  // Call::OnSent or ~Worker frees it
  }
  if (!replied) {
    lock.unlock();
    w_->Kick();  // our progress calls may have taken events the progress thread waited for
    if (send_status != UCS_OK) return Failure(p, send_status, fmt::format("an atomic at {:#x}", addr).c_str());
    if (p->ep_error.load() != UCS_OK) return Failure(p, p->ep_error.load(), "an atomic");
    return Err(Errc::kTimeout,
               "ucx: an atomic on {} at {:#x} did not complete in time (the call's timeout, or HIXL_TIMEOUT_MS)",
               p->Name(), addr);
  }
  // Done with what this thread took from the worker, so that nothing is left
  // half done for a progress thread asleep in poll (rather than waking it).
  w_->FinishLocked();
  lock.unlock();
  switch (static_cast<AtomicStatus>(reply.status)) {
    case AtomicStatus::kOk: *old = reply.old; return Status::Ok();
    case AtomicStatus::kNotRegistered:
      return Err(Errc::kNotRegistered,
                 "Remote memory not registered: {} refused an atomic on 8 bytes at {:#x} (deregistered meanwhile)",
                 p->Name(), addr);
    case AtomicStatus::kMalformed: break;
  }
  return Err(Errc::kTransport, "ucx: {} refused an atomic at {:#x} (status {})", p->Name(), addr, reply.status);
}

int64_t LiveAtomicCalls() { return g_live_calls.load(); }

}  // namespace hixl::transport::ucx

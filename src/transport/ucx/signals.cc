#include "transport/ucx/signals.h"

#include <atomic>
#include <cstring>
#include <memory>

#include "base/log.h"
#include "base/user_memory.h"
#include "transport/ucx/memory.h"

namespace hixl::transport::ucx {

namespace {

// One message in flight: UCX reads its header until it completes.
struct Outgoing {
  Peer* p = nullptr;
  PutSignalHeader put_signal;
};

// Completion of a message that did not complete at once (worker mutex held).
void OnSent(void* request, ucs_status_t status, void* user_data) {
  std::unique_ptr<Outgoing> o(static_cast<Outgoing*>(user_data));
  Peer* p = o->p;
  --p->outstanding;
  if (status != UCS_OK && p->op_error == UCS_OK) p->op_error = status;
  p->w->completed.store(true, std::memory_order_relaxed);
  ucp_request_free(request);
}

ucs_status_ptr_t Send(std::unique_ptr<Outgoing> o, unsigned id, const void* header, size_t header_len, const void* data,
                      size_t n) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  // Never rendezvous: the handlers take the data in the message itself.
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  param.cb.send = OnSent;
  param.user_data = o.get();
  ucs_status_ptr_t r = ucp_am_send_nbx(o->p->ep, id, header, header_len, data, n, &param);
  if (UCS_PTR_IS_PTR(r)) (void)o.release();  // OnSent frees it
  return r;
}

ucs_status_t OnPutSignal(void* arg, const void* header, size_t header_length, void* data, size_t length,
                         const ucp_am_recv_param_t* param) {
  const auto* regions = static_cast<const Regions*>(arg);
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    DropMessage("rendezvous data", 0, length);
    return UCS_ERR_INVALID_PARAM;  // the sender's request fails with it; the data is dropped
  }
  PutSignalHeader h;
  if (header_length != sizeof(h)) {
    DropMessage("a malformed header", 0, header_length);
    return UCS_OK;
  }
  std::memcpy(&h, header, sizeof(h));
  if (h.op != static_cast<uint64_t>(AtomicOp::kSet) && h.op != static_cast<uint64_t>(AtomicOp::kAdd)) {
    DropMessage("an unknown signal operation", h.sig, 8);
    return UCS_OK;
  }
  if (h.sig % 8 != 0 || !regions->CoversLocked(h.sig, 8)) {
    DropMessage("a signal word outside the registered regions", h.sig, 8);
    return UCS_OK;
  }
  if (length > kMaxSignalData || (length > 0 && !regions->CoversLocked(h.dst, length))) {
    DropMessage("data outside the registered regions", h.dst, length);
    return UCS_OK;
  }
  auto* word = reinterpret_cast<uint64_t*>(h.sig);
  if (length > 0) {
    [[maybe_unused]] const base::UserMemory user;  // a peer's write, ordered by the protocol (base/user_memory.h)
    std::memcpy(reinterpret_cast<void*>(h.dst), data, length);
  }
  // Sequentially consistent: whoever sees the new value sees the data.
  ApplyAtomic(word, static_cast<AtomicOp>(h.op), h.value, 0);
  WakeWaiters(word);
  regions->worker()->served_request = true;  // mu held: handlers run under it
  return UCS_OK;
}

}  // namespace

void DropMessage(const char* what, uint64_t addr, size_t len) {
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true)) {
    HIXL_LOG_WARN("ucx: dropped a message from a peer: {} ({} bytes at {:#x}); later ones are dropped silently", what,
                  len, addr);
  }
}

Status SetMessageHandler(Worker* w, unsigned id, ucp_am_recv_callback_t cb, const void* arg) {
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = id;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  hp.cb = cb;
  hp.arg = const_cast<void*>(arg);
  ucs_status_t st = ucp_worker_set_am_recv_handler(w->worker, &hp);
  if (st != UCS_OK) {
    return Err(Errc::kTransport, "ucx: cannot set the handler of active message {}: {}", id, ucs_status_string(st));
  }
  return Status::Ok();
}

Status SetSignalHandlers(Worker* w, const Regions* regions) {
  return SetMessageHandler(w, kPutSignalId, OnPutSignal, regions);
}

void ClearSignalHandlers(Worker* w) { (void)SetMessageHandler(w, kPutSignalId, nullptr, nullptr); }

ucs_status_ptr_t SendPutSignal(Peer* p, const void* data, uint64_t dst, size_t n, uint64_t sig, AtomicOp op,
                               uint64_t value) {
  auto o = std::make_unique<Outgoing>();
  o->p = p;
  o->put_signal = PutSignalHeader{.dst = dst, .sig = sig, .value = value, .op = static_cast<uint64_t>(op)};
  const void* header = &o->put_signal;
  return Send(std::move(o), kPutSignalId, header, sizeof(PutSignalHeader), n > 0 ? data : nullptr, n);
}

}  // namespace hixl::transport::ucx

#include "transport/ucx/rma.h"

#include <algorithm>
#include <utility>

#include "transport/ucx/signals.h"

namespace hixl::transport::ucx {

namespace {

// Completion of a put or get that did not complete at once (worker mutex held).
void OnOpDone(void* request, ucs_status_t status, void* user_data) {
  auto* p = static_cast<Peer*>(user_data);
  --p->outstanding;
  if (status != UCS_OK && p->op_error == UCS_OK) p->op_error = status;
  p->w->completed.store(true, std::memory_order_relaxed);
  ucp_request_free(request);
}

ucp_request_param_t OpParam(Peer* p) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = OnOpDone;
  param.user_data = p;
  return param;
}

}  // namespace

Status Rma::Put(const UcxKey& k, const void* src, uint64_t dst, size_t n) {
  Peer* p = k.peer.get();
  HIXL_RETURN_IF_ERROR(Usable(p));
  ucp_request_param_t param = OpParam(p);
  return Started(k.peer, ucp_put_nbx(p->ep, src, n, dst, k.rkey, &param), "put", dst, n);
}

Status Rma::Get(const UcxKey& k, uint64_t src, void* dst, size_t n) {
  Peer* p = k.peer.get();
  HIXL_RETURN_IF_ERROR(Usable(p));
  ucp_request_param_t param = OpParam(p);
  return Started(k.peer, ucp_get_nbx(p->ep, dst, n, src, k.rkey, &param), "get", src, n);
}

Status Rma::Signal(const UcxKey& k, const void* data, uint64_t dst, size_t n, uint64_t sig, AtomicOp op,
                   uint64_t value) {
  Peer* p = k.peer.get();
  HIXL_RETURN_IF_ERROR(Usable(p));
  // After every put this process issued to the peer before it.
  ucs_status_t st = ucp_worker_fence(w_->worker);
  if (st != UCS_OK) return Failure(p, st, "a fence before a signal");
  return Started(k.peer, SendPutSignal(p, data, dst, n, sig, op, value), "signal", sig, n);
}

Status Rma::FlushAll(std::unique_lock<std::mutex>& lock, net::Deadline deadline) {
  std::vector<std::shared_ptr<Peer>> peers;
  peers.swap(dirty_);
  return FlushPeers(lock, std::move(peers), deadline);
}

Status Rma::FlushSome(std::unique_lock<std::mutex>& lock, std::vector<std::shared_ptr<Peer>> peers,
                      net::Deadline deadline) {
  // Left out: those to which nothing went through UCX since the last flush,
  // with no flush or transfer another thread started still running (its
  // flush may cover what this caller started).  Each stays in dirty_
  // meanwhile, so that a FlushAll waits for it too.
  std::erase_if(peers, [](const std::shared_ptr<Peer>& p) {
    return !p || (!p->dirty && p->flushing == 0 && p->outstanding == 0);
  });
  if (peers.empty()) return Status::Ok();
  return FlushPeers(lock, std::move(peers), deadline);
}

void Rma::Forget(const std::shared_ptr<Peer>& p) {
  std::erase(dirty_, p);
  p->dirty = false;
}

Status Rma::Started(const std::shared_ptr<Peer>& p, ucs_status_ptr_t r, const char* op, uint64_t remote, size_t n) {
  if (UCS_PTR_IS_ERR(r)) {
    ucs_status_t st = UCS_PTR_STATUS(r);
    const bool peer_gone = IsPeerFailure(st) || p->ep_error.load() != UCS_OK;
    return Err(peer_gone ? Errc::kPeerFailed : Errc::kTransport, "ucx: {} of {} bytes {} {:#x} on {} failed: {}", op, n,
               op[0] == 'p' ? "to" : "from", remote, p->Name(), ucs_status_string(st));
  }
  if (r != nullptr) ++p->outstanding;
  MarkDirty(p);
  return Status::Ok();
}

void Rma::MarkDirty(const std::shared_ptr<Peer>& p) {
  if (p->dirty) return;
  p->dirty = true;
  // FlushPeer leaves its peer in dirty_ (with dirty false).
  if (std::find(dirty_.begin(), dirty_.end(), p) == dirty_.end()) dirty_.push_back(p);
}

Status Rma::FlushPeers(std::unique_lock<std::mutex>& lock, std::vector<std::shared_ptr<Peer>> peers,
                       net::Deadline deadline) {
  Status first;
  auto note = [&first](Status s) {
    if (first.ok() && !s.ok()) first = std::move(s);
  };
  if (peers.empty()) return first;  // nothing went through UCX since the last flush
  // An endpoint flush completes once everything started on the endpoint
  // before it has completed, at the target as well.
  for (auto& p : peers) {
    if (!p->dirty) continue;  // a flush another thread started covers it: wait for that
    p->dirty = false;
    if (!p->ep || p->ep_error.load() != UCS_OK) continue;
    ucs_status_ptr_t r = StartEndpointFlush(p.get());
    if (UCS_PTR_IS_ERR(r)) note(Failure(p.get(), UCS_PTR_STATUS(r), "flush"));
  }
  auto busy = [](const Peer& p) { return p.flushing > 0 || p.outstanding > 0; };
  w_->ProgressUntil(lock, deadline,
                    [&] { return std::none_of(peers.begin(), peers.end(), [&](const auto& p) { return busy(*p); }); });
  for (auto& p : peers) {
    if (busy(*p)) {
      // Left to UCX; a later flush waits for this peer again (unless
      // Disconnect forgot it meanwhile).
      if (!p->closed) MarkDirty(p);
      if (p->ep_error.load() == UCS_OK) {
        note(Err(Errc::kTimeout,
                 "ucx: transfers to {} did not complete in time (the call's timeout, or HIXL_TIMEOUT_MS={})", p->Name(),
                 host_->timeout_ms()));
      }
    }
    if (p->ep_error.load() != UCS_OK) note(Failure(p.get(), p->ep_error.load(), "connection"));
    if (p->op_error != UCS_OK) note(Failure(p.get(), std::exchange(p->op_error, UCS_OK), "transfer"));
  }
  lock.unlock();
  // We may have consumed events the progress thread was waiting for.
  w_->KickIfPolling();
  return first;
}

}  // namespace hixl::transport::ucx

#include "transport/ucx/endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>

#include "base/log.h"
#include "transport/ucx/memory.h"

namespace hixl::transport::ucx {

namespace {

std::atomic<int64_t> g_live_endpoints{0};
std::atomic<int64_t> g_endpoint_flushes{0};

// UCX's error handler of an endpoint (called from progress): the peer is
// gone, and every later operation to it fails at once.
void OnEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* p = static_cast<Peer*>(arg);
  ucs_status_t expected = UCS_OK;
  if (p->ep_error.compare_exchange_strong(expected, status)) {
    HIXL_LOG_INFO("ucx: the endpoint to {} failed: {}", p->Name(), ucs_status_string(status));
  }
  p->w->completed.store(true, std::memory_order_relaxed);
}

// Completion of an endpoint flush (worker mutex held).
void OnFlushDone(void* request, ucs_status_t status, void* user_data) {
  auto* p = static_cast<Peer*>(user_data);
  --p->flushing;
  if (status != UCS_OK && p->op_error == UCS_OK) p->op_error = status;
  p->w->completed.store(true, std::memory_order_relaxed);
  ucp_request_free(request);
}

}  // namespace

Peer::~Peer() {
  std::lock_guard lock(w->mu);
  if (!ep) return;
  if (ep_error.load() == UCS_OK) {
    // Let the endpoint's wire-up finish first: a peer still answering it
    // when the endpoint vanishes fails in UCX itself (an assertion about
    // its wire-up reply, seen with UCX 1.13 when an engine disconnected
    // right after connecting).  A flush completes after the wire-up.
    ucp_request_param_t fp{};
    ucs_status_ptr_t freq = ucp_ep_flush_nbx(ep, &fp);
    if (UCS_PTR_IS_PTR(freq)) {
      const net::Deadline deadline = net::DeadlineIn(2000);
      while (ucp_request_check_status(freq) == UCS_INPROGRESS && net::Clock::now() < deadline &&
             ep_error.load() == UCS_OK) {
        ucp_worker_progress(w->worker);
      }
      ucp_request_free(freq);
    }
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;  // local only: never waits for the peer
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
  if (UCS_PTR_IS_PTR(req)) {
    // A forced close completes locally; the bound is only a safety net.
    const net::Deadline deadline = net::DeadlineIn(5000);
    while (ucp_request_check_status(req) == UCS_INPROGRESS && net::Clock::now() < deadline) {
      ucp_worker_progress(w->worker);
    }
    ucp_request_free(req);
  }
  ep = nullptr;
  CountEndpoints(-1);
}

int64_t LiveEndpoints() { return g_live_endpoints.load(); }
int64_t EndpointFlushes() { return g_endpoint_flushes.load(); }
void CountEndpoints(int64_t delta) { g_live_endpoints.fetch_add(delta); }

bool IsPeerFailure(ucs_status_t s) {
  switch (s) {
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_CANCELED:
    case UCS_ERR_IO_ERROR: return true;
    default: return false;
  }
}

Status Failure(Peer* p, ucs_status_t st, const char* what) {
  const bool peer_gone = IsPeerFailure(st) || p->ep_error.load() != UCS_OK;
  return Err(peer_gone ? Errc::kPeerFailed : Errc::kTransport, "ucx: {} to {} failed: {}", what, p->Name(),
             ucs_status_string(st));
}

Status Usable(Peer* p) {
  if (p->closed) {
    return Err(Errc::kNotConnected, "ucx: {} has been disconnected (Connect it again, then unpack its keys again)",
               p->Name());
  }
  ucs_status_t e = p->ep_error.load();
  if (e == UCS_OK) return Status::Ok();
  return Failure(p, e, "connection");
}

Status EnsureEndpoint(Peer* p, bool self, const std::string& net_dev) {
  if (p->ep) return Usable(p);
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  sockaddr_in sa{};
  if (!self && p->listener_port != 0) {
    // Through the peer's listener: its side of the connection goes when
    // ours closes (listener.h).
    sa.sin_family = AF_INET;
    sa.sin_port = htons(p->listener_port);
    if (::inet_pton(AF_INET, p->listener_ip.c_str(), &sa.sin_addr) != 1) {
      return Err(Errc::kInternal, "ucx: {} has a malformed listener address {}", p->Name(), p->listener_ip);
    }
    ep.field_mask |= UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
    ep.sockaddr.addrlen = sizeof(sa);
  } else {
    ep.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(p->address.data());
  }
  // A peer's failure must become an error rather than a hang.  This
  // process cannot fail towards itself, and its own endpoint may then use
  // UCX's `self` and shared-memory transports, which have no peer-failure
  // handling.
  ep.err_mode = self ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = OnEndpointError;
  ep.err_handler.arg = p;
  ucs_status_t st = ucp_ep_create(p->w->worker, &ep, &p->ep);
  if (st != UCS_OK) {
    // Nothing has been sent yet: this is about the transports UCX has
    // here and there (UCX_TLS, HIXL_NET_DEV), not about the peer's health.
    p->ep = nullptr;
    return Err(Errc::kTransport, "ucx: no UCX transport here reaches {}: {}{}", p->Name(), ucs_status_string(st),
               net_dev.empty() ? "" : fmt::format(" (with HIXL_NET_DEV={})", net_dev));
  }
  CountEndpoints(1);
  return Status::Ok();
}

ucs_status_ptr_t StartEndpointFlush(Peer* p) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = OnFlushDone;
  param.user_data = p;
  ucs_status_ptr_t r = ucp_ep_flush_nbx(p->ep, &param);
  g_endpoint_flushes.fetch_add(1, std::memory_order_relaxed);
  if (UCS_PTR_IS_PTR(r)) ++p->flushing;
  return r;
}

void CloseEndpoint(Peer* p, std::unique_lock<std::mutex>& lock, net::Deadline deadline) {
  if (!p->ep) return;
  // Transfers in flight complete first (bounded), then the rkeys go before
  // their endpoint, as UCX requires; on a timeout or a failed endpoint the
  // forced close cancels what is left first.
  bool flushed = false;
  if (p->ep_error.load() == UCS_OK) {
    ucs_status_ptr_t r = StartEndpointFlush(p);
    flushed = !UCS_PTR_IS_ERR(r) && p->w->ProgressUntil(lock, deadline, [&] {
      return (p->flushing == 0 && p->outstanding == 0) || p->ep_error.load() != UCS_OK;
    });
    flushed = flushed && p->ep_error.load() == UCS_OK && p->op_error == UCS_OK;
  }
  if (flushed) DestroyKeys(p);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = flushed ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t req = ucp_ep_close_nbx(p->ep, &param);
  if (UCS_PTR_IS_PTR(req)) {
    // A forced close completes locally: its bound is a safety net only.
    const net::Deadline close_deadline = flushed ? std::max(deadline, net::DeadlineIn(1000)) : net::DeadlineIn(5000);
    if (!p->w->ProgressUntil(lock, close_deadline, [&] { return ucp_request_check_status(req) != UCS_INPROGRESS; })) {
      HIXL_LOG_INFO("ucx: closing the endpoint to {} did not complete in time; UCX finishes it later", p->Name());
    }
    ucp_request_free(req);  // released by UCX once complete
  }
  p->ep = nullptr;
  CountEndpoints(-1);
  if (!flushed) DestroyKeys(p);
}

}  // namespace hixl::transport::ucx

#include "transport/ucx/listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <utility>

#include "base/log.h"
#include "base/socket.h"
#include "transport/ucx/endpoint.h"
#include "transport/ucx/worker.h"

namespace hixl::transport::ucx {

namespace {

// Completion of a forced close: nothing waits for it.
void OnClosed(void* request, ucs_status_t, void*) { ucp_request_free(request); }

}  // namespace

Result<std::unique_ptr<Acceptor>> Acceptor::Create(Worker* w, const std::string& ip) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (::inet_pton(AF_INET, ip.c_str(), &sa.sin_addr) != 1) {
    return Err(Errc::kInvalidArg, "ucx: cannot listen on '{}': not an IPv4 address", ip);
  }
  std::unique_ptr<Acceptor> a(new Acceptor(w));
  ucp_listener_params_t params{};
  params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  params.sockaddr.addrlen = sizeof(sa);
  params.conn_handler.cb = OnConnRequest;
  params.conn_handler.arg = a.get();
  ucs_status_t st = ucp_listener_create(w->worker, &params, &a->listener_);
  if (st != UCS_OK) {
    a->listener_ = nullptr;
    return Err(Errc::kTransport, "ucx: cannot listen on {}: {}", ip, ucs_status_string(st));
  }
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  st = ucp_listener_query(a->listener_, &attr);
  if (st != UCS_OK || attr.sockaddr.ss_family != AF_INET) {
    return Err(Errc::kTransport, "ucx: cannot find the port of the listener on {}: {}", ip, ucs_status_string(st));
  }
  a->port_ = ntohs(reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
  return a;
}

Acceptor::~Acceptor() {
  for (ucp_conn_request_h r : requests_) (void)ucp_listener_reject(listener_, r);
  requests_.clear();
  if (listener_) ucp_listener_destroy(listener_);
  for (ucp_ep_h ep : eps_) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;  // local only
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
    if (!UCS_PTR_IS_PTR(req)) continue;
    // A forced close completes locally: the bound is a safety net only.
    const net::Deadline deadline = net::DeadlineIn(1000);
    while (ucp_request_check_status(req) == UCS_INPROGRESS && net::Clock::now() < deadline) {
      ucp_worker_progress(w_->worker);
    }
    ucp_request_free(req);
  }
  CountEndpoints(-static_cast<int64_t>(eps_.size()));
  eps_.clear();
}

void Acceptor::OnConnRequest(ucp_conn_request_h request, void* arg) {
  auto* a = static_cast<Acceptor*>(arg);
  a->requests_.push_back(request);
  a->w_->Kick();  // the progress thread serves it (this may be another thread's progress)
}

void Acceptor::OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* a = static_cast<Acceptor*>(arg);
  HIXL_LOG_DEBUG("ucx: a peer's connection to our listener ended: {}", ucs_status_string(status));
  a->failed_.push_back(ep);
  a->w_->Kick();
}

void Acceptor::Serve() {
  if (!requests_.empty()) {
    std::vector<ucp_conn_request_h> requests;
    requests.swap(requests_);
    for (ucp_conn_request_h r : requests) Accept(r);
  }
  if (!failed_.empty()) {
    std::vector<ucp_ep_h> failed;
    failed.swap(failed_);
    for (ucp_ep_h ep : failed) Close(ep);
  }
}

void Acceptor::Accept(ucp_conn_request_h request) {
  if (eps_.size() >= kMaxAccepted) {
    if (!warned_full_) {
      HIXL_LOG_WARN("ucx: {} peers are connected to this process's listener already; refusing more", kMaxAccepted);
      warned_full_ = true;
    }
    (void)ucp_listener_reject(listener_, request);
    return;
  }
  ucp_ep_params_t params{};
  params.field_mask =
      UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.conn_request = request;
  // The peer's close (or death) must reach us as an error: that is when
  // this endpoint goes.
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = OnEndpointError;
  params.err_handler.arg = this;
  ucp_ep_h ep = nullptr;
  ucs_status_t st = ucp_ep_create(w_->worker, &params, &ep);
  if (st != UCS_OK) {
    HIXL_LOG_INFO("ucx: cannot accept a peer's connection: {}", ucs_status_string(st));
    return;
  }
  eps_.insert(ep);
  CountEndpoints(1);
}

void Acceptor::Close(ucp_ep_h ep) {
  if (eps_.erase(ep) == 0) return;  // reported twice
  CountEndpoints(-1);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;  // the peer is gone already
  param.cb.send = OnClosed;
  (void)ucp_ep_close_nbx(ep, &param);  // a request, if any, frees itself in OnClosed
}

}  // namespace hixl::transport::ucx

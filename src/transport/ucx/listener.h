// The ucx transport's listener: the other side of the endpoints that peers
// make from an IP address and port (UCX's client-server connection), which
// front doors whose peers come and go (engines) use.
//
// Why: an endpoint made from a peer's worker address leaves, in UCX 1.13, a
// TCP connection and an endpoint that UCX made for the reply direction open
// on both sides until the worker goes, whatever way it is closed: one
// descriptor per connect/disconnect cycle on each side.  An endpoint made
// through the listener is paired with one this side makes from the peer's
// connection request; when the peer closes its endpoint (or dies) ours
// fails with "connection reset", and we close it too: both sides are back
// where they started.
//
// Every call, and every callback (which run inside ucp_worker_progress), is
// made holding the worker's mutex.  The callbacks only queue; Serve, called
// by the progress thread after each progress round, does the work.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"

namespace hixl::transport::ucx {

class Worker;

class Acceptor {
 public:
  // At most this many peers' endpoints at once; further connection requests
  // are rejected (docs/limits.md).
  static constexpr size_t kMaxAccepted = 4096;

  // Listens on ip (an IPv4 address; "0.0.0.0" is every interface) at a port
  // the system picks.  w->mu held.
  static Result<std::unique_ptr<Acceptor>> Create(Worker* w, const std::string& ip);
  // Rejects what is queued, closes every accepted endpoint (forced, bounded)
  // and stops listening.  w->mu held; no progress thread runs any more.
  ~Acceptor();
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  uint16_t port() const { return port_; }
  // The endpoints accepted and not yet closed (for tests and limits).
  size_t accepted() const { return eps_.size(); }

  // Makes the endpoints of the connection requests queued, and closes those
  // that failed (their peer closed its side or died).  w->mu held.
  void Serve();

 private:
  explicit Acceptor(Worker* w) : w_(w) {}
  static void OnConnRequest(ucp_conn_request_h request, void* arg);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  void Accept(ucp_conn_request_h request);
  void Close(ucp_ep_h ep);

  Worker* const w_;
  ucp_listener_h listener_ = nullptr;
  uint16_t port_ = 0;
  bool warned_full_ = false;
  std::vector<ucp_conn_request_h> requests_;  // queued by OnConnRequest
  std::vector<ucp_ep_h> failed_;              // queued by OnEndpointError
  std::set<ucp_ep_h> eps_;                    // accepted, not yet closed
};

}  // namespace hixl::transport::ucx

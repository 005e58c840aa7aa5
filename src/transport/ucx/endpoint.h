// Peers of the ucx transport: each one's published address and, made on
// first need, the UCP endpoint to it; endpoint failure, flush and close.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "base/socket.h"
#include "transport/ucx/worker.h"

namespace hixl::transport::ucx {

struct UcxKey;

struct Peer {
  Peer(std::shared_ptr<Worker> w, int rank, std::string host, std::string address)
      : w(std::move(w)), rank(rank), host(std::move(host)), address(std::move(address)) {}
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  // Closes the endpoint if Disconnect did not.  Keys unpacked with it hold
  // the Peer, so none is left when this runs.  Takes w->mu.
  ~Peer();

  std::string Name() const { return fmt::format("rank {} (host {})", rank, host); }

  const std::shared_ptr<Worker> w;
  const int rank;
  const std::string host;
  const std::string address;  // the peer's UCP worker address
  // The peer's listener, where the front door said where the peer is:
  // the endpoint is made there (listener.h); else from `address`.
  std::string listener_ip;
  uint16_t listener_port = 0;

  // Guarded by w->mu.
  ucp_ep_h ep = nullptr;
  bool closed = false;             // Disconnect ran: every call with its keys fails
  std::set<UcxKey*> keys;          // the keys unpacked with ep that still hold an rkey
  uint64_t outstanding = 0;        // put/get requests started and not yet completed
  uint64_t flushing = 0;           // endpoint flushes started and not yet completed
  bool dirty = false;              // operations started since the last flush
  ucs_status_t op_error = UCS_OK;  // the first failed operation or flush since the last flush
  // Set by the endpoint's error handler.
  std::atomic<ucs_status_t> ep_error{UCS_OK};
};

// The UCP endpoints this process has open, made to peers and accepted from
// them (listener.h), over every worker: what Disconnect must bring back
// down (tests read it).  Counted where they are made and closed.
int64_t LiveEndpoints();
void CountEndpoints(int64_t delta);
// Endpoint flushes started so far in this process (StartEndpointFlush):
// tests read it to see which endpoints a flush touched.
int64_t EndpointFlushes();

// UCX statuses that mean the peer, or the way to it, is gone.
bool IsPeerFailure(ucs_status_t s);
// The error of `what` (an operation, "flush", "connection") to p failing with st.
Status Failure(Peer* p, ucs_status_t st, const char* what);
// Ok, or why nothing may be started on p: Disconnect ran, or its endpoint
// failed (and stays failed: the peer is gone).  w->mu held.
Status Usable(Peer* p);

// Makes p's endpoint if there is none yet, with peer-failure handling
// unless the peer is this process itself.  w->mu held.
Status EnsureEndpoint(Peer* p, bool self, const std::string& net_dev);

// Starts a flush of p's endpoint (counted in p->flushing); completes
// once everything started on it before has completed, at the target as
// well.  w->mu held.
ucs_status_ptr_t StartEndpointFlush(Peer* p);

// Disconnect's part: completes what is in flight on p's endpoint (bounded
// by deadline), destroys the rkeys of its keys and closes the endpoint,
// gracefully when it was flushed (the peer's endpoint to us, which UCX
// pairs with ours on one connection, keeps working) and forced otherwise
// (local only; what is left is cancelled).  lock holds w->mu.
void CloseEndpoint(Peer* p, std::unique_lock<std::mutex>& lock, net::Deadline deadline);

}  // namespace hixl::transport::ucx

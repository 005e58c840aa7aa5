// The UCX transport, for peers on any host: UCP with the RMA and active-message
// features over whatever UCX finds (InfiniBand, RoCE, TCP, ...).
//
// * One UCP context and one worker per process.  Every UCP call on them is
//   made under one mutex, so any hixl thread may call in (the worker runs in
//   UCS_THREAD_MODE_SERIALIZED).
// * LocalAddress() is the worker's address (plus the host name, for
//   messages).  CanReach() accepts every address that parses: UCX reaches
//   everyone, so the core puts this transport after `shm`.
// * Endpoints are made on first need (the first key unpacked for a peer),
//   with UCP_ERR_HANDLING_MODE_PEER, so a dead peer becomes an error.
// * A region is mapped with ucp_mem_map where it already lies; its key blob
//   is the packed rkey.  A RemoteKey holds the unpacked rkey and keeps the
//   endpoint (and the worker) alive until it is destroyed.
// * Put/Get are ucp_put_nbx/ucp_get_nbx; Flush is a flush of every endpoint
//   used since the last one, progressed by the calling thread and bounded by
//   HIXL_TIMEOUT_MS.  Atomic is a request and a reply of hixl's own active
//   messages, after a worker fence (atomics.h).
// * Where the network does not do RMA in hardware (TCP: UCX emulates RMA
//   with active messages), the target must progress its worker.  A thread
//   does that, sleeping on the worker's event fd (UCP_FEATURE_WAKEUP): it
//   runs only when the network has something for it and never spins.
//
// Files: ucx_transport.cc (the transport), worker.h (context, worker,
// progress thread and bounded waits), endpoint.h (peers and their
// endpoints), memory.h (regions and keys), rma.h (put, get, flush),
// atomics.h.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace hixl::transport::ucx {

Result<std::unique_ptr<Transport>> CreateUcxTransport(Host* host, const Options& options);

// For tests: what a UCX transport's progress thread did (zeros for any
// other transport).  aside_sleeps: times it slept standing aside for a
// caller that progresses the worker itself (worker.h), or napping for the
// worker's mutex; caller_sleeps: times such a caller slept instead (the
// thread then serves the network again, and a reply may wake it).
struct ProgressCounts {
  int64_t aside_sleeps = 0;
  int64_t caller_sleeps = 0;
};
ProgressCounts CountProgress(const Transport& t);

}  // namespace hixl::transport::ucx

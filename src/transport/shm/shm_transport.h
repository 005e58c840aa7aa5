// The shared-memory transport, for peers on the same host.
//
// * Symmetric heap regions live in memfd segments; a peer receives a
//   segment's fd once (over a Unix socket, SCM_RIGHTS) and maps it, after
//   which a put or get there is a plain memcpy: no system call, no lock.
// * Other registered memory is reached with cross-memory attach
//   (process_vm_writev/readv): one copy, one system call.
// * Where the kernel refuses cross-memory attach (containers often do) or
//   HIXL_SHM_CMA=0, a relay takes over: the origin copies data into a ring of
//   slots in shared memory and rings the target's doorbell; the target's
//   progress thread checks the range against its registry and copies.
//
// "Same host" means the same boot, network namespace and PID namespace:
// processes in different network namespaces count as different hosts.
//
// Files: shm_transport.cc (the transport and its progress thread),
// peer.h (what is held per peer; keys), fd_channel.h (the request socket,
// SCM_RIGHTS), mapping.h (shared mappings, huge pages), cma.h (cross-memory
// attach), relay.h (the relay ring, both sides).
#pragma once

#include <memory>

#include "transport/transport.h"

namespace hixl::transport::shm {

Result<std::unique_ptr<Transport>> CreateShmTransport(Host* host, const Options& options);

}  // namespace hixl::transport::shm

// Cross-memory attach (process_vm_writev/readv): one copy, one system call,
// straight between this process's memory and a same-host peer's, for
// registered memory that is not in a shared segment.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/copy_pool.h"
#include "transport/shm/peer.h"
#include "transport/transport.h"

namespace hixl::transport::shm {

// Moves every piece (local <-> the peer's address `remote`), up to 64 per
// system call; a partial transfer resumes where it stopped.  From
// plan.split_min bytes in all, the bytes are split into parts that the copy
// pool moves at once (base/copy_pool.h), each by serial calls; the first
// error of a part is returned, after every part finished.  Complete when
// it returns.  kUnsupported: the kernel refuses cross-memory attach to the
// peer (before anything moved); the peer's use_cma is then cleared, with
// one log line, and the relay takes over.
Status CmaV(Peer* p, bool write, const Transport::Piece* pieces, size_t count, const copy::Plan& plan);

// One piece.
inline Status Cma(Peer* p, bool write, void* local, uint64_t remote, size_t n, const copy::Plan& plan) {
  const Transport::Piece one{nullptr, remote, local, n};
  return CmaV(p, write, &one, 1, plan);
}

}  // namespace hixl::transport::shm

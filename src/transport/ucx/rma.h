// Puts and gets over UCX (ucp_put_nbx/ucp_get_nbx) and their completion:
// which peers have transfers started since the last flush, and flushing
// their endpoints, bounded by HIXL_TIMEOUT_MS.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "base/socket.h"
#include "transport/transport.h"
#include "transport/ucx/endpoint.h"
#include "transport/ucx/memory.h"
#include "transport/ucx/worker.h"

namespace hixl::transport::ucx {

class Rma {
 public:
  Rma(Worker* w, const Host* host) : w_(w), host_(host) {}
  Rma(const Rma&) = delete;
  Rma& operator=(const Rma&) = delete;

  // Start a transfer with the key's peer.  w->mu held.
  Status Put(const UcxKey& k, const void* src, uint64_t dst, size_t n);
  Status Get(const UcxKey& k, uint64_t src, void* dst, size_t n);
  // After every put and atomic issued to the key's peer so far: n bytes of
  // data (n <= kMaxSignalData) for dst, and op with value on the word at
  // sig, in one active message (signals.h).  Completes like a put.
  // w->mu held.
  Status Signal(const UcxKey& k, const void* data, uint64_t dst, size_t n, uint64_t sig, AtomicOp op, uint64_t value);

  // One FlushAll (or Disconnect) at a time: a second caller waits for the
  // first and then flushes what was started meanwhile, so neither returns
  // early.  Held around FlushAll and Forget; not around FlushPeer, which
  // waits for any flush of its peer that another thread started, so that a
  // flush to one peer never queues behind a flush to another.
  std::mutex& flush_mu() { return flush_mu_; }
  // Complete every transfer started so far with every peer, or with p (null:
  // nothing to do); lock holds w->mu and is unlocked on return.
  Status FlushAll(std::unique_lock<std::mutex>& lock, net::Deadline deadline);
  Status FlushPeer(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Peer>& p, net::Deadline deadline) {
    return FlushSome(lock, {p}, deadline);
  }
  // The same for each of `peers` (null ones are skipped): a peer's lanes.
  Status FlushSome(std::unique_lock<std::mutex>& lock, std::vector<std::shared_ptr<Peer>> peers,
                   net::Deadline deadline);
  // Forgets p's transfers (Disconnect completes them).  w->mu held.
  void Forget(const std::shared_ptr<Peer>& p);
  // Lets go of every peer (the transport's destructor).  w->mu held.
  std::vector<std::shared_ptr<Peer>> TakeAll() { return std::move(dirty_); }

 private:
  // Accounts for an operation just started.  w->mu held.
  Status Started(const std::shared_ptr<Peer>& p, ucs_status_ptr_t r, const char* op, uint64_t remote, size_t n);
  void MarkDirty(const std::shared_ptr<Peer>& p);
  // Flushes the endpoints of `peers` that are dirty and waits for them
  // and their transfers until the deadline; unlocks `lock`.
  Status FlushPeers(std::unique_lock<std::mutex>& lock, std::vector<std::shared_ptr<Peer>> peers,
                    net::Deadline deadline);

  Worker* const w_;
  const Host* const host_;
  std::mutex flush_mu_;
  // Peers with operations since the last FlushAll (and those FlushPeer is
  // flushing); guarded by w_->mu.
  std::vector<std::shared_ptr<Peer>> dirty_;
};

}  // namespace hixl::transport::ucx

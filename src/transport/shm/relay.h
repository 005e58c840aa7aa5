// The relay: the shm path that needs neither a shared segment nor
// cross-memory attach (which the kernel or a container may refuse, and
// HIXL_SHM_CMA=0 turns off).  The origin makes a channel (a ring of slots
// in a memfd it passes to the target) on first need, copies a put's data
// into a slot, posts it and rings the target's doorbell; the target's
// progress thread checks the range against its registry, copies, and marks
// the slot done.  Gets and atomics go the same way, the other direction.
// Requests are served in ring order, so an atomic is ordered after the puts
// relayed before it.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "base/socket.h"
#include "transport/shm/mapping.h"
#include "transport/transport.h"

namespace hixl::transport::shm {

struct Peer;

// The origin side of the relay channel to one peer.
struct RelayOrigin {
  std::mutex mu;                  // one user of the channel at a time
  std::atomic<bool> open{false};  // the channel exists (written under mu)
  Mapping channel;
  net::Fd doorbell;        // the target's eventfd
  uint32_t next_slot = 0;  // the slot the next request goes to
  Status error;            // the first failure reported by the target since the last drain
};

// What the relay needs of the transport that uses it.
struct RelayContext {
  const Host* host;                 // its timeout bounds every wait
  std::atomic<int>* open_channels;  // channels open now, counted for the transport's Flush
};

// --- the origin side; each takes p->relay.mu

// Starts a put; it completes at FlushRelay.
Status RelayPut(Peer* p, const RelayContext& cx, const void* src, uint64_t dst, size_t n);
// A get, complete when it returns.
Status RelayGet(Peer* p, const RelayContext& cx, uint64_t src, void* dst, size_t n);
// An atomic on the peer's word at addr, complete when it returns.
Status RelayAtomic(Peer* p, const RelayContext& cx, AtomicOp op, uint64_t addr, uint64_t operand, uint64_t compare,
                   uint64_t* old);
// Completes every relayed transfer to p and returns the first failure since
// the last flush (Ok when no channel is open).
Status FlushRelay(Peer* p, const RelayContext& cx);
// Completes what is in flight (failures are logged, not returned) and
// releases the channel; the target lets go of its side when the request
// connection closes.
void CloseRelay(Peer* p, const RelayContext& cx);

// --- the target side (the progress thread)

// Maps a channel an origin passed (its memfd and size), checking it.
Result<Mapping> AcceptRelayChannel(int memfd, uint64_t size);
// The size of every relay channel (what AcceptRelayChannel wants).
uint64_t RelayChannelBytes();
// Serves the requests posted on `channel`, in ring order from *next on,
// each only if host says the range lies in a registered region.
void ServeRelay(const Mapping& channel, uint32_t* next, const Host& host);

}  // namespace hixl::transport::shm

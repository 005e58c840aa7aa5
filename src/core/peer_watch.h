// Learns of a peer process's death without waiting for a timeout: the
// process's one watcher thread, "hixl-watch", holds an idle, authenticated
// connection (base/auth.h, the control plane's handshake) to each watched
// peer's control endpoint and polls them all.  A peer that dies has its
// sockets closed by its kernel, so the connection ends at once; the watcher
// then dials the endpoint again, bounded by kRedialMs:
//  * refused (nothing listens there any more), or not accepted in time,
//    the peer is dead: its callback runs once, and the watch ends;
//  * accepted and authenticated, it is alive (its server dropped the idle
//    connection, e.g. to make room): the new connection is watched;
//  * accepted but the handshake did not finish in time (a stopped peer),
//    it is not known dead: the watcher tries again later, backing off.
// A first dial that is refused is a death too: a watched peer listened
// there when it was watched (it told us its endpoint, or answered on it).
//
// The connection sends nothing after its handshake, so it never binds an
// id on the peer's control server (bootstrap/control.h); under the server's
// connection cap it is among the first closed to make room, and is then
// dialled again.
//
// Dials are made one at a time, each bounded by kRedialMs: a peer that
// accepts but never greets (stopped) costs the watcher that long per try
// (backing off to one try per 8 s), and delays what it learns of others.
//
// Thread-safe.  Watch and Unwatch never block on the network (they may be
// called on the event loop thread); callbacks run on the watcher thread,
// one at a time, and must not call Unwatch nor block.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/auth.h"

namespace hixl::core {

class PeerWatch {
 public:
  // How long a re-dial after a closed connection may take.
  static constexpr int64_t kRedialMs = 500;

  // Why the peer is taken for dead, in words ("its control endpoint
  // 10.0.0.2:5000 closed the connection and refuses connections: ...").
  using OnDead = std::function<void(const std::string& why)>;

  // The process's watcher; its thread starts with the first holder and is
  // joined when the last lets go.  A child made by fork() gets its own.
  // nullptr (logged) when the thread cannot be started.
  static std::shared_ptr<PeerWatch> Acquire();
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // Starts watching the control endpoint host:port (dialled on the watcher
  // thread).  `who` names the peer in log lines.  Returns a key for Unwatch
  // (never 0).
  uint64_t Watch(const std::string& host, uint16_t port, const auth::MaybeSecret& secret, const std::string& who,
                 OnDead on_dead);
  // Stops watching and closes the connection (on the watcher thread, soon).
  // When it returns, the key's callback is not running and never runs.
  // Unknown keys (0, or already reported dead) are ignored.
  void Unwatch(uint64_t key);

  // How many peers are watched (for tests).
  size_t watched() const;

  struct Impl;

 private:
  explicit PeerWatch(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hixl::core

// A non-blocking server of length-prefixed frames ([u32 length][payload],
// as net::SendFrame writes them), or of fixed-size frames without a prefix,
// on the process's event loop (base/event_loop.h).  The store, the control
// plane and the shm transport's Unix socket use it.
//
// What it guarantees, whoever the clients are:
//  * nothing is read from a connection before it passed the handshake of
//    base/auth.h (with the server's secret, or the greeting alone);
//  * frames are read as bytes arrive: one client's partial frame never holds
//    up another; a frame's length is checked against the user's cap for its
//    type (its first byte) before its body is read, and the input buffer
//    grows only with bytes received;
//  * replies go to a bounded output buffer: a client that does not read
//    them is dropped;
//  * each listener has at most max_conns connections: past it, the oldest
//    connection that never identified itself (Bind) is closed to make room,
//    or else the newcomer is accepted and closed at once, so the kernel's
//    accept queue never fills;
//  * a connection that does not finish its handshake, stays half-way
//    through a frame, or (when asked) does not identify itself within its
//    timeout is closed; a connection that identified itself may stay idle
//    for ever (a job's ranks are idle between requests, legitimately);
//  * out of descriptors (EMFILE, ENFILE), accepting pauses for 100 ms;
//  * on a Unix socket, when asked: only processes of this user are let in
//    (SO_PEERCRED, before the handshake), and file descriptors passed with
//    SCM_RIGHTS are taken (at most one per frame, given to the frame they
//    came with) and can be passed with a reply.  The server never looks at
//    what a received descriptor refers to: its user does, off the loop.
// Every connection dropped for a reason other than its peer closing it is
// logged (warn) with the peer's address and the reason.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/auth.h"
#include "base/event_loop.h"
#include "base/socket.h"
#include "base/status.h"

namespace hixl::net {

struct FrameServerOptions {
  std::string name = "hixl server";  // in log lines: "<name> (port N): dropping <peer>: <why>"
  auth::MaybeSecret secret;
  auth::Kind kind = auth::Kind::kControl;
  size_t max_conns = 256;             // per listener
  size_t max_out = size_t{96} << 20;  // reply bytes queued per connection
  int64_t handshake_ms = 10000;       // to finish the handshake
  int64_t partial_frame_ms = 10000;   // to finish a frame once begun
  int64_t unbound_ms = 0;             // to call Bind after the handshake; 0: no limit
  // Frames of exactly this many bytes, without a length prefix, both ways
  // (the shm socket's fixed messages); 0: length-prefixed frames.  Replies
  // are then sent as they are given.
  uint32_t fixed_frame = 0;
  // Unix sockets: take descriptors passed with SCM_RIGHTS (Handlers::
  // on_frame_fd gets them) and let Send pass one.  A connection that passes
  // more than one with a frame is dropped.
  bool pass_fds = false;
  // Unix sockets: admit only processes that run as this process's user
  // (SO_PEERCRED), checked on accept, before the handshake.
  bool same_user = false;
  // The environment's overrides, for tests and operators:
  // HIXL_MAX_CONNECTIONS (max_conns), HIXL_HALF_OPEN_TIMEOUT_MS (the three
  // timeouts above that are set).  Invalid values are an error.
  Status ApplyEnv();
};

class FrameServer {
 public:
  using ConnId = uint64_t;
  struct Handlers {
    // The largest frame accepted, given its first byte (null while that
    // has not arrived: then the largest of any type).
    std::function<uint32_t(const uint8_t* first)> max_frame;
    // A whole frame (without its length).  The data lives until return.
    std::function<void(ConnId, std::string_view frame)> on_frame;
    // Instead of on_frame where set (with options.pass_fds): the frame and
    // the descriptor passed with it (not valid when none was).
    std::function<void(ConnId, std::string_view frame, Fd fd)> on_frame_fd;
    // The connection is gone (closed by its peer, or dropped); called once
    // per connection that had passed the handshake, never after
    // RemoveListener or the server's end.
    std::function<void(ConnId, const std::string& why)> on_close;
  };

  static Result<std::unique_ptr<FrameServer>> Create(FrameServerOptions options);
  ~FrameServer();  // closes every socket; must not be called from a handler
  FrameServer(const FrameServer&) = delete;
  FrameServer& operator=(const FrameServer&) = delete;

  ev::EventLoop& loop() const;

  struct Listener {
    int id = 0;
    uint16_t port = 0;
  };
  // Serves `listening` (a bound, listening socket, TCP or Unix; made
  // non-blocking here).  A Unix socket's port is 0.
  // Thread-safe.
  Result<Listener> AddListener(Fd listening, Handlers handlers);
  // Closes the listener and its connections; its handlers never run after
  // it returns.  Thread-safe (inline on the loop thread).
  void RemoveListener(int id);

  // On the loop thread only (from the handlers, or loop().Call):
  // Queues a reply frame; false when the connection is gone (or was just
  // dropped for not reading its replies).  fd_to_pass >= 0 (options.pass_fds
  // only): a copy of it goes with the frame's first byte.
  bool Send(ConnId id, std::string_view payload, int fd_to_pass = -1);
  // Closes the connection with a warning naming why; on_close runs.
  void Drop(ConnId id, const std::string& why);
  // The connection identified itself: the unbound timeout no longer applies.
  void Bind(ConnId id);
  // While paused, no frame of the connection is handed over (bytes are
  // still read, up to one largest frame, so that its close is seen).
  void Pause(ConnId id, bool paused);
  // True when the connection is gone, or its peer closed it (an end not
  // seen yet is seen now, and the connection closed: on_close runs).
  bool Gone(ConnId id);
  // The peer's address ("" when gone).
  std::string Peer(ConnId id) const;
  // Live connections of a listener (for tests and caps).
  size_t Connections(int listener) const;

  struct Impl;

 private:
  explicit FrameServer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace hixl::net

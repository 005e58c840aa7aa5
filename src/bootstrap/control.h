// The control plane between peers: a process runs one ControlServer (on
// the process's event loop, base/event_loop.h) that answers small requests from peers, such as
// "send me your region table" or "forget this region".  The server may
// listen on several sockets, one per front door (an engine listens where
// its user said, the world on a free port): each listener has its own
// handler, and a request is answered by the handler of the listener that
// accepted its connection.  Requests are sent with a ControlClient, one
// connection per peer, by the calling thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "base/auth.h"
#include "base/socket.h"
#include "base/status.h"

namespace hixl::bootstrap {

// What a handler answers: a reply now (a Result, a reply string or an error
// Status, as a handler returns them), or Later(work): `work` runs on one of
// the server's worker threads, off the event loop, and its result is the
// reply.  Until that reply is sent, the connection's further requests wait
// (nothing more of it is read beyond one frame); every other connection is
// served meanwhile.  A connection has at most one answer pending, and the
// queued work of a connection that closes is dropped unrun, so the work
// waiting is bounded by the listeners' connection caps; at most
// kControlWorkers pieces of work run at once (threads "hixl-deferred",
// started on demand).  `work` must be bounded in time: RemoveListener and
// the server's destructor wait for it.  It must not call RemoveListener.
class ControlAnswer {
 public:
  using Work = std::function<Result<std::string>()>;
  ControlAnswer(Result<std::string> now) : now_(std::move(now)) {}  // NOLINT(runtime/explicit)
  ControlAnswer(std::string reply) : now_(std::move(reply)) {}      // NOLINT(runtime/explicit)
  ControlAnswer(Status error) : now_(std::move(error)) {}           // NOLINT(runtime/explicit)
  static ControlAnswer Later(Work work) { return ControlAnswer(std::move(work)); }

  bool later() const { return static_cast<bool>(work_); }
  Result<std::string>& now() { return now_; }  // when !later()
  Work& work() { return work_; }               // when later()

 private:
  // An empty `work` answers an error at once.
  explicit ControlAnswer(Work work)
      : now_(work ? Result<std::string>(std::string())
                  : Result<std::string>(Status(Errc::kInternal, "a deferred control answer without work"))),
        work_(std::move(work)) {}
  Result<std::string> now_;
  Work work_;
};

// How many deferred answers (ControlAnswer::Later) run at once, per server.
constexpr size_t kControlWorkers = 4;

// Runs on the process's event loop thread; the answer (or its error) goes
// back to the caller.  `from` is the id the caller sent (its meaning is the
// listener's front door's: a world rank, an engine's random connection id;
// -1 is anonymous).  The server binds each connection to the `from` of its
// first request and refuses a later one naming another, and refuses a second
// live connection claiming an id that another connection holds (except -1),
// so a handler may take `from` as the connection's identity; whether that id
// means anything is the handler's to check.  A handler must not block, least
// of all on a control request of its own (the one thread serves every
// listener and the store): what must wait answers Later.
using ControlHandler = std::function<ControlAnswer(int64_t from, uint8_t type, std::string_view payload)>;

// The largest request frame a server reads and the largest reply frame a
// client reads (a region table of many regions is the largest reply).  A
// longer header ends the connection before its body is read.  Handlers
// check each message type's own, smaller, limit.
constexpr uint32_t kMaxControlRequest = 1u << 20;
constexpr uint32_t kMaxControlReply = 64u << 20;

// Served on the process's event loop thread, "hixl-loop" (base/event_loop.h),
// through base/frame_server.h: its caps and timeouts are in docs/limits.md.
class ControlServer {
 public:
  // A server without listeners yet (AddListener adds them).  With a
  // secret, every connection must prove it (base/auth.h) before a request
  // is read; one that fails is closed, with a warning naming its address.
  static Result<std::unique_ptr<ControlServer>> Create(const auth::MaybeSecret& secret = std::nullopt);
  // A server with one listener on host:port (port 0: a free one).
  static Result<std::unique_ptr<ControlServer>> Start(const std::string& host, ControlHandler handler,
                                                      uint16_t port = 0,
                                                      const auth::MaybeSecret& secret = std::nullopt);
  // Closes every socket, drops deferred work not started and waits for the
  // work running; must not be called from a handler or deferred work.
  ~ControlServer();

  struct Listener {
    int id = 0;
    uint16_t port = 0;
  };
  // Listens on host:port (0: a free port); requests on connections accepted
  // there go to `handler`.  Thread-safe.
  Result<Listener> AddListener(const std::string& host, uint16_t port, ControlHandler handler);
  // Closes the listener and every connection it accepted.  When this
  // returns, its handler is not running and never runs again, and neither
  // is the deferred work of its connections (work not started is dropped;
  // work running is waited for).  Thread-safe; must not be called from a
  // handler or deferred work.
  void RemoveListener(int id);
  // The port of the first listener (0 when none).
  uint16_t port() const;

 private:
  struct Impl;
  explicit ControlServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A connection to one peer's ControlServer, made on first use.  Thread-safe
// (calls are serialized; a call's wait for its turn counts in its timeout).  After a connection failure every call
// fails with kPeerFailed.
class ControlClient {
 public:
  // The connection proves `secret` (base/auth.h) before its first request;
  // the server must have the same secret (or both none).
  ControlClient(int64_t my_rank, int64_t peer_rank, std::string host, uint16_t port,
                const auth::MaybeSecret& secret = std::nullopt)
      : ControlClient(my_rank, peer_rank, std::move(host), port, "rank " + std::to_string(peer_rank), secret) {}
  // `peer_name` names the peer in error messages ("rank 3", "engine 10.0.0.1:5000").
  // `my_rank` is the `from` of every request (the id the peer knows us by).
  ControlClient(int64_t my_rank, int64_t peer_rank, std::string host, uint16_t port, std::string peer_name,
                const auth::MaybeSecret& secret = std::nullopt)
      : my_rank_(my_rank),
        peer_(peer_rank),
        host_(std::move(host)),
        port_(port),
        name_(std::move(peer_name)),
        secret_(secret) {}
  // Connects now if not connected (Call connects on first need otherwise):
  // kTimeout when nobody accepted at host:port before the timeout, another
  // code when the connection failed for another reason.  Blocks until then.
  Status Connect(int64_t timeout_ms);
  // One request and its reply, connecting first if needed.  A connection
  // that cannot be made, or fails mid-call, is kPeerFailed (kTimeout when
  // the reply did not come in time); either way later calls fail at once.
  Result<std::string> Call(uint8_t type, std::string_view payload, int64_t timeout_ms);
  void Close();
  // The id this client was made for (the peer's rank, or the id we know it by).
  int64_t peer() const { return peer_; }
  // Whether a connection to the peer was ever made and authenticated: a
  // peer whose address never answered is told apart from a slow one.
  bool answered_once() const { return answered_once_.load(std::memory_order_relaxed); }
  // The peer listens at host:port already (it said so itself): a refused
  // connection then means it is gone (kPeerFailed at once), not that it
  // is still starting.  Call before the first call.
  void PeerListensAlready() { listens_already_ = true; }

 private:
  // The turn held; *reached (may be null): the TCP connection was made (a
  // failure after it is the handshake's).
  Status ConnectLocked(net::Deadline deadline, bool* reached);
  const int64_t my_rank_;
  const int64_t peer_;
  const std::string host_;
  const uint16_t port_;
  const std::string name_;
  const auth::MaybeSecret secret_;
  // One call at a time: a call holds the turn (busy_) while it talks to the
  // peer.  A call waiting for its turn behind another (on a peer that does
  // not answer) still ends by its own deadline.  (Not std::timed_mutex:
  // its timed lock, pthread_mutex_clocklock, is unseen by ThreadSanitizer.)
  struct Turn;
  std::mutex mu_;
  std::condition_variable turn_cv_;
  bool busy_ = false;  // guarded by mu_; fd_ and failed_ belong to the holder of the turn
  net::Fd fd_;
  bool failed_ = false;
  std::atomic<bool> answered_once_{false};
  bool listens_already_ = false;
};

}  // namespace hixl::bootstrap

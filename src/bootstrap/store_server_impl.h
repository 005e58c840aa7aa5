// The store server's state (store_server.cc: its connections and life, on
// the process's event loop through base/frame_server.h; store_requests.cc:
// the requests it serves).  Internal to those two.
#pragma once

#include <uv.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/auth.h"
#include "base/frame_server.h"
#include "base/log.h"
#include "base/socket.h"
#include "bootstrap/store.h"
#include "bootstrap/store_kv.h"
#include "bootstrap/store_protocol.h"

namespace hixl::bootstrap {

using detail::Decoded;
using detail::kMaxFrame;
using detail::kMaxTimeoutMs;
using detail::Kv;
using detail::Op;
using detail::OpName;
using detail::Request;
using detail::WaitWhat;
using net::Clock;
using net::Deadline;
using std::chrono::milliseconds;

struct TcpStoreServer::Impl {
  struct Parked {
    Op op = Op::kGet;
    std::string key;  // GATHER: the prefix
    int64_t target = 0;
    int64_t timeout_ms = 0;
    Deadline deadline;
    // The key it waits on in `waiters`: its key, or a GATHER's first missing
    // key (`next` is that key's index; the keys before it exist).
    std::string watch;
    int64_t next = 0;
  };
  // A connection that passed the handshake and sent a frame; the socket
  // and its buffers are the frame server's.
  struct Conn {
    uint64_t id = 0;        // the frame server's ConnId
    int rank = -1;          // -1 until HELLO
    bool said_bye = false;  // left cleanly: its close is not a failure
    bool dead = false;      // gone; erased when the loop's callback ends
    std::optional<Parked> parked;
  };
  struct Failure {
    int rank;
    std::string why;
  };
  struct Outcome {
    Status status;
    std::string fields;
  };

  Impl(int world, uint16_t p) : world_size(world), port(p) {}
  ~Impl() { Stop(); }

  void Stop();

  // ---- the connections (store_server.cc), on the loop thread
  void OnFrame(uint64_t id, std::string_view payload);
  void OnClose(uint64_t id, const std::string& why);
  void OnTimer();
  // Sets the timer to the nearest parked deadline.
  void Rearm();
  void Reply(Conn& c, const Status& st, std::string_view fields = {});
  // The connection is gone (or unusable).  A rank that had not said BYE has
  // failed.
  void Drop(Conn& c, const std::string& why);
  // Runs fn as one callback of the loop: the connections that went in it
  // are erased at its end (not in a nested one, which may hold them).
  template <typename Fn>
  void Turn(Fn&& fn) {
    ++depth;
    fn();
    if (--depth == 0) Sweep();
  }
  void Sweep();

  // ---- requests (store_requests.cc)
  void Handle(Conn& c, std::string_view payload);
  void Malformed(Conn& c, Op op);
  // Names the connection's peer in log lines.
  std::string Who(const Conn& c) const;
  void Hello(Conn& c, int32_t rank);
  // The reply for a blocking request if it can be given now; otherwise
  // sets p.watch to the key it waits on.
  std::optional<Outcome> TryComplete(Parked& p) const;
  Status FailedStatus(const Conn& c, const Parked& p) const;
  Status TimeoutStatus(const Conn& c, const Parked& p) const;
  void Park(Conn& c, Parked p);
  void Unpark(Conn& c);
  void Unwatch(uint64_t id, const std::string& key);
  // key changed: answer the requests parked on it that are now satisfied.
  void Notify(const std::string& key);
  void ExpireDeadlines();
  void MarkFailed(int rank, const std::string& why);

  const int world_size;
  const uint16_t port;
  std::unique_ptr<net::FrameServer> fs;
  int listener = 0;  // fs's
  std::shared_ptr<ev::EventLoop> loop;
  uv_timer_t* timer = nullptr;  // parked deadlines; freed by its close callback

  // Owned by the loop thread.
  std::map<uint64_t, std::unique_ptr<Conn>> conns;
  Kv kv;
  std::unordered_map<std::string, std::set<uint64_t>> waiters;  // key -> parked connections
  std::set<std::pair<Deadline, uint64_t>> deadlines;            // parked connections by deadline
  std::vector<Failure> failed;                                  // in the order they happened
  std::vector<uint64_t> dead;                                   // to erase at the end of the callback
  int depth = 0;                                                // Turn()s running
};

}  // namespace hixl::bootstrap

// The store server's state (store_server.cc: its poll loop and life;
// store_requests.cc: the requests it serves).  Internal to those two.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/auth.h"
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
    std::string key;
    int64_t target = 0;
    int64_t timeout_ms = 0;
    Deadline deadline;
  };
  struct Conn {
    uint64_t id = 0;
    net::Fd fd;
    int rank = -1;          // -1 until HELLO
    bool said_bye = false;  // left cleanly: its close is not a failure
    bool dead = false;      // dropped; erased at the end of the loop iteration
    std::string in;         // received bytes not yet handled
    std::string out;        // replies not yet sent, from out_off on
    size_t out_off = 0;
    std::optional<Parked> parked;
    std::unique_ptr<auth::ServerHandshake> hs;  // until it has authenticated
    std::string peer;                           // its address, for log lines
  };
  struct Failure {
    int rank;
    std::string why;
  };
  struct Outcome {
    Status status;
    std::string fields;
  };

  Impl(int world, uint16_t p, net::Fd lfd, net::Fd wfd, const auth::MaybeSecret& s)
      : world_size(world), port(p), listen_fd(std::move(lfd)), wake_fd(std::move(wfd)), secret(s) {}
  ~Impl() { Stop(); }

  void Stop();

  // ---- the loop (store_server.cc)
  void Run();
  // Milliseconds until the nearest parked deadline (rounded up, so the loop
  // never wakes early and spins), or -1 when nothing is parked.
  int PollTimeoutMs() const;
  void AcceptAll();
  // Reads the handshake's bytes, never more; a peer that fails is closed.
  void Authenticate(Conn& c);
  void Refuse(Conn& c, const std::string& why);
  void ReadFrom(Conn& c);
  void ProcessInput(Conn& c);
  void Flush(Conn& c);
  void Reply(Conn& c, const Status& st, std::string_view fields = {});
  // The connection is gone (or unusable).  A rank that had not said BYE has
  // failed.
  void Drop(Conn& c, const std::string& why);
  void Sweep();

  // ---- requests (store_requests.cc)
  void Handle(Conn& c, std::string_view payload);
  void Malformed(Conn& c, Op op);
  // Names the connection's peer in log lines.
  static std::string Who(const Conn& c);
  void Hello(Conn& c, int32_t rank);
  // The reply for a blocking request if it can be given now.
  std::optional<Outcome> TryComplete(const Parked& p) const;
  Status FailedStatus(const Conn& c, const Parked& p) const;
  Status TimeoutStatus(const Conn& c, const Parked& p) const;
  void Park(Conn& c, Parked p);
  void Unpark(Conn& c);
  // key changed: answer the requests parked on it that are now satisfied.
  void Notify(const std::string& key);
  void ExpireDeadlines();
  void MarkFailed(int rank, const std::string& why);

  const int world_size;
  const uint16_t port;
  net::Fd listen_fd;
  net::Fd wake_fd;
  std::thread thread;

  // Owned by the loop thread.
  std::map<uint64_t, std::unique_ptr<Conn>> conns;
  uint64_t next_id = 1;
  Kv kv;
  std::unordered_map<std::string, std::set<uint64_t>> waiters;  // key -> parked connections
  std::set<std::pair<Deadline, uint64_t>> deadlines;            // parked connections by deadline
  std::vector<Failure> failed;                                  // in the order they happened
  std::vector<uint64_t> dead;                                   // to erase at the end of the iteration
  std::optional<Deadline> accept_resume;                        // accepting paused until then
  std::set<std::pair<Deadline, uint64_t>> handshakes;           // connections authenticating, by deadline
  const auth::MaybeSecret secret;
};

}  // namespace hixl::bootstrap

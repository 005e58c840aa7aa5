// TcpStoreServer: the store's server, run by rank 0 on a thread of its own.
//
// One thread runs a poll() loop over an eventfd (to stop it), the listening
// socket and every client connection.  All sockets are non-blocking; input
// and output are buffered per connection, so a slow or stalled client holds
// up nobody else.  Everything below is touched by that thread only, apart
// from the constructor and Stop().  The wire format is in store_protocol.h.
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

  void Stop() {
    if (thread.joinable()) {
      uint64_t one = 1;
      while (::write(wake_fd.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
      }
      thread.join();
    }
    conns.clear();  // closes every connection: clients see the server gone
    listen_fd.Reset();
  }

  // ---- the loop

  void Run() {
    std::vector<pollfd> pfds;
    std::vector<Conn*> polled;
    while (true) {
      pfds.clear();
      polled.clear();
      pfds.push_back({wake_fd.get(), POLLIN, 0});
      if (accept_resume && Clock::now() >= *accept_resume) accept_resume.reset();
      // A negative fd is ignored by poll: accepting is paused after EMFILE.
      pfds.push_back({accept_resume ? -1 : listen_fd.get(), POLLIN, 0});
      for (auto& [id, c] : conns) {
        short events = POLLIN;
        if (c->out_off < c->out.size()) events |= POLLOUT;
        pfds.push_back({c->fd.get(), events, 0});
        polled.push_back(c.get());
      }
      int rc = ::poll(pfds.data(), pfds.size(), PollTimeoutMs());
      if (rc < 0) {
        if (errno == EINTR) continue;
        // Cannot happen short of running out of memory.  Close everything so
        // that clients fail at once instead of waiting for their timeouts.
        conns.clear();
        listen_fd.Reset();
        return;
      }
      if (pfds[0].revents != 0) return;  // Stop()
      if (pfds[1].revents != 0) AcceptAll();
      for (size_t i = 0; i < polled.size(); ++i) {
        Conn& c = *polled[i];
        short re = pfds[i + 2].revents;
        if (!c.dead && c.hs) {  // nothing else is read before the handshake
          if (re & (POLLIN | POLLHUP | POLLERR)) Authenticate(c);
          continue;
        }
        if (!c.dead && (re & POLLOUT)) Flush(c);
        if (!c.dead && (re & (POLLIN | POLLHUP | POLLERR))) ReadFrom(c);
      }
      ExpireDeadlines();
      Sweep();
    }
  }

  // Milliseconds until the nearest parked deadline (rounded up, so the loop
  // never wakes early and spins), or -1 when nothing is parked.
  int PollTimeoutMs() const {
    std::optional<Deadline> next;
    if (!deadlines.empty()) next = deadlines.begin()->first;
    if (!handshakes.empty() && (!next || handshakes.begin()->first < *next)) next = handshakes.begin()->first;
    if (accept_resume && (!next || *accept_resume < *next)) next = accept_resume;
    if (!next) return -1;
    auto left = *next - Clock::now();
    if (left <= Clock::duration::zero()) return 0;
    int64_t ms = std::chrono::ceil<milliseconds>(left).count();
    return static_cast<int>(std::min<int64_t>(ms, int64_t{1} << 30));
  }

  void AcceptAll() {
    for (int i = 0; i < 64; ++i) {
      int fd = ::accept4(listen_fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: the pending connection stays queued and would
          // wake poll at once forever; pause accepting for a moment instead.
          accept_resume = Clock::now() + milliseconds(100);
        }
        return;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<Conn>();
      c->id = next_id++;
      c->fd = net::Fd(fd);
      c->peer = auth::PeerName(fd);
      c->hs = std::make_unique<auth::ServerHandshake>(secret, auth::Kind::kStore);
      if (c->hs->Start(fd) == auth::ServerHandshake::Step::kFailed) {
        HIXL_LOG_WARN("hixl store (port {}): refused {}: {}", port, c->peer, c->hs->error());
        continue;
      }
      if (c->hs->done()) {
        c->hs.reset();
      } else {
        handshakes.emplace(c->hs->deadline(), c->id);
      }
      conns.emplace(c->id, std::move(c));
    }
  }

  // Reads the handshake's bytes, never more; a peer that fails is closed.
  void Authenticate(Conn& c) {
    const auth::ServerHandshake::Step step = c.hs->OnReadable(c.fd.get());
    if (step == auth::ServerHandshake::Step::kWaiting) return;
    if (step == auth::ServerHandshake::Step::kFailed) return Refuse(c, c.hs->error());
    handshakes.erase({c.hs->deadline(), c.id});
    c.hs.reset();
  }

  void Refuse(Conn& c, const std::string& why) {
    HIXL_LOG_WARN("hixl store (port {}): refused {}: {}", port, c.peer, why);
    Drop(c, why);
  }

  void ReadFrom(Conn& c) {
    char buf[64 * 1024];
    size_t budget = size_t{4} << 20;  // then let the others have a turn
    while (budget > 0) {
      ssize_t k = ::recv(c.fd.get(), buf, sizeof(buf), 0);
      if (k > 0) {
        if (!c.said_bye) c.in.append(buf, static_cast<size_t>(k));
        budget -= std::min(budget, static_cast<size_t>(k));
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      // EOF or a socket error: handle what came before it, then drop.
      ProcessInput(c);
      Drop(c, k == 0 ? std::string("its connection to the store closed")
                     : fmt::format("its connection to the store failed: {}", std::strerror(errno)));
      return;
    }
    ProcessInput(c);
  }

  void ProcessInput(Conn& c) {
    size_t off = 0;
    while (!c.dead && !c.parked && !c.said_bye && c.in.size() - off >= 4) {
      uint32_t n = 0;
      std::memcpy(&n, c.in.data() + off, 4);
      // Checked before the body arrives: the largest request of any type,
      // then, once its type byte is here, the largest of that type.
      const bool have_op = n > 0 && c.in.size() - off > 4;
      const uint32_t limit = have_op ? detail::MaxRequestFrame(static_cast<Op>(c.in[off + 4])) : kMaxFrame;
      if (n > limit) {
        const std::string what = have_op ? OpName(static_cast<Op>(c.in[off + 4])) : "request";
        const std::string why = fmt::format("it sent a {} frame of {} bytes (at most {})", what, n, limit);
        HIXL_LOG_WARN("store: dropping {}: {}", Who(c), why);
        Drop(c, why);
        return;
      }
      if (c.in.size() - off - 4 < n) break;
      std::string_view payload(c.in.data() + off + 4, n);
      off += 4 + size_t{n};
      Handle(c, payload);
    }
    if (c.said_bye) {
      c.in.clear();
    } else if (off > 0) {
      c.in.erase(0, off);
    }
  }

  void Flush(Conn& c) {
    while (!c.dead && c.out_off < c.out.size()) {
      ssize_t k = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        c.out_off += static_cast<size_t>(k);
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;  // POLLOUT will resume
      Drop(c, fmt::format("its connection to the store failed: {}", std::strerror(errno)));
      return;
    }
    if (c.out_off == c.out.size()) {
      c.out.clear();
      c.out_off = 0;
    }
  }

  void Reply(Conn& c, const Status& st, std::string_view fields = {}) {
    if (c.dead) return;
    const std::string payload = detail::EncodeReply(st, fields);
    uint32_t n = static_cast<uint32_t>(payload.size());
    c.out.append(reinterpret_cast<const char*>(&n), 4);
    c.out.append(payload);
    Flush(c);
  }

  // The connection is gone (or unusable).  A rank that had not said BYE has
  // failed.
  void Drop(Conn& c, const std::string& why) {
    if (c.dead) return;
    c.dead = true;
    Unpark(c);
    if (c.hs) handshakes.erase({c.hs->deadline(), c.id});
    dead.push_back(c.id);
    if (c.rank >= 0 && !c.said_bye) MarkFailed(c.rank, why);
  }

  void Sweep() {
    if (!dead.empty() && accept_resume) accept_resume.reset();  // a descriptor came free
    for (uint64_t id : dead) conns.erase(id);
    dead.clear();
  }

  // ---- requests

  void Handle(Conn& c, std::string_view payload) {
    Request q;
    const Decoded d = detail::DecodeRequest(payload, &q);
    if (d == Decoded::kEmpty) {
      Reply(c, Err(Errc::kBootstrap, "the store received an empty request"));
      return;
    }
    const Op op = q.op;
    if (d == Decoded::kBadKey) return Malformed(c, op);
    if (op != Op::kHello && c.rank < 0) {
      Reply(c, Err(Errc::kBootstrap, "the store received {} before HELLO on a new connection", OpName(op)));
      return;
    }
    if (d == Decoded::kBadFields) return Malformed(c, op);
    switch (op) {
      case Op::kHello: return Hello(c, q.rank);
      case Op::kSet:
        kv.Set(q.key, std::move(q.value));
        Reply(c, Status::Ok());
        return Notify(q.key);
      case Op::kGet:
      case Op::kWaitAtLeast: {
        Parked p;
        p.op = op;
        p.target = q.target;
        p.timeout_ms = std::clamp<int64_t>(q.timeout_ms, 0, kMaxTimeoutMs);
        p.deadline = Clock::now() + milliseconds(p.timeout_ms);
        p.key = std::move(q.key);
        if (std::optional<Outcome> o = TryComplete(p)) return Reply(c, o->status, o->fields);
        return Park(c, std::move(p));
      }
      case Op::kAdd: {
        Result<int64_t> sum = kv.Add(q.key, q.delta);
        if (!sum.ok()) return Reply(c, sum.status());
        Reply(c, Status::Ok(), detail::EncodeInt(*sum));
        return Notify(q.key);
      }
      case Op::kDelete: kv.Erase(q.key); return Reply(c, Status::Ok());
      case Op::kBye:
        c.said_bye = true;  // from now on its close is a clean leave
        return Reply(c, Status::Ok());
    }
    Reply(c, Err(Errc::kBootstrap, "the store received an unknown request type {} from rank {}",
                 static_cast<int>(static_cast<uint8_t>(op)), c.rank));
  }

  void Malformed(Conn& c, Op op) {
    HIXL_LOG_WARN("store: a malformed {} request from {}", OpName(op), Who(c));
    Reply(c, Err(Errc::kBootstrap, "the store received a malformed {} request from {}", OpName(op),
                 c.rank >= 0 ? fmt::format("rank {}", c.rank) : std::string("a new connection")));
  }

  // Names the connection's peer in log lines.
  static std::string Who(const Conn& c) {
    return c.rank >= 0 ? fmt::format("rank {} ({})", c.rank, net::PeerAddress(c.fd.get()))
                       : fmt::format("a new connection from {}", net::PeerAddress(c.fd.get()));
  }

  void Hello(Conn& c, int32_t rank) {
    if (c.rank >= 0) {
      return Reply(
          c, Err(Errc::kBootstrap, "HELLO as rank {} on a store connection that is already rank {}", rank, c.rank));
    }
    if (rank < 0 || rank >= world_size) {
      return Reply(
          c, Err(Errc::kInvalidRank, "rank {} is out of range for the store of a world of {} ranks", rank, world_size));
    }
    for (auto& [id, o] : conns) {
      if (o.get() != &c && !o->dead && !o->said_bye && o->rank == rank) {
        return Reply(c, Err(Errc::kInvalidRank,
                            "rank {} is already connected to the store (do two processes use the "
                            "same rank?)",
                            rank));
      }
    }
    c.rank = rank;
    Reply(c, Status::Ok());
  }

  // The reply for a blocking request if it can be given now.
  std::optional<Outcome> TryComplete(const Parked& p) const {
    if (p.op == Op::kGet) {
      const std::string* v = kv.Find(p.key);
      if (!v) return std::nullopt;
      return Outcome{Status::Ok(), detail::EncodeValue(*v)};
    }
    Result<bool> done = kv.AtLeast(p.key, p.target);
    if (!done.ok()) return Outcome{done.status(), {}};
    if (*done) return Outcome{Status::Ok(), {}};
    return std::nullopt;
  }

  Status FailedStatus(const Conn& c, const Parked& p) const {
    const Failure& f = failed.front();
    std::string more;
    if (failed.size() > 1) more = fmt::format("; {} other ranks failed too", failed.size() - 1);
    return Err(Errc::kPeerFailed, "rank {} left without finalizing ({}){} while rank {} was waiting for {}", f.rank,
               f.why, more, c.rank, WaitWhat(p.op, p.key, p.target));
  }

  Status TimeoutStatus(const Conn& c, const Parked& p) const {
    std::string state = p.op == Op::kWaitAtLeast ? fmt::format(" ({})", kv.Describe(p.key)) : "";
    return Err(Errc::kTimeout, "rank {} timed out after {} ms waiting for {}{}", c.rank, p.timeout_ms,
               WaitWhat(p.op, p.key, p.target), state);
  }

  void Park(Conn& c, Parked p) {
    if (!failed.empty()) return Reply(c, FailedStatus(c, p));
    if (p.timeout_ms <= 0) return Reply(c, TimeoutStatus(c, p));
    waiters[p.key].insert(c.id);
    deadlines.emplace(p.deadline, c.id);
    c.parked = std::move(p);
  }

  void Unpark(Conn& c) {
    if (!c.parked) return;
    auto it = waiters.find(c.parked->key);
    if (it != waiters.end()) {
      it->second.erase(c.id);
      if (it->second.empty()) waiters.erase(it);
    }
    deadlines.erase({c.parked->deadline, c.id});
    c.parked.reset();
  }

  // key changed: answer the requests parked on it that are now satisfied.
  void Notify(const std::string& key) {
    auto it = waiters.find(key);
    if (it == waiters.end()) return;
    std::vector<uint64_t> ids(it->second.begin(), it->second.end());
    for (uint64_t id : ids) {
      auto ci = conns.find(id);
      if (ci == conns.end()) continue;
      Conn& w = *ci->second;
      if (w.dead || !w.parked || w.parked->key != key) continue;
      if (std::optional<Outcome> o = TryComplete(*w.parked)) {
        Unpark(w);
        Reply(w, o->status, o->fields);
      }
    }
  }

  void ExpireDeadlines() {
    const Deadline now = Clock::now();
    while (!handshakes.empty() && handshakes.begin()->first <= now) {
      auto ci = conns.find(handshakes.begin()->second);
      handshakes.erase(handshakes.begin());
      if (ci != conns.end()) Refuse(*ci->second, "it did not complete the authentication handshake in time");
    }
    while (!deadlines.empty() && deadlines.begin()->first <= now) {
      uint64_t id = deadlines.begin()->second;
      auto ci = conns.find(id);
      if (ci == conns.end() || !ci->second->parked) {
        deadlines.erase(deadlines.begin());  // cannot happen; never loop on it
        continue;
      }
      Conn& c = *ci->second;
      Status st = TimeoutStatus(c, *c.parked);
      Unpark(c);
      Reply(c, st);
    }
  }

  void MarkFailed(int rank, const std::string& why) {
    failed.push_back({rank, why});
    std::vector<uint64_t> ids;
    for (auto& [id, c] : conns) {
      if (c->parked && !c->dead) ids.push_back(id);
    }
    for (uint64_t id : ids) {
      auto ci = conns.find(id);
      if (ci == conns.end()) continue;
      Conn& w = *ci->second;
      if (w.dead || !w.parked) continue;
      Parked p = *w.parked;
      Unpark(w);
      Reply(w, FailedStatus(w, p));
    }
  }

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

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, uint16_t port, int world_size,
                                                              const auth::MaybeSecret& secret) {
  if (world_size <= 0) {
    return Err(Errc::kInvalidArg, "the store needs a world of at least 1 rank, got {}", world_size);
  }
  Result<net::Fd> lfd = net::Listen(host, port);
  if (!lfd.ok()) {
    return Err(Errc::kBootstrap, "the store cannot listen on {}:{}: {}", host, port, lfd.status().message());
  }
  int flags = ::fcntl(lfd->get(), F_GETFL);
  if (flags < 0 || ::fcntl(lfd->get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return Err(Errc::kBootstrap, "fcntl(O_NONBLOCK) on the store's socket failed: {}", std::strerror(errno));
  }
  HIXL_ASSIGN_OR_RETURN(uint16_t actual_port, net::LocalPort(lfd->get()));
  net::Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return Err(Errc::kInternal, "eventfd() for the store server failed: {}", std::strerror(errno));
  }
  auto impl = std::make_unique<Impl>(world_size, actual_port, std::move(*lfd), std::move(wake), secret);
  try {
    impl->thread = std::thread([p = impl.get()] { p->Run(); });
  } catch (const std::system_error& e) {
    return Err(Errc::kInternal, "cannot start the store server's thread: {}", e.what());
  }
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(impl)));
}

TcpStoreServer::TcpStoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpStoreServer::~TcpStoreServer() = default;  // Impl::~Impl stops and joins
uint16_t TcpStoreServer::port() const { return impl_->port; }

}  // namespace hixl::bootstrap

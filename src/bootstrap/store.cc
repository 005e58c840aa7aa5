// The rendezvous store: MemoryStore, TcpStoreServer and TcpStoreClient.
//
// Wire protocol (every message is a frame: 4-byte little-endian length, then
// the payload; integers inside are little-endian, strings are a u32 length
// followed by the bytes, as net::Writer / net::Reader lay them out):
//
//   request  = u8 op, fields
//     HELLO          i32 rank                  (first request on a connection)
//     SET            key, value
//     GET            key, i64 timeout_ms       (parked until key exists)
//     ADD            key, i64 delta
//     WAIT_AT_LEAST  key, i64 target, i64 timeout_ms   (parked until >= target)
//     DELETE         key
//     BYE                                      (clean leave; no more requests)
//   reply    = i32 code (0 = ok, else an hixl error code), message, fields
//     GET -> value; ADD -> i64 new value; the others -> nothing.
//
// A client sends one request at a time and waits for its reply, so replies
// need no ids.  The server parks blocking requests and answers them when they
// are satisfied, when their timeout passes, or when a rank fails (its
// connection closes without BYE).
#include "bootstrap/store.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bootstrap/socket.h"

namespace hixl::bootstrap {
namespace {

using net::Clock;
using net::Deadline;
using std::chrono::milliseconds;

// Longer timeouts are cut to this (a year), which keeps deadline arithmetic
// far from overflow.
constexpr int64_t kMaxTimeoutMs = int64_t{365} * 24 * 3600 * 1000;
// How much longer than its own timeout a client waits for the server's reply
// (the server answers a timed-out wait itself; this only catches a server
// that stopped answering without closing the connection).
constexpr int64_t kSlackMs = 3000;
// The bound on requests that do not wait (SET, ADD, DELETE, HELLO, BYE).
constexpr int64_t kIoTimeoutMs = 30000;
// Largest frame either side accepts (the same bound as net::RecvFrame).
constexpr uint32_t kMaxFrame = 1u << 30;

enum class Op : uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kWaitAtLeast = 5,
  kDelete = 6,
  kBye = 7,
};

const char* OpName(Op op) {
  switch (op) {
    case Op::kHello: return "HELLO";
    case Op::kSet: return "SET";
    case Op::kGet: return "GET";
    case Op::kAdd: return "ADD";
    case Op::kWaitAtLeast: return "WAIT_AT_LEAST";
    case Op::kDelete: return "DELETE";
    case Op::kBye: return "BYE";
  }
  return "UNKNOWN";
}

bool HasKey(Op op) {
  return op == Op::kSet || op == Op::kGet || op == Op::kAdd || op == Op::kWaitAtLeast ||
         op == Op::kDelete;
}

Deadline After(int64_t ms) {
  return Clock::now() + milliseconds(std::clamp<int64_t>(ms, 0, kMaxTimeoutMs + kSlackMs));
}

// A key (arbitrary bytes) made printable for messages: quoted, with
// non-printable bytes escaped and very long keys cut.
std::string Quote(std::string_view s) {
  constexpr size_t kMaxShown = 120;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '\'' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  out += '\'';
  if (s.size() > kMaxShown) out += fmt::format(" (cut, {} bytes in all)", s.size());
  return out;
}

std::optional<int64_t> ParseInt(std::string_view s) {
  int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || p != end) return std::nullopt;
  return v;
}

Status CheckTimeout(const char* what, const std::string& key, int64_t timeout_ms) {
  if (timeout_ms < 0) {
    return Err(Errc::kInvalidArg, "{} of key {}: timeout_ms must be >= 0, got {}", what, Quote(key),
               timeout_ms);
  }
  return Status::Ok();
}

// The key/value state shared by MemoryStore and the server (callers lock).
class Kv {
 public:
  void Set(const std::string& key, std::string value) { map_[key] = std::move(value); }
  const std::string* Find(const std::string& key) const {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }
  void Erase(const std::string& key) { map_.erase(key); }

  Result<int64_t> Add(const std::string& key, int64_t delta) {
    int64_t old = 0;
    if (const std::string* v = Find(key)) {
      std::optional<int64_t> n = ParseInt(*v);
      if (!n) {
        return Err(Errc::kInvalidArg, "cannot add {} to key {}: its value {} is not a decimal integer",
                   delta, Quote(key), Quote(*v));
      }
      old = *n;
    }
    int64_t sum = 0;
    if (__builtin_add_overflow(old, delta, &sum)) {
      return Err(Errc::kInvalidArg, "adding {} to key {} (value {}) overflows a 64-bit integer", delta,
                 Quote(key), old);
    }
    map_[key] = std::to_string(sum);
    return sum;
  }

  // Whether the integer at key (absent = 0) is >= target; an error when the
  // value is not an integer.
  Result<bool> AtLeast(const std::string& key, int64_t target) const {
    const std::string* v = Find(key);
    if (!v) return 0 >= target;
    std::optional<int64_t> n = ParseInt(*v);
    if (!n) {
      return Err(Errc::kInvalidArg,
                 "cannot wait for key {} to reach {}: its value {} is not a decimal integer",
                 Quote(key), target, Quote(*v));
    }
    return *n >= target;
  }

  // "its value is 3" / "it is not set", for timeout messages.
  std::string Describe(const std::string& key) const {
    const std::string* v = Find(key);
    return v ? fmt::format("its value is {}", Quote(*v)) : std::string("it is not set");
  }

 private:
  std::unordered_map<std::string, std::string> map_;
};

// A mutex that can be waited for until a deadline, for std::unique_lock.
// (Not std::timed_mutex: libstdc++ implements its try_lock_until with
// pthread_mutex_clocklock, which ThreadSanitizer does not intercept, so every
// unlock would be reported as an unlock of an unlocked mutex.)
class DeadlineMutex {
 public:
  void lock() { (void)try_lock_until(Deadline::max()); }
  bool try_lock_until(Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    if (deadline == Deadline::max()) {
      cv_.wait(lock, [&] { return !held_; });
    } else if (!cv_.wait_until(lock, deadline, [&] { return !held_; })) {
      return false;
    }
    held_ = true;
    return true;
  }
  void unlock() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
};

std::string WaitWhat(Op op, const std::string& key, int64_t target) {
  if (op == Op::kGet) return fmt::format("key {} to be set", Quote(key));
  return fmt::format("key {} to reach at least {}", Quote(key), target);
}

}  // namespace

// ---------------------------------------------------------------------------
// MemoryStore

struct MemoryStore::Impl {
  std::mutex mu;
  std::condition_variable cv;
  Kv kv;
};

MemoryStore::MemoryStore() : impl_(std::make_unique<Impl>()) {}
MemoryStore::~MemoryStore() = default;

Status MemoryStore::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->kv.Set(key, value);
  }
  impl_->cv.notify_all();
  return Status::Ok();
}

Result<std::string> MemoryStore::Get(const std::string& key, int64_t timeout_ms) {
  HIXL_RETURN_IF_ERROR(CheckTimeout("Get", key, timeout_ms));
  const Deadline deadline = After(timeout_ms);
  std::unique_lock<std::mutex> lock(impl_->mu);
  while (true) {
    if (const std::string* v = impl_->kv.Find(key)) return *v;
    if (Clock::now() >= deadline) {
      return Err(Errc::kTimeout, "timed out after {} ms waiting for {}", timeout_ms,
                 WaitWhat(Op::kGet, key, 0));
    }
    impl_->cv.wait_until(lock, deadline);
  }
}

Result<int64_t> MemoryStore::Add(const std::string& key, int64_t delta) {
  Result<int64_t> r = [&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    return impl_->kv.Add(key, delta);
  }();
  if (r.ok()) impl_->cv.notify_all();
  return r;
}

Status MemoryStore::WaitAtLeast(const std::string& key, int64_t target, int64_t timeout_ms) {
  HIXL_RETURN_IF_ERROR(CheckTimeout("WaitAtLeast", key, timeout_ms));
  const Deadline deadline = After(timeout_ms);
  std::unique_lock<std::mutex> lock(impl_->mu);
  while (true) {
    HIXL_ASSIGN_OR_RETURN(bool done, impl_->kv.AtLeast(key, target));
    if (done) return Status::Ok();
    if (Clock::now() >= deadline) {
      return Err(Errc::kTimeout, "timed out after {} ms waiting for {} ({})", timeout_ms,
                 WaitWhat(Op::kWaitAtLeast, key, target), impl_->kv.Describe(key));
    }
    impl_->cv.wait_until(lock, deadline);
  }
}

Status MemoryStore::Delete(const std::string& key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->kv.Erase(key);
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// TcpStoreServer
//
// One thread runs a poll() loop over an eventfd (to stop it), the listening
// socket and every client connection.  All sockets are non-blocking; input
// and output are buffered per connection, so a slow or stalled client holds
// up nobody else.  Everything below is touched by that thread only, apart
// from the constructor and Stop().

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
  };
  struct Failure {
    int rank;
    std::string why;
  };
  struct Outcome {
    Status status;
    std::string fields;
  };

  Impl(int world, uint16_t p, net::Fd lfd, net::Fd wfd)
      : world_size(world), port(p), listen_fd(std::move(lfd)), wake_fd(std::move(wfd)) {}
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
      conns.emplace(c->id, std::move(c));
    }
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
      if (n > kMaxFrame) {
        Drop(c, fmt::format("it sent a corrupt request (a frame of {} bytes)", n));
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
      ssize_t k = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
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
    net::Writer w;
    w.Put<int32_t>(st.raw_code());
    w.PutBytes(st.message());
    w.str().append(fields);
    uint32_t n = static_cast<uint32_t>(w.str().size());
    c.out.append(reinterpret_cast<const char*>(&n), 4);
    c.out.append(w.str());
    Flush(c);
  }

  // The connection is gone (or unusable).  A rank that had not said BYE has
  // failed.
  void Drop(Conn& c, const std::string& why) {
    if (c.dead) return;
    c.dead = true;
    Unpark(c);
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
    net::Reader r(payload);
    uint8_t raw = 0;
    if (!r.Get(&raw)) {
      Reply(c, Err(Errc::kBootstrap, "the store received an empty request"));
      return;
    }
    const Op op = static_cast<Op>(raw);
    std::string key;
    if (HasKey(op) && !r.GetBytes(&key)) return Malformed(c, op);
    if (op != Op::kHello && c.rank < 0) {
      Reply(c, Err(Errc::kBootstrap, "the store received {} before HELLO on a new connection",
                   OpName(op)));
      return;
    }
    switch (op) {
      case Op::kHello: {
        int32_t rank = 0;
        if (!r.Get(&rank) || !r.empty()) return Malformed(c, op);
        return Hello(c, rank);
      }
      case Op::kSet: {
        std::string value;
        if (!r.GetBytes(&value) || !r.empty()) return Malformed(c, op);
        kv.Set(key, std::move(value));
        Reply(c, Status::Ok());
        return Notify(key);
      }
      case Op::kGet:
      case Op::kWaitAtLeast: {
        Parked p;
        p.op = op;
        if (op == Op::kWaitAtLeast && !r.Get(&p.target)) return Malformed(c, op);
        if (!r.Get(&p.timeout_ms) || !r.empty()) return Malformed(c, op);
        p.timeout_ms = std::clamp<int64_t>(p.timeout_ms, 0, kMaxTimeoutMs);
        p.deadline = Clock::now() + milliseconds(p.timeout_ms);
        p.key = std::move(key);
        if (std::optional<Outcome> o = TryComplete(p)) return Reply(c, o->status, o->fields);
        return Park(c, std::move(p));
      }
      case Op::kAdd: {
        int64_t delta = 0;
        if (!r.Get(&delta) || !r.empty()) return Malformed(c, op);
        Result<int64_t> sum = kv.Add(key, delta);
        if (!sum.ok()) return Reply(c, sum.status());
        net::Writer w;
        w.Put<int64_t>(*sum);
        Reply(c, Status::Ok(), w.str());
        return Notify(key);
      }
      case Op::kDelete:
        if (!r.empty()) return Malformed(c, op);
        kv.Erase(key);
        return Reply(c, Status::Ok());
      case Op::kBye:
        if (!r.empty()) return Malformed(c, op);
        c.said_bye = true;  // from now on its close is a clean leave
        return Reply(c, Status::Ok());
    }
    Reply(c, Err(Errc::kBootstrap, "the store received an unknown request type {} from rank {}",
                 static_cast<int>(raw), c.rank));
  }

  void Malformed(Conn& c, Op op) {
    Reply(c, Err(Errc::kBootstrap, "the store received a malformed {} request from {}", OpName(op),
                 c.rank >= 0 ? fmt::format("rank {}", c.rank) : std::string("a new connection")));
  }

  void Hello(Conn& c, int32_t rank) {
    if (c.rank >= 0) {
      return Reply(c, Err(Errc::kBootstrap,
                          "HELLO as rank {} on a store connection that is already rank {}", rank,
                          c.rank));
    }
    if (rank < 0 || rank >= world_size) {
      return Reply(c, Err(Errc::kInvalidRank,
                          "rank {} is out of range for the store of a world of {} ranks", rank,
                          world_size));
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
      net::Writer w;
      w.PutBytes(*v);
      return Outcome{Status::Ok(), std::move(w.str())};
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
    return Err(Errc::kPeerFailed, "rank {} left without finalizing ({}){} while rank {} was waiting for {}",
               f.rank, f.why, more, c.rank, WaitWhat(p.op, p.key, p.target));
  }

  Status TimeoutStatus(const Conn& c, const Parked& p) const {
    std::string state = p.op == Op::kWaitAtLeast ? fmt::format(" ({})", kv.Describe(p.key)) : "";
    return Err(Errc::kTimeout, "rank {} timed out after {} ms waiting for {}{}", c.rank,
               p.timeout_ms, WaitWhat(p.op, p.key, p.target), state);
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
};

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, uint16_t port,
                                                              int world_size) {
  if (world_size <= 0) {
    return Err(Errc::kInvalidArg, "the store needs a world of at least 1 rank, got {}", world_size);
  }
  Result<net::Fd> lfd = net::Listen(host, port);
  if (!lfd.ok()) {
    return Err(Errc::kBootstrap, "the store cannot listen on {}:{}: {}", host, port,
               lfd.status().message());
  }
  int flags = ::fcntl(lfd->get(), F_GETFL);
  if (flags < 0 || ::fcntl(lfd->get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return Err(Errc::kBootstrap, "fcntl(O_NONBLOCK) on the store's socket failed: {}",
               std::strerror(errno));
  }
  HIXL_ASSIGN_OR_RETURN(uint16_t actual_port, net::LocalPort(lfd->get()));
  net::Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return Err(Errc::kInternal, "eventfd() for the store server failed: {}", std::strerror(errno));
  }
  auto impl = std::make_unique<Impl>(world_size, actual_port, std::move(*lfd), std::move(wake));
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

// ---------------------------------------------------------------------------
// TcpStoreClient

struct TcpStoreClient::Impl {
  Impl(std::string h, uint16_t p, int r, net::Fd f)
      : host(std::move(h)), port(p), rank(r), fd(std::move(f)) {}

  std::string What(Op op, const std::string& key) const {
    return HasKey(op) ? fmt::format("{} of key {}", OpName(op), Quote(key)) : OpName(op);
  }

  // One request and its reply.  wait_ms is the server-side wait of GET and
  // WAIT_AT_LEAST (appended to the request as the last field), nullopt for
  // the others.  Returns the reply's fields.
  Result<std::string> Call(Op op, const std::string& key, std::string_view fields,
                           std::optional<int64_t> wait_ms) {
    const Clock::time_point start = Clock::now();
    const int64_t bound_ms = (wait_ms ? std::min(*wait_ms, kMaxTimeoutMs) : kIoTimeoutMs) + kSlackMs;
    const Deadline deadline = start + milliseconds(bound_ms);
    std::unique_lock<DeadlineMutex> lock(mu, std::defer_lock);
    if (!lock.try_lock_until(deadline)) {
      return Err(Errc::kTimeout,
                 "{} (rank {}) timed out after {} ms: another thread's request on the same store "
                 "connection did not finish",
                 What(op, key), rank, bound_ms);
    }
    if (closed) {
      return Err(Errc::kNotInitialized, "{}: the store client of rank {} is closed", What(op, key), rank);
    }
    if (!broken.empty()) {
      return Err(Errc::kPeerFailed, "{}: the connection of rank {} to the store at {}:{} is lost ({})",
                 What(op, key), rank, host, port, broken);
    }
    std::optional<int64_t> server_wait;
    if (wait_ms) {
      int64_t spent = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
      server_wait = std::max<int64_t>(0, std::min(*wait_ms, kMaxTimeoutMs) - spent);
    }
    return CallLocked(op, key, fields, server_wait, deadline);
  }

  Result<std::string> CallLocked(Op op, const std::string& key, std::string_view fields,
                                 std::optional<int64_t> server_wait, Deadline deadline) {
    net::Writer w;
    w.Put<uint8_t>(static_cast<uint8_t>(op));
    if (HasKey(op)) w.PutBytes(key);
    w.str().append(fields);
    if (server_wait) w.Put<int64_t>(*server_wait);
    if (w.str().size() > kMaxFrame) {
      return Err(Errc::kInvalidArg, "{}: the request of {} bytes is too large for the store",
                 What(op, key), w.str().size());
    }
    Status sent = net::SendFrame(fd.get(), w.str(), deadline);
    if (!sent.ok()) return Lost(op, key, sent);
    Result<std::string> reply = net::RecvFrame(fd.get(), deadline);
    if (!reply.ok()) return Lost(op, key, reply.status());
    net::Reader r(*reply);
    int32_t code = 0;
    std::string message;
    if (!r.Get(&code) || !r.GetBytes(&message)) {
      return Lost(op, key, Err(Errc::kBootstrap, "malformed reply"));
    }
    if (code != 0) return Status(static_cast<Errc>(code), std::move(message));
    return reply->substr(sizeof(int32_t) + sizeof(uint32_t) + message.size());
  }

  // The connection failed mid-request: the stream can no longer be trusted,
  // so close it; every later request fails at once.
  Status Lost(Op op, const std::string& key, const Status& why) {
    fd.Reset();
    if (why.code() == Errc::kTimeout) {
      broken = fmt::format("no reply to {} in time", What(op, key));
      return Err(Errc::kTimeout,
                 "rank {} got no reply from the store at {}:{} to {} in time ({}); the connection is "
                 "closed",
                 rank, host, port, What(op, key), why.message());
    }
    broken = fmt::format("{} failed: {}", What(op, key), why.message());
    return Err(Errc::kPeerFailed,
               "rank {} lost its connection to the store at {}:{} during {}: {} (the store server, "
               "hosted by rank 0, has stopped or failed)",
               rank, host, port, What(op, key), why.message());
  }

  const std::string host;
  const uint16_t port;
  const int rank;
  DeadlineMutex mu;  // one request at a time on the connection
  net::Fd fd;
  bool closed = false;
  std::string broken;  // why the connection is unusable; empty while it is fine
};

Result<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(const std::string& host,
                                                                uint16_t port, int rank,
                                                                int64_t timeout_ms) {
  if (rank < 0) return Err(Errc::kInvalidRank, "cannot connect to the store as rank {}", rank);
  if (timeout_ms < 0) {
    return Err(Errc::kInvalidArg, "connecting to the store: timeout_ms must be >= 0, got {}", timeout_ms);
  }
  const Deadline deadline = After(timeout_ms);
  Result<net::Fd> fd = net::Connect(host, port, deadline);
  if (!fd.ok()) {
    return Status(fd.status().code(),
                  fmt::format("rank {} cannot reach the store at {}:{} within {} ms: {}", rank, host,
                              port, timeout_ms, fd.status().message()));
  }
  auto impl = std::make_unique<Impl>(host, port, rank, std::move(*fd));
  net::Writer w;
  w.Put<int32_t>(rank);
  // Connected: give the greeting at least the slack, however short the
  // timeout was.
  Status hello = impl->CallLocked(Op::kHello, {}, w.str(), std::nullopt,
                                  std::max(deadline, After(kSlackMs)))
                     .status();
  if (!hello.ok()) return hello;
  return std::unique_ptr<TcpStoreClient>(new TcpStoreClient(std::move(impl)));
}

TcpStoreClient::TcpStoreClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpStoreClient::~TcpStoreClient() = default;  // closing without BYE: a failure to the server

Status TcpStoreClient::Set(const std::string& key, const std::string& value) {
  net::Writer w;
  w.PutBytes(value);
  return impl_->Call(Op::kSet, key, w.str(), std::nullopt).status();
}

Result<std::string> TcpStoreClient::Get(const std::string& key, int64_t timeout_ms) {
  HIXL_RETURN_IF_ERROR(CheckTimeout("Get", key, timeout_ms));
  // (Not HIXL_ASSIGN_OR_RETURN into a std::string: GCC 12 then warns
  // -Wmaybe-uninitialized on the moved string, a known false positive.)
  Result<std::string> fields = impl_->Call(Op::kGet, key, {}, timeout_ms);
  if (!fields.ok()) return fields.status();
  net::Reader r(*fields);
  std::string value;
  if (!r.GetBytes(&value) || !r.empty()) {
    return Err(Errc::kBootstrap, "malformed reply from the store to GET of key {}", Quote(key));
  }
  return value;
}

Result<int64_t> TcpStoreClient::Add(const std::string& key, int64_t delta) {
  net::Writer w;
  w.Put<int64_t>(delta);
  Result<std::string> fields = impl_->Call(Op::kAdd, key, w.str(), std::nullopt);
  if (!fields.ok()) return fields.status();
  net::Reader r(*fields);
  int64_t sum = 0;
  if (!r.Get(&sum) || !r.empty()) {
    return Err(Errc::kBootstrap, "malformed reply from the store to ADD of key {}", Quote(key));
  }
  return sum;
}

Status TcpStoreClient::WaitAtLeast(const std::string& key, int64_t target, int64_t timeout_ms) {
  HIXL_RETURN_IF_ERROR(CheckTimeout("WaitAtLeast", key, timeout_ms));
  net::Writer w;
  w.Put<int64_t>(target);
  return impl_->Call(Op::kWaitAtLeast, key, w.str(), timeout_ms).status();
}

Status TcpStoreClient::Delete(const std::string& key) {
  return impl_->Call(Op::kDelete, key, {}, std::nullopt).status();
}

Status TcpStoreClient::Close() {
  Impl& m = *impl_;
  std::unique_lock<DeadlineMutex> lock(m.mu, std::defer_lock);
  if (!lock.try_lock_until(After(kIoTimeoutMs + kSlackMs))) {
    return Err(Errc::kTimeout,
               "rank {} cannot close its store connection: another thread's request on it did not "
               "finish",
               m.rank);
  }
  if (m.closed) return Status::Ok();
  m.closed = true;
  if (!m.broken.empty()) {
    return Err(Errc::kPeerFailed, "rank {} cannot say goodbye to the store at {}:{}: the connection is lost ({})",
               m.rank, m.host, m.port, m.broken);
  }
  Status st = m.CallLocked(Op::kBye, {}, {}, std::nullopt, After(kIoTimeoutMs + kSlackMs)).status();
  m.fd.Reset();
  return st;
}

}  // namespace hixl::bootstrap

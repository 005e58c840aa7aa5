#include "bootstrap/control.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "base/auth.h"
#include "base/log.h"

namespace hixl::bootstrap {

// Request frame: [u8 type][i32 from_rank][payload].
// Reply frame:   [i32 code][payload, or the error message when code != 0].
//
// The thread owns every socket.  Other threads hand it listeners to add and
// ids to remove (under mu, then a write to the eventfd); it applies them at
// the top of its loop and counts them applied, which RemoveListener awaits.

struct ControlServer::Impl {
  struct Listening {
    int id = 0;
    net::Fd fd;
    ControlHandler handler;
    uint16_t port = 0;
  };
  struct Conn {
    net::Fd fd;
    int listener = 0;
    std::unique_ptr<auth::ServerHandshake> hs;  // until it has authenticated
    std::string peer;                           // its address, for log lines
    uint16_t port = 0;                          // the listener's, for log lines
  };

  auth::MaybeSecret secret;  // set before the thread starts

  net::Fd wake;  // eventfd: work for the thread (changes, or stop)
  std::thread thread;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<Listening> to_add;  // guarded by mu
  std::vector<int> to_remove;     // guarded by mu
  uint64_t requested = 0;         // changes asked for; guarded by mu
  uint64_t applied = 0;           // changes the thread has applied; guarded by mu
  bool stop = false;              // guarded by mu
  bool running = true;            // the thread is serving; guarded by mu
  int next_id = 1;                // guarded by mu
  uint16_t first_port = 0;        // guarded by mu

  void Wake() {
    uint64_t one = 1;
    ssize_t w = ::write(wake.get(), &one, sizeof(one));
    (void)w;
  }

  void Run() {
    std::vector<Listening> listeners;  // owned by this thread
    std::vector<Conn> conns;
    while (true) {
      {
        std::lock_guard lock(mu);
        for (Listening& l : to_add) listeners.push_back(std::move(l));
        to_add.clear();
        for (int id : to_remove) {
          std::erase_if(listeners, [&](const Listening& l) { return l.id == id; });
          std::erase_if(conns, [&](const Conn& c) { return c.listener == id; });
        }
        to_remove.clear();
        applied = requested;
        if (stop) running = false;
      }
      cv.notify_all();
      if (!running) return;
      std::vector<pollfd> pfds;
      pfds.push_back({wake.get(), POLLIN, 0});
      for (auto& l : listeners) pfds.push_back({l.fd.get(), POLLIN, 0});
      std::optional<net::Deadline> next;  // the first handshake to expire
      for (auto& c : conns) {
        pfds.push_back({c.fd.get(), POLLIN, 0});
        if (c.hs && (!next || c.hs->deadline() < *next)) next = c.hs->deadline();
      }
      int rc = ::poll(pfds.data(), pfds.size(), next ? std::max(1, net::MsLeft(*next)) : -1);
      if (rc < 0) {
        if (errno == EINTR) continue;
        HIXL_LOG_ERROR("control server poll failed: {}", std::strerror(errno));
        std::lock_guard lock(mu);
        running = false;
        cv.notify_all();
        return;
      }
      if (pfds[0].revents) {
        uint64_t n = 0;
        ssize_t r = ::read(wake.get(), &n, sizeof(n));
        (void)r;
        continue;  // apply the changes first: a removed listener's requests are not served
      }
      // Serve the connections that were polled, then accept new ones.
      const size_t nl = listeners.size();
      std::vector<size_t> dead;
      for (size_t i = 0; i < conns.size(); ++i) {
        if (conns[i].hs) {
          if (!Authenticate(conns[i], pfds[1 + nl + i].revents != 0)) dead.push_back(i);
          continue;
        }
        if (!pfds[1 + nl + i].revents) continue;
        const ControlHandler* h = nullptr;
        for (auto& l : listeners) {
          if (l.id == conns[i].listener) h = &l.handler;
        }
        if (!h || !Serve(conns[i].fd.get(), *h)) dead.push_back(i);
      }
      while (!dead.empty()) {  // from the back, so that the earlier indices stay right
        conns.erase(conns.begin() + static_cast<long>(dead.back()));
        dead.pop_back();
      }
      for (size_t i = 0; i < nl; ++i) {
        if (!(pfds[1 + i].revents & POLLIN)) continue;
        int fd = ::accept4(listeners[i].fd.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        Conn c{net::Fd(fd), listeners[i].id, std::make_unique<auth::ServerHandshake>(secret, auth::Kind::kControl),
               auth::PeerName(fd), listeners[i].port};
        if (c.hs->Start(fd) == auth::ServerHandshake::Step::kFailed) {
          HIXL_LOG_WARN("hixl control listener (port {}): refused {}: {}", c.port, c.peer, c.hs->error());
          continue;
        }
        if (c.hs->done()) c.hs.reset();
        conns.push_back(std::move(c));
      }
    }
  }

  // Advances a connection's handshake (nothing else is read before it is
  // done); false when the peer failed it or ran out of time.
  static bool Authenticate(Conn& c, bool readable) {
    auth::ServerHandshake::Step step = readable ? c.hs->OnReadable(c.fd.get()) : auth::ServerHandshake::Step::kWaiting;
    if (step == auth::ServerHandshake::Step::kDone) {
      c.hs.reset();
      return true;
    }
    std::string why = c.hs->error();
    if (step == auth::ServerHandshake::Step::kWaiting) {
      if (net::Clock::now() < c.hs->deadline()) return true;
      why = "it did not complete the authentication handshake in time";
    }
    HIXL_LOG_WARN("hixl control listener (port {}): refused {}: {}", c.port, c.peer, why);
    return false;
  }

  // Answers one request; false when the connection is finished.
  static bool Serve(int fd, const ControlHandler& handler) {
    // A peer sends a whole frame at once; bound the wait for its tail.
    auto req = net::RecvFrame(fd, net::DeadlineIn(5000), kMaxControlRequest);
    if (!req.ok()) {
      // A closed connection is the normal end; anything else is the peer's fault.
      if (req.status().code() != Errc::kPeerFailed) {
        HIXL_LOG_WARN("control server: dropping the connection from {}: {}", net::PeerAddress(fd),
                      req.status().message());
      }
      return false;
    }
    std::string_view p = req.value();
    net::Writer reply;
    if (p.size() < 5) {
      HIXL_LOG_WARN("control server: dropping the connection from {}: a request of {} bytes, shorter than its header",
                    net::PeerAddress(fd), p.size());
      return false;
    } else {
      uint8_t type = static_cast<uint8_t>(p[0]);
      int32_t from = 0;
      std::memcpy(&from, p.data() + 1, 4);
      Result<std::string> r = handler(from, type, p.substr(5));
      if (r.ok()) {
        reply.Put<int32_t>(0).str().append(r.value());
      } else {
        reply.Put<int32_t>(r.status().raw_code()).str().append(r.status().message());
      }
    }
    return net::SendFrame(fd, reply.str(), net::DeadlineIn(5000)).ok();
  }
};

Result<std::unique_ptr<ControlServer>> ControlServer::Create(const auth::MaybeSecret& secret) {
  auto impl = std::make_unique<Impl>();
  impl->secret = secret;
  impl->wake = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl->wake.valid()) return Err(Errc::kBootstrap, "control server: eventfd failed: {}", std::strerror(errno));
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Run(); });
  // Named before anyone can look (tests count the process's control threads).
  ::pthread_setname_np(impl->thread.native_handle(), "hixl-control");
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

Result<std::unique_ptr<ControlServer>> ControlServer::Start(const std::string& host, ControlHandler handler,
                                                            uint16_t port, const auth::MaybeSecret& secret) {
  HIXL_ASSIGN_OR_RETURN(std::unique_ptr<ControlServer> s, Create(secret));
  HIXL_RETURN_IF_ERROR(s->AddListener(host, port, std::move(handler)).status());
  return s;
}

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControlServer::~ControlServer() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->Wake();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Result<ControlServer::Listener> ControlServer::AddListener(const std::string& host, uint16_t port,
                                                           ControlHandler handler) {
  Impl::Listening l;
  HIXL_ASSIGN_OR_RETURN(l.fd, net::Listen(host, port));
  HIXL_ASSIGN_OR_RETURN(uint16_t bound, net::LocalPort(l.fd.get()));
  l.handler = std::move(handler);
  l.port = bound;
  int id = 0;
  {
    std::lock_guard lock(impl_->mu);
    if (!impl_->running) return Err(Errc::kBootstrap, "the control server has stopped (its poll loop failed)");
    id = l.id = impl_->next_id++;
    if (impl_->first_port == 0) impl_->first_port = bound;
    impl_->to_add.push_back(std::move(l));
    ++impl_->requested;
  }
  impl_->Wake();
  return Listener{id, bound};
}

void ControlServer::RemoveListener(int id) {
  std::unique_lock lock(impl_->mu);
  impl_->to_remove.push_back(id);
  const uint64_t ticket = ++impl_->requested;
  lock.unlock();
  impl_->Wake();
  if (std::this_thread::get_id() == impl_->thread.get_id()) return;  // from a handler: applied after it
  lock.lock();
  impl_->cv.wait(lock, [&] { return impl_->applied >= ticket || !impl_->running; });
}

uint16_t ControlServer::port() const {
  std::lock_guard lock(impl_->mu);
  return impl_->first_port;
}

Status ControlClient::Connect(int64_t timeout_ms) {
  std::lock_guard lock(mu_);
  return ConnectLocked(net::DeadlineIn(timeout_ms), nullptr);
}

Status ControlClient::ConnectLocked(net::Deadline deadline, bool* reached) {
  if (failed_) return Err(Errc::kPeerFailed, "{} is unreachable (its control connection failed earlier)", name_);
  if (fd_.valid()) return Status::Ok();
  auto fd = net::Connect(host_, port_, deadline, !listens_already_);
  if (!fd.ok()) {
    failed_ = true;
    return Err(fd.status().code(), "cannot reach {} at {}:{}: {}", name_, host_, port_, fd.status().message());
  }
  if (reached) *reached = true;
  Status auth = auth::ClientHandshake(fd->get(), secret_, auth::Kind::kControl, deadline,
                                      fmt::format("{} at {}:{}", name_, host_, port_));
  if (!auth.ok()) {
    failed_ = true;
    return Err(auth.code() == Errc::kTimeout ? Errc::kTimeout : Errc::kPeerFailed, "{}", auth.message());
  }
  fd_ = std::move(fd.value());
  return Status::Ok();
}

Result<std::string> ControlClient::Call(uint8_t type, std::string_view payload, int64_t timeout_ms) {
  std::lock_guard lock(mu_);
  const auto deadline = net::DeadlineIn(timeout_ms);
  bool reached = false;
  if (Status c = ConnectLocked(deadline, &reached); !c.ok()) {
    // Nobody accepted in time is a failed peer to a caller that was not
    // connecting on purpose; a handshake that timed out stays a timeout.
    const bool handshake_timeout = c.code() == Errc::kTimeout && reached;
    return Status(handshake_timeout ? Errc::kTimeout : Errc::kPeerFailed, c.message());
  }
  net::Writer req;
  req.Put<uint8_t>(type).Put<int32_t>(my_rank_).str().append(payload);
  Status s = net::SendFrame(fd_.get(), req.str(), deadline);
  Result<std::string> reply = s.ok() ? net::RecvFrame(fd_.get(), deadline, kMaxControlReply) : Result<std::string>(s);
  if (!reply.ok()) {
    // The stream may be out of step now; never reuse it.
    fd_.Reset();
    Errc code = reply.status().code() == Errc::kTimeout ? Errc::kTimeout : Errc::kPeerFailed;
    if (code == Errc::kPeerFailed) failed_ = true;
    return Err(code, "{} did not answer: {}", name_, reply.status().message());
  }
  std::string_view r = reply.value();
  if (r.size() < 4) return Err(Errc::kTransport, "malformed control reply from {}", name_);
  int32_t code = 0;
  std::memcpy(&code, r.data(), 4);
  if (code != 0) return Status(static_cast<Errc>(code), std::string(r.substr(4)));
  return std::string(r.substr(4));
}

void ControlClient::Close() {
  std::lock_guard lock(mu_);
  fd_.Reset();
}

}  // namespace hixl::bootstrap

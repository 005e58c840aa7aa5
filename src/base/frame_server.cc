// FrameServer (base/frame_server.h): its options, life and public calls;
// the work on the loop thread is in frame_server_impl.h.
#include <sys/un.h>

#include <charconv>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "base/frame_server_impl.h"

namespace hixl::net {

namespace {
Result<int64_t> EnvPositive(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return int64_t{0};
  int64_t n = 0;
  auto [end, ec] = std::from_chars(v, v + std::strlen(v), n);
  if (ec != std::errc() || *end != '\0' || n <= 0 || n > (int64_t{1} << 40)) {
    return Err(Errc::kInvalidArg, "{}={:?} is not a positive integer", name, v);
  }
  return n;
}

// "port N" for a TCP listener; a Unix socket's name ("@name" when abstract).
Result<std::string> ListenerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return Err(Errc::kBootstrap, "getsockname() on a listening socket failed: {}", std::strerror(errno));
  }
  if (ss.ss_family != AF_UNIX) {
    HIXL_ASSIGN_OR_RETURN(uint16_t port, LocalPort(fd));
    return fmt::format("port {}", port);
  }
  const auto& un = reinterpret_cast<const sockaddr_un&>(ss);
  const size_t n = len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
  if (n == 0) return std::string("an unnamed Unix socket");
  if (un.sun_path[0] == '\0') return fmt::format("@{}", std::string_view(un.sun_path + 1, n - 1));
  return std::string(un.sun_path, strnlen(un.sun_path, n));
}
}  // namespace

Status FrameServerOptions::ApplyEnv() {
  HIXL_ASSIGN_OR_RETURN(int64_t conns, EnvPositive("HIXL_MAX_CONNECTIONS"));
  if (conns > 0) max_conns = static_cast<size_t>(conns);
  HIXL_ASSIGN_OR_RETURN(int64_t ms, EnvPositive("HIXL_HALF_OPEN_TIMEOUT_MS"));
  if (ms > 0) {
    handshake_ms = partial_frame_ms = ms;
    if (unbound_ms > 0) unbound_ms = ms;
  }
  return Status::Ok();
}

Result<std::unique_ptr<FrameServer>> FrameServer::Create(FrameServerOptions options) {
  HIXL_ASSIGN_OR_RETURN(std::shared_ptr<ev::EventLoop> loop, ev::EventLoop::Acquire());
  auto impl = std::make_shared<Impl>();
  impl->opt = std::move(options);
  impl->loop = loop;
  impl->self = impl;
  int rc = 0;
  loop->Call([&] {
    rc = uv_timer_init(loop->uv(), &impl->timer);
    impl->timer.data = impl.get();
  });
  if (rc != 0) return Err(Errc::kInternal, "{}: uv_timer_init: {}", impl->opt.name, uv_strerror(rc));
  return std::unique_ptr<FrameServer>(new FrameServer(std::move(impl)));
}

FrameServer::FrameServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

FrameServer::~FrameServer() {
  std::shared_ptr<ev::EventLoop> loop = impl_->loop;  // outlives the handles' close callbacks
  // The timer is part of Impl: Impl lives until the timer's close callback,
  // the last of the server's (they run in the order they were asked for).
  // impl_ stays set until the listeners are gone: a handler that runs
  // before then may still call this server.
  struct Last {
    std::shared_ptr<Impl> impl;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto last = std::make_shared<Last>();
  last->impl = impl_;
  // Released to the timer's close callback, which deletes it.  (Out of
  // memory here, in a destructor, ends the process: there is no way back.)
  auto* keep = std::make_unique<std::shared_ptr<Last>>(last).release();
  loop->Call([keep] {
    Impl& impl = *(*keep)->impl;
    std::vector<int> ids;
    for (auto& [id, l] : impl.lsns) ids.push_back(id);
    for (int id : ids) impl.RemoveLsn(id);
    impl.timer.data = keep;
    uv_close(reinterpret_cast<uv_handle_t*>(&impl.timer), [](uv_handle_t* h) {
      auto* k = static_cast<std::shared_ptr<Last>*>(h->data);
      std::shared_ptr<Last> l = *k;
      delete k;
      l->impl.reset();
      std::lock_guard lock(l->mu);
      l->done = true;
      l->cv.notify_all();
    });
  });
  impl_.reset();  // no handler runs any more
  // Wait for the close callbacks (not on the loop thread, where they run
  // after this returns), so that the last holder of the loop is this thread
  // (which joins it).
  if (loop->OnLoopThread()) return;
  std::unique_lock lock(last->mu);
  last->cv.wait(lock, [&] { return last->done; });
}

ev::EventLoop& FrameServer::loop() const { return *impl_->loop; }

Result<FrameServer::Listener> FrameServer::AddListener(Fd listening, Handlers handlers) {
  int flags = ::fcntl(listening.get(), F_GETFL);
  if (flags < 0 || ::fcntl(listening.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return Err(Errc::kBootstrap, "{}: fcntl(O_NONBLOCK) on a listening socket failed: {}", impl_->opt.name,
               std::strerror(errno));
  }
  HIXL_ASSIGN_OR_RETURN(std::string where, ListenerName(listening.get()));
  uint16_t port = 0;
  if (where.starts_with("port ")) {
    Result<uint16_t> p = LocalPort(listening.get());
    if (!p.ok()) return p.status();
    port = p.value();
  }
  auto l = std::make_unique<Impl::Lsn>();
  l->port = port;
  l->where = std::move(where);
  l->fd = std::move(listening);
  l->h = std::move(handlers);
  l->impl = impl_.get();
  Listener out{0, port};
  int rc = 0;
  impl_->loop->Call([&] {
    Impl& impl = *impl_;
    rc = uv_poll_init_socket(impl.loop->uv(), &l->poll, l->fd.get());
    if (rc != 0) return;
    l->poll.data = l.get();
    out.id = l->id = impl.next_lsn++;
    if (impl.accept_resume) {
      l->paused = true;
    } else {
      impl.StartPolling(*l);
    }
    impl.lsns.emplace(out.id, std::move(l));
  });
  if (rc != 0) return Err(Errc::kBootstrap, "{}: uv_poll_init on {}: {}", impl_->opt.name, l->where, uv_strerror(rc));
  return out;
}

void FrameServer::RemoveListener(int id) {
  impl_->loop->Call([&] { impl_->RemoveLsn(id); });
}

bool FrameServer::Send(ConnId id, std::string_view payload, int fd_to_pass) {
  Impl::Conn* c = impl_->Find(id);
  return c && impl_->SendTo(*c, payload, fd_to_pass);
}

void FrameServer::Drop(ConnId id, const std::string& why) {
  if (Impl::Conn* c = impl_->Find(id)) impl_->DropConn(*c, why, true);
}

void FrameServer::Bind(ConnId id) {
  if (Impl::Conn* c = impl_->Find(id); c && !c->bound) {
    c->bound = true;
    impl_->Reschedule(*c);
  }
}

void FrameServer::Pause(ConnId id, bool paused) {
  Impl::Conn* c = impl_->Find(id);
  if (!c || c->paused == paused) return;
  c->paused = paused;
  if (paused) {
    c->partial_since.reset();
    impl_->Reschedule(*c);
    return;
  }
  if (c->in.empty()) return;
  // Frames that came while it was paused: served on the loop's next turn,
  // not inside the handler that unpaused it.
  impl_->loop->Post([w = impl_->self, id] {
    std::shared_ptr<Impl> impl = w.lock();
    if (!impl) return;
    if (Impl::Conn* c = impl->Find(id); c && !c->paused) impl->Process(*c, false);
  });
}

bool FrameServer::Gone(ConnId id) {
  Impl::Conn* c = impl_->Find(id);
  if (!c) return true;
  char b = 0;
  ssize_t k = ::recv(c->fd.get(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (k > 0 || (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) return false;
  impl_->DropConn(*c, k == 0 ? "it closed the connection" : "its connection failed", false);
  return true;
}

std::string FrameServer::Peer(ConnId id) const {
  Impl::Conn* c = impl_->Find(id);
  return c ? c->peer : std::string();
}

size_t FrameServer::Connections(int listener) const {
  size_t n = 0;
  impl_->loop->Call([&] {
    auto it = impl_->lsns.find(listener);
    n = it == impl_->lsns.end() ? 0 : it->second->conns;
  });
  return n;
}

}  // namespace hixl::net

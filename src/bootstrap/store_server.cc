// TcpStoreServer: the store's server, run by rank 0 on the process's event
// loop (base/event_loop.h).
//
// The sockets are the frame server's (base/frame_server.h): it accepts,
// authenticates, reads frames as bytes come and queues replies, so a slow
// or stalled client holds up nobody else.  This file keeps a Conn per
// connection that sent a request; everything here runs on the loop thread
// apart from StartOn() and Stop().  The wire format is in store_protocol.h.
#include <fcntl.h>
#include <sys/socket.h>

#include <cstring>

#include "bootstrap/store_server_impl.h"

namespace hixl::bootstrap {

void TcpStoreServer::Impl::Stop() {
  if (!fs) return;
  // First the listener (after which no handler runs, here fs is still set),
  // then the server: clients see the server gone.
  if (listener != 0) fs->RemoveListener(listener);
  fs.reset();
  loop->Call([this] {
    if (timer)
      uv_close(reinterpret_cast<uv_handle_t*>(timer), [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
    timer = nullptr;
    conns.clear();
  });
  loop->Call([] {});  // the timer's close callback has run
}

void TcpStoreServer::Impl::OnFrame(uint64_t id, std::string_view payload) {
  Turn([&] {
    auto it = conns.find(id);
    if (it == conns.end()) {
      auto c = std::make_unique<Conn>();
      c->id = id;
      it = conns.emplace(id, std::move(c)).first;
    }
    Conn& c = *it->second;
    if (c.dead || c.said_bye) return;  // nothing after BYE is served
    Handle(c, payload);
  });
}

void TcpStoreServer::Impl::OnClose(uint64_t id, const std::string& why) {
  Turn([&] {
    auto it = conns.find(id);
    if (it == conns.end()) return;  // never sent a request; or Drop closed it
    Drop(*it->second, why == "it closed the connection" ? std::string("its connection to the store closed")
                                                        : fmt::format("its connection to the store ended: {}", why));
  });
}

void TcpStoreServer::Impl::OnTimer() {
  Turn([&] { ExpireDeadlines(); });
  Rearm();
}

void TcpStoreServer::Impl::Rearm() {
  if (!timer) return;
  if (deadlines.empty()) {
    uv_timer_stop(timer);
    return;
  }
  // Rounded up, so that the timer never fires early and spins.
  auto left = std::chrono::ceil<milliseconds>(deadlines.begin()->first - Clock::now()).count();
  uv_timer_start(
      timer, [](uv_timer_t* t) { static_cast<Impl*>(t->data)->OnTimer(); },
      static_cast<uint64_t>(std::max<int64_t>(left, 0)), 0);
}

void TcpStoreServer::Impl::Reply(Conn& c, const Status& st, std::string_view fields) {
  if (c.dead) return;
  fs->Send(c.id, detail::EncodeReply(st, fields));  // on failure, OnClose drops c
}

void TcpStoreServer::Impl::Drop(Conn& c, const std::string& why) {
  if (c.dead) return;
  c.dead = true;
  Unpark(c);
  dead.push_back(c.id);
  if (c.rank >= 0 && !c.said_bye) MarkFailed(c.rank, why);
  fs->Drop(c.id, why);  // nothing when the frame server closed it already
}

void TcpStoreServer::Impl::Sweep() {
  for (uint64_t id : dead) conns.erase(id);
  dead.clear();
}

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, uint16_t port, int world_size,
                                                              const auth::MaybeSecret& secret) {
  if (world_size <= 0) {
    return Err(Errc::kInvalidArg, "the store needs a world of at least 1 rank, got {}", world_size);
  }
  Result<net::Fd> lfd = net::Listen(host, port);
  if (!lfd.ok()) {
    return Err(Errc::kBootstrap, "the store cannot listen on {}:{}: {}", host, port, lfd.status().message());
  }
  return StartOn(std::move(*lfd), world_size, secret);
}

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::StartOn(net::Fd listening, int world_size,
                                                                const auth::MaybeSecret& secret) {
  if (world_size <= 0) {
    return Err(Errc::kInvalidArg, "the store needs a world of at least 1 rank, got {}", world_size);
  }
  if (!listening.valid()) return Err(Errc::kInvalidArg, "the store was given no listening socket");
  int listening_flag = 0;
  socklen_t len = sizeof(listening_flag);
  if (::getsockopt(listening.get(), SOL_SOCKET, SO_ACCEPTCONN, &listening_flag, &len) != 0 || !listening_flag) {
    return Err(Errc::kInvalidArg, "the store's socket (fd {}) is not a listening socket", listening.get());
  }
  int domain = 0;
  len = sizeof(domain);
  if (::getsockopt(listening.get(), SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
      (domain != AF_INET && domain != AF_INET6)) {
    return Err(Errc::kInvalidArg, "the store's socket (fd {}) is not a TCP socket", listening.get());
  }
  // Inherited from a launcher without close-on-exec: our own children must
  // not get it.
  ::fcntl(listening.get(), F_SETFD, FD_CLOEXEC);
  HIXL_ASSIGN_OR_RETURN(uint16_t actual_port, net::LocalPort(listening.get()));
  net::FrameServerOptions o;
  o.name = "hixl store";
  o.secret = secret;
  o.kind = auth::Kind::kStore;
  o.unbound_ms = 30000;  // a rank says HELLO right after the handshake
  o.max_out = size_t{detail::kMaxFrame} * 2 + (size_t{1} << 20);
  HIXL_RETURN_IF_ERROR(o.ApplyEnv());
  auto impl = std::make_unique<Impl>(world_size, actual_port);
  HIXL_ASSIGN_OR_RETURN(impl->fs, net::FrameServer::Create(std::move(o)));
  Impl* p = impl.get();
  p->loop = ev::EventLoop::Acquire().value();  // held by the frame server already: cannot fail
  int rc = 0;
  p->loop->Call([p, &rc] {
    p->timer = new uv_timer_t;
    rc = uv_timer_init(p->loop->uv(), p->timer);
    if (rc != 0) {
      delete p->timer;
      p->timer = nullptr;
    } else {
      p->timer->data = p;
    }
  });
  if (rc != 0) return Err(Errc::kInternal, "the store's timer: uv_timer_init: {}", uv_strerror(rc));
  net::FrameServer::Handlers h;
  h.max_frame = [](const uint8_t* op) { return op ? detail::MaxRequestFrame(static_cast<Op>(*op)) : kMaxFrame; };
  h.on_frame = [p](uint64_t id, std::string_view f) { p->OnFrame(id, f); };
  h.on_close = [p](uint64_t id, const std::string& why) { p->OnClose(id, why); };
  HIXL_ASSIGN_OR_RETURN(net::FrameServer::Listener l, p->fs->AddListener(std::move(listening), std::move(h)));
  p->listener = l.id;
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(impl)));
}

TcpStoreServer::TcpStoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpStoreServer::~TcpStoreServer() = default;  // Impl::~Impl closes everything
uint16_t TcpStoreServer::port() const { return impl_->port; }

}  // namespace hixl::bootstrap

// TcpStoreServer: the store's server, run by rank 0 on a thread of its own.
//
// One thread runs a poll() loop over an eventfd (to stop it), the listening
// socket and every client connection.  All sockets are non-blocking; input
// and output are buffered per connection, so a slow or stalled client holds
// up nobody else.  Everything below is touched by that thread only, apart
// from the constructor and Stop().  The wire format is in store_protocol.h.
#include "bootstrap/store_server_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <system_error>

namespace hixl::bootstrap {

void TcpStoreServer::Impl::Stop() {
  if (thread.joinable()) {
    uint64_t one = 1;
    while (::write(wake_fd.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
    }
    thread.join();
  }
  conns.clear();  // closes every connection: clients see the server gone
  listen_fd.Reset();
}

void TcpStoreServer::Impl::Run() {
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

int TcpStoreServer::Impl::PollTimeoutMs() const {
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

void TcpStoreServer::Impl::AcceptAll() {
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

void TcpStoreServer::Impl::Authenticate(Conn& c) {
  const auth::ServerHandshake::Step step = c.hs->OnReadable(c.fd.get());
  if (step == auth::ServerHandshake::Step::kWaiting) return;
  if (step == auth::ServerHandshake::Step::kFailed) return Refuse(c, c.hs->error());
  handshakes.erase({c.hs->deadline(), c.id});
  c.hs.reset();
}

void TcpStoreServer::Impl::Refuse(Conn& c, const std::string& why) {
  HIXL_LOG_WARN("hixl store (port {}): refused {}: {}", port, c.peer, why);
  Drop(c, why);
}

void TcpStoreServer::Impl::ReadFrom(Conn& c) {
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

void TcpStoreServer::Impl::ProcessInput(Conn& c) {
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

void TcpStoreServer::Impl::Flush(Conn& c) {
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

void TcpStoreServer::Impl::Reply(Conn& c, const Status& st, std::string_view fields) {
  if (c.dead) return;
  const std::string payload = detail::EncodeReply(st, fields);
  uint32_t n = static_cast<uint32_t>(payload.size());
  c.out.append(reinterpret_cast<const char*>(&n), 4);
  c.out.append(payload);
  Flush(c);
}

void TcpStoreServer::Impl::Drop(Conn& c, const std::string& why) {
  if (c.dead) return;
  c.dead = true;
  Unpark(c);
  if (c.hs) handshakes.erase({c.hs->deadline(), c.id});
  dead.push_back(c.id);
  if (c.rank >= 0 && !c.said_bye) MarkFailed(c.rank, why);
}

void TcpStoreServer::Impl::Sweep() {
  if (!dead.empty() && accept_resume) accept_resume.reset();  // a descriptor came free
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
  int accepting = 0;
  int domain = 0;
  socklen_t len = sizeof(accepting);
  socklen_t dlen = sizeof(domain);
  if (::getsockopt(listening.get(), SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 ||
      ::getsockopt(listening.get(), SOL_SOCKET, SO_DOMAIN, &domain, &dlen) != 0) {
    return Err(Errc::kBootstrap, "descriptor {} is not a socket: {}", listening.get(), std::strerror(errno));
  }
  if (!accepting || (domain != AF_INET && domain != AF_INET6)) {
    return Err(Errc::kBootstrap, "descriptor {} is not a listening TCP socket", listening.get());
  }
  // Inherited from the launcher without close-on-exec: our own children
  // must not get it.
  ::fcntl(listening.get(), F_SETFD, FD_CLOEXEC);
  std::optional<net::Fd> lfd(std::move(listening));
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

// FrameServer's state and its work on the loop thread (frame_server.cc:
// its life and public calls).  Internal to base/frame_server.cc.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <uv.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include "base/fd_passing.h"
#include "base/frame_server.h"
#include "base/log.h"

namespace hixl::net {

inline constexpr auto kAcceptPause = std::chrono::milliseconds(100);

// Everything below runs on the loop thread, apart from Create, AddListener
// and RemoveListener's hand-over (loop().Call).
struct FrameServer::Impl {
  struct Lsn {
    int id = 0;
    uint16_t port = 0;
    std::string where;  // in log lines: "port N", or a Unix socket's name
    Fd fd;
    Handlers h;
    uv_poll_t poll{};
    Impl* impl = nullptr;
    bool paused = false;  // accepting paused after EMFILE
    size_t conns = 0;
  };
  struct Conn {
    ConnId id = 0;
    Lsn* lsn = nullptr;
    Fd fd;
    uv_poll_t poll{};
    Impl* impl = nullptr;
    std::string peer;
    std::unique_ptr<auth::ServerHandshake> hs;
    std::string in, out;
    size_t out_off = 0;
    // With options.pass_fds: descriptors received, each with the stream
    // position of a byte of the message that carried it; descriptors to pass, each
    // with the position of its frame's first byte (positions count every
    // byte since the connection began).
    uint64_t in_base = 0, out_base = 0;  // the positions of in[0], out[0]
    std::deque<std::pair<uint64_t, Fd>> in_fds, out_fds;
    bool bound = false, paused = false, dead = false;
    Clock::time_point accepted;
    std::optional<Deadline> partial_since;  // a frame is begun
    Deadline deadline = Deadline::max();    // its entry in Impl::deadlines
    int events = 0;                         // polled for
  };

  FrameServerOptions opt;
  std::shared_ptr<ev::EventLoop> loop;
  std::map<int, std::unique_ptr<Lsn>> lsns;
  std::map<ConnId, Conn*> conns;  // live; a dropped one is freed by its close callback
  std::set<std::pair<Deadline, ConnId>> deadlines;
  std::optional<Deadline> accept_resume;
  uv_timer_t timer{};
  int next_lsn = 1;
  ConnId next_conn = 1;
  std::weak_ptr<Impl> self;

  Conn* Find(ConnId id) const {
    auto it = conns.find(id);
    return it == conns.end() || it->second->dead ? nullptr : it->second;
  }

  // ---- timers: one for the server, set to its nearest deadline.
  void Rearm() {
    std::optional<Deadline> next;
    if (!deadlines.empty()) next = deadlines.begin()->first;
    if (accept_resume && (!next || *accept_resume < *next)) next = accept_resume;
    if (!next) {
      uv_timer_stop(&timer);
      return;
    }
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
    uv_timer_start(
        &timer, [](uv_timer_t* t) { static_cast<Impl*>(t->data)->OnTimer(); },
        static_cast<uint64_t>(std::max<int64_t>(left, 0)), 0);
  }

  void OnTimer() {
    const Deadline now = Clock::now();
    if (accept_resume && *accept_resume <= now) ResumeAccepting();
    while (!deadlines.empty() && deadlines.begin()->first <= now) {
      Conn* c = Find(deadlines.begin()->second);
      deadlines.erase(deadlines.begin());
      if (!c) continue;
      c->deadline = Deadline::max();
      std::string why = c->hs ? "it did not complete the authentication handshake in time"
                        : c->partial_since
                            ? fmt::format("it sent part of a frame and nothing more for {} ms", opt.partial_frame_ms)
                            : fmt::format("it did not identify itself within {} ms", opt.unbound_ms);
      DropConn(*c, why, true, c->hs ? "refused" : "dropping");
    }
    Rearm();
  }

  // The connection's next deadline: its handshake's, its partial frame's,
  // or its identification's.
  void Reschedule(Conn& c) {
    if (c.dead) return;
    Deadline d = Deadline::max();
    if (c.hs) {
      d = c.hs->deadline();
    } else if (c.partial_since && !c.paused) {
      d = *c.partial_since + std::chrono::milliseconds(opt.partial_frame_ms);
    }
    if (!c.hs && !c.bound && opt.unbound_ms > 0) {
      d = std::min(d, c.accepted + std::chrono::milliseconds(opt.unbound_ms));
    }
    if (d == c.deadline) return;
    if (c.deadline != Deadline::max()) deadlines.erase({c.deadline, c.id});
    c.deadline = d;
    if (d != Deadline::max()) deadlines.emplace(d, c.id);
    Rearm();
  }

  // ---- accepting
  void StartPolling(Lsn& l) {
    uv_poll_start(&l.poll, UV_READABLE, [](uv_poll_t* p, int status, int) {
      Lsn* l = static_cast<Lsn*>(p->data);
      if (status >= 0) l->impl->AcceptAll(*l);
    });
  }
  void ResumeAccepting() {
    accept_resume.reset();
    for (auto& [id, l] : lsns) {
      if (l->paused) {
        l->paused = false;
        StartPolling(*l);
      }
    }
  }

  void AcceptAll(Lsn& l) {
    for (int i = 0; i < 64; ++i) {
      int fd = ::accept4(l.fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // The pending connection stays queued and would wake us at once
          // for ever: pause accepting for a moment instead.
          HIXL_LOG_WARN("{} ({}): cannot accept a connection ({}); pausing accepting for {} ms", opt.name, l.where,
                        std::strerror(errno), kAcceptPause.count());
          for (auto& [id, o] : lsns) {
            if (!o->paused) {
              o->paused = true;
              uv_poll_stop(&o->poll);
            }
          }
          accept_resume = Clock::now() + kAcceptPause;
          Rearm();
        }
        return;
      }
      Fd owned(fd);
      const std::string peer = auth::PeerName(fd);
      if (l.conns >= opt.max_conns && !EvictUnbound(l)) {
        HIXL_LOG_WARN("{} ({}): refused {}: the listener has its {} connections already", opt.name, l.where, peer,
                      opt.max_conns);
        continue;  // closed: the queue never fills with connections we would not serve
      }
      Admit(l, std::move(owned), peer);
    }
  }

  // Closes the oldest connection of l that never identified itself, to make
  // room; false when every one has.
  bool EvictUnbound(Lsn& l) {
    Conn* oldest = nullptr;
    for (auto& [id, c] : conns) {
      if (c->lsn == &l && !c->dead && !c->bound) {
        oldest = c;
        break;  // ids grow with time: the first is the oldest
      }
    }
    if (!oldest) return false;
    DropConn(
        *oldest,
        fmt::format("the listener is at its cap of {} connections and this one never identified itself", opt.max_conns),
        true);
    return true;
  }

  void Admit(Lsn& l, Fd fd, const std::string& peer) {
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // fails harmlessly on Unix sockets
    auto c = std::make_unique<Conn>();
    c->id = next_conn++;
    c->lsn = &l;
    c->impl = this;
    c->peer = peer;
    c->accepted = Clock::now();
    if (opt.same_user) {
      if (Status s = auth::CheckSameUser(fd.get(), peer); !s.ok()) {
        HIXL_LOG_WARN("{} ({}): refused {}: {}", opt.name, l.where, peer, s.message());
        return;
      }
    }
    c->hs = std::make_unique<auth::ServerHandshake>(opt.secret, opt.kind, opt.handshake_ms);
    if (c->hs->Start(fd.get()) == auth::ServerHandshake::Step::kFailed) {
      HIXL_LOG_WARN("{} ({}): refused {}: {}", opt.name, l.where, peer, c->hs->error());
      return;
    }
    if (c->hs->done()) c->hs.reset();
    if (int rc = uv_poll_init_socket(loop->uv(), &c->poll, fd.get()); rc != 0) {
      HIXL_LOG_WARN("{} ({}): refused {}: uv_poll_init: {}", opt.name, l.where, peer, uv_strerror(rc));
      return;
    }
    c->fd = std::move(fd);
    c->poll.data = c.get();
    Conn* raw = c.release();
    conns.emplace(raw->id, raw);
    ++l.conns;
    Watch(*raw);
    Reschedule(*raw);
  }

  // ---- a connection's life
  void Watch(Conn& c) {
    int ev = UV_READABLE | UV_DISCONNECT;
    if (c.out_off < c.out.size()) ev |= UV_WRITABLE;
    if (ev == c.events) return;
    c.events = ev;
    uv_poll_start(&c.poll, ev, [](uv_poll_t* p, int status, int events) {
      Conn* c = static_cast<Conn*>(p->data);
      c->impl->OnEvents(*c, status, events);
    });
  }

  void OnEvents(Conn& c, int status, int events) {
    if (c.dead) return;
    if (status < 0) {
      // libuv says EBADF for an error without data (POLLERR): name the
      // socket's own error (a reset by the peer is not worth a warning).
      int err = 0;
      socklen_t len = sizeof(err);
      if (::getsockopt(c.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err == 0) err = -status;
      return DropConn(c, fmt::format("its connection failed: {}", std::strerror(err)),
                      err != ECONNRESET && err != EPIPE);
    }
    if (c.hs) {
      const auth::ServerHandshake::Step step = c.hs->OnReadable(c.fd.get());
      if (step == auth::ServerHandshake::Step::kWaiting) return;
      if (step == auth::ServerHandshake::Step::kFailed) return DropConn(c, c.hs->error(), true, "refused");
      c.hs.reset();
      Reschedule(c);
    }
    if (events & UV_WRITABLE) Flush(c);
    if (!c.dead && (events & (UV_READABLE | UV_DISCONNECT))) Read(c);
  }

  void Read(Conn& c) {
    char buf[64 * 1024];
    size_t budget = size_t{4} << 20;  // then let the others have a turn
    bool got = false;
    while (budget > 0 && !c.dead) {
      ssize_t k = opt.pass_fds ? RecvWithFds(c, buf, sizeof(buf)) : ::recv(c.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (c.dead) return;
      if (k > 0) {
        c.in.append(buf, static_cast<size_t>(k));
        got = true;
        budget -= std::min(budget, static_cast<size_t>(k));
        if (c.paused && c.in.size() > MaxFrameBuffered(c)) {
          return DropConn(c, fmt::format("it sent {} bytes while its request was pending", c.in.size()), true);
        }
        if (!c.paused && c.in.size() >= sizeof(buf)) Process(c);  // keeps the buffer near one frame
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      // EOF or a socket error: serve what came before it, then close.
      const int err = k == 0 ? 0 : errno;
      const std::string why = k == 0 ? std::string("it closed the connection")
                                     : fmt::format("its connection failed: {}", std::strerror(err));
      const bool quiet = k == 0 || err == ECONNRESET;
      Process(c, got);
      return DropConn(c, why, !quiet);
    }
    Process(c, got);
  }

  // The most bytes a paused connection may have buffered: one largest frame.
  size_t MaxFrameBuffered(const Conn& c) const {
    return opt.fixed_frame ? opt.fixed_frame : size_t{4} + c.lsn->h.max_frame(nullptr);
  }

  // recv() that takes the descriptors passed with the bytes (at most
  // kMaxFdsQueued waiting for their frames); drops c when it passes more.
  static constexpr size_t kMaxFdsQueued = 4;
  ssize_t RecvWithFds(Conn& c, char* buf, size_t size) {
    std::vector<Fd> fds;
    bool truncated = false;
    const ssize_t k = net::RecvWithFds(c.fd.get(), buf, size, kMaxFdsQueued, &fds, &truncated);
    if (k < 0) return k;
    // They belong to the last byte read (base/fd_passing.h).
    const uint64_t at = c.in_base + c.in.size() + static_cast<uint64_t>(k > 0 ? k - 1 : 0);
    for (Fd& fd : fds) c.in_fds.emplace_back(at, std::move(fd));
    if (truncated || c.in_fds.size() > kMaxFdsQueued) {
      DropConn(c, fmt::format("it passed more file descriptors than frames (at most {} waiting)", kMaxFdsQueued), true);
      return -1;
    }
    return k;
  }

  // Hands over every whole frame in c.in, checking each header first.
  // got_bytes: bytes came just now (a frame in progress is not stalled).
  void Process(Conn& c, bool got_bytes = true) {
    if (c.dead) return;
    size_t off = 0;
    bool consumed = false;
    const Handlers& h = c.lsn->h;
    const size_t hdr = opt.fixed_frame ? 0 : 4;
    while (!c.dead && !c.paused && c.in.size() - off >= std::max<size_t>(hdr, 1)) {
      uint32_t n = opt.fixed_frame;
      if (hdr > 0) std::memcpy(&n, c.in.data() + off, 4);
      const bool have_type = c.in.size() - off > 4;
      const uint32_t limit = hdr == 0    ? n
                             : have_type ? h.max_frame(reinterpret_cast<const uint8_t*>(c.in.data() + off + 4))
                                         : h.max_frame(nullptr);
      if (n > limit || n > kMaxFrameBytes) {
        return DropConn(
            c,
            fmt::format("it sent a frame of {} bytes{} (at most {})", n,
                        have_type ? fmt::format(" of type {}", static_cast<uint8_t>(c.in[off + 4])) : "", limit),
            true);
      }
      if (c.in.size() - off - hdr < n) break;
      // A copy: the handler may Send (which may drop) or Pause.
      const std::string frame = c.in.substr(off + hdr, n);
      off += hdr + size_t{n};
      consumed = true;
      const ConnId id = c.id;
      if (h.on_frame_fd) {
        // The descriptor that came with the frame's bytes, if any.
        Fd fd;
        const uint64_t end = c.in_base + off;
        if (!c.in_fds.empty() && c.in_fds.front().first < end) {
          fd = std::move(c.in_fds.front().second);
          c.in_fds.pop_front();
          if (!c.in_fds.empty() && c.in_fds.front().first < end) {
            return DropConn(c, "it passed more than one file descriptor with a frame", true);
          }
        }
        h.on_frame_fd(id, frame, std::move(fd));
      } else {
        h.on_frame(id, frame);
      }
      if (c.dead) return;
    }
    if (off > 0) {
      c.in.erase(0, off);
      c.in_base += off;
    }
    if (c.in.empty()) {
      c.partial_since.reset();
    } else if (consumed || got_bytes || !c.partial_since) {
      c.partial_since = Clock::now();  // the time since the last progress is what counts
    }
    Reschedule(c);
  }

  bool SendTo(Conn& c, std::string_view payload, int fd_to_pass) {
    if (c.dead) return false;
    const size_t hdr = opt.fixed_frame ? 0 : 4;
    if (c.out.size() - c.out_off + payload.size() + hdr > opt.max_out || c.out_fds.size() >= kMaxFdsQueued) {
      DropConn(c,
               fmt::format("it does not read its replies ({} bytes and {} descriptors queued, at most {})",
                           c.out.size() - c.out_off + payload.size() + hdr, c.out_fds.size(), opt.max_out),
               true);
      return false;
    }
    if (fd_to_pass >= 0) {
      // A copy: the caller's may be closed before the frame goes.
      Fd copy(::fcntl(fd_to_pass, F_DUPFD_CLOEXEC, 0));
      if (!copy.valid() || !opt.pass_fds || payload.empty()) {
        DropConn(c,
                 fmt::format("its reply's file descriptor could not be passed: {}",
                             copy.valid() ? "not a Unix socket server that passes them" : std::strerror(errno)),
                 true);
        return false;
      }
      c.out_fds.emplace_back(c.out_base + c.out.size(), std::move(copy));
    }
    if (hdr > 0) {
      const uint32_t n = static_cast<uint32_t>(payload.size());
      c.out.append(reinterpret_cast<const char*>(&n), 4);
    }
    c.out.append(payload);
    Flush(c);
    return !c.dead;
  }

  void Flush(Conn& c) {
    while (!c.dead && c.out_off < c.out.size()) {
      ssize_t k = SendSome(c);
      if (k > 0) {
        c.out_off += static_cast<size_t>(k);
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;  // UV_WRITABLE resumes
      const int err = errno;
      return DropConn(c, fmt::format("its connection failed: {}", std::strerror(err)),
                      err != EPIPE && err != ECONNRESET);
    }
    if (c.out_off == c.out.size() || c.out_off > (size_t{1} << 20)) {
      c.out.erase(0, c.out_off);
      c.out_base += c.out_off;
      c.out_off = 0;
    }
    if (!c.dead) Watch(c);
  }

  // One send of c's queued bytes: up to the next descriptor to pass, or
  // from it (with it) up to the one after.
  ssize_t SendSome(Conn& c) {
    const uint64_t at = c.out_base + c.out_off;
    size_t len = c.out.size() - c.out_off;
    if (c.out_fds.empty() || c.out_fds.front().first != at) {
      if (!c.out_fds.empty()) len = std::min<size_t>(len, c.out_fds.front().first - at);
      return ::send(c.fd.get(), c.out.data() + c.out_off, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (c.out_fds.size() > 1) len = std::min<size_t>(len, c.out_fds[1].first - at);
    const ssize_t k = SendWithFd(c.fd.get(), c.out.data() + c.out_off, len, c.out_fds.front().second.get());
    if (k > 0) c.out_fds.pop_front();  // it went with the first byte
    return k;
  }

  // Closes c (its memory goes in its handle's close callback).  on_close
  // runs unless it never passed the handshake.
  void DropConn(Conn& c, const std::string& why, bool warn, const char* verb = "dropping") {
    if (c.dead) return;
    if (warn) HIXL_LOG_WARN("{} ({}): {} {}: {}", opt.name, c.lsn->where, verb, c.peer, why);
    const bool tell = !c.hs;
    Forget(c);
    if (tell && c.lsn->h.on_close) c.lsn->h.on_close(c.id, why);
  }

  // Closes c without a word to anyone.
  void Forget(Conn& c) {
    c.dead = true;
    if (c.deadline != Deadline::max()) deadlines.erase({c.deadline, c.id});
    conns.erase(c.id);
    --c.lsn->conns;
    if (accept_resume) ResumeAccepting();  // a descriptor came free
    uv_close(reinterpret_cast<uv_handle_t*>(&c.poll), [](uv_handle_t* h) { delete static_cast<Conn*>(h->data); });
    c.fd.Reset();  // now, not in the callback: the peer sees the end at once
  }

  void RemoveLsn(int id) {
    auto it = lsns.find(id);
    if (it == lsns.end()) return;
    Lsn* l = it->second.release();
    lsns.erase(it);
    std::vector<Conn*> mine;
    for (auto& [cid, c] : conns) {
      if (c->lsn == l) mine.push_back(c);
    }
    for (Conn* c : mine) Forget(*c);
    // Its handlers go with it in the close callback: one of them may be
    // running now (a handler that removes its own listener).
    uv_close(reinterpret_cast<uv_handle_t*>(&l->poll), [](uv_handle_t* h) { delete static_cast<Lsn*>(h->data); });
    l->fd.Reset();  // the port is free when RemoveListener returns
  }
};

}  // namespace hixl::net

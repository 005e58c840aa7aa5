#include "transport/shm/shm_server.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "base/frame_server.h"
#include "base/log.h"
#include "transport/shm/fd_channel.h"
#include "transport/shm/mapping.h"
#include "transport/shm/relay.h"
#include "transport/shm/shm_request.h"

namespace hixl::transport::shm {

namespace {

using net::Fd;
using ConnId = net::FrameServer::ConnId;

// What the relay thread's replies need on the loop thread; alive is read
// and cleared there only, so a reply posted late touches nothing gone.
struct Live {
  bool alive = true;
  net::FrameServer* fs = nullptr;
  int doorbell = -1;
};

// Work for the relay thread, from the loop thread.
struct Cmd {
  enum Kind { kOpen, kClose, kDiscard } kind = kDiscard;
  ConnId conn = 0;
  Fd fd;  // kOpen: the channel's memfd; kDiscard: a descriptor to close
  uint64_t size = 0;
};

std::string_view Bytes(const Msg& m) { return {reinterpret_cast<const char*>(&m), sizeof(m)}; }

}  // namespace

struct ShmServer::State {
  const Host* host = nullptr;
  std::string sock_name;
  std::unique_ptr<net::FrameServer> fs;
  int listener = 0;  // fs's id of the socket; 0 before it is served
  std::shared_ptr<Live> live = std::make_shared<Live>();
  Fd wake, doorbell;
  std::thread thread;

  std::mutex mu;  // guards cmds and stop
  std::vector<Cmd> cmds;
  bool stop = false;

  std::mutex segments_mu;
  std::map<uint32_t, std::pair<Fd, uint64_t>> segments;  // id -> (memfd, size)

  void Queue(Cmd c) {
    {
      std::lock_guard lock(mu);
      cmds.push_back(std::move(c));
    }
    Ring();
  }
  void Ring() {
    uint64_t one = 1;
    ssize_t w = ::write(wake.get(), &one, sizeof(one));  // non-blocking; the count cannot overflow here
    (void)w;
  }

  // --- on the loop thread
  void OnFrame(ConnId id, std::string_view frame, Fd fd) {
    RequestDecision d = DecideRequest(frame, fd.valid());
    if (d.action == RequestDecision::kOpenRelay) {
      fs->Bind(id);
      // The channel is checked and mapped on the relay thread, which
      // replies; no further request is read until it has.
      fs->Pause(id, true);
      Queue(Cmd{Cmd::kOpen, id, std::move(fd), RelayChannelBytes()});
      return;
    }
    if (!d.why.empty()) HIXL_LOG_WARN("hixl shm socket (@{}): refused a relay channel: {}", sock_name, d.why);
    int pass = -1;
    std::unique_lock lock(segments_mu);
    if (d.action == RequestDecision::kGetSegment) {
      fs->Bind(id);
      auto it = segments.find(d.segment);
      if (it == segments.end()) {
        d.reply.status = HIXL_ERR_INVALID_ARG;
      } else {
        pass = it->second.first.get();
        d.reply.a = it->second.second;
      }
    }
    fs->Send(id, Bytes(d.reply), pass);  // a copy of pass is queued
    lock.unlock();
    // A descriptor nobody asked for is closed off the loop (closing a
    // stranger's file may block).
    if (fd.valid()) Queue(Cmd{Cmd::kDiscard, id, std::move(fd), 0});
  }

  // --- the relay thread
  void Run() {
    struct Channel {
      Mapping map;
      uint32_t next = 0;
    };
    std::map<ConnId, Channel> channels;
    ev::EventLoop* loop = &fs->loop();  // fs outlives this thread
    while (true) {
      pollfd p[2] = {{wake.get(), POLLIN, 0}, {doorbell.get(), POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        HIXL_LOG_ERROR("shm relay thread: poll failed: {}", std::strerror(errno));
        return;
      }
      uint64_t count = 0;
      if (p[1].revents & POLLIN) {
        ssize_t r = ::read(doorbell.get(), &count, sizeof(count));
        (void)r;
      }
      if (p[0].revents & POLLIN) {
        ssize_t r = ::read(wake.get(), &count, sizeof(count));
        (void)r;
        std::vector<Cmd> todo;
        {
          std::lock_guard lock(mu);
          if (stop) return;
          todo.swap(cmds);
        }
        for (Cmd& c : todo) {
          if (c.kind == Cmd::kClose) {
            channels.erase(c.conn);  // unmapped
          } else if (c.kind == Cmd::kOpen) {
            Msg reply;
            reply.type = kOpenRelay;
            Result<Mapping> map = AcceptRelayChannel(c.fd.get(), c.size);
            if (map.ok()) {
              channels[c.conn] = Channel{std::move(map.value()), 0};
            } else {
              HIXL_LOG_WARN("hixl shm socket (@{}): refused a relay channel: {}", sock_name, map.status().message());
              reply.status = static_cast<int32_t>(map.status().code());
            }
            loop->Post([live = live, id = c.conn, reply] {
              if (!live->alive) return;
              live->fs->Send(id, Bytes(reply), reply.status == 0 ? live->doorbell : -1);
              live->fs->Pause(id, false);
            });
          }
          // c.fd closes here, on this thread.
        }
      }
      // Every channel, every time round: cheap when idle.
      for (auto& [id, ch] : channels) ServeRelay(ch.map, &ch.next, *host);
    }
  }
};

Result<std::unique_ptr<ShmServer>> ShmServer::Start(const Host* host, const auth::MaybeSecret& secret,
                                                    const std::string& sock_name) {
  auto s = std::make_shared<State>();
  s->host = host;
  s->sock_name = sock_name;
  auto listener = ListenAt(sock_name);
  if (!listener.ok()) return Err(Errc::kTransport, "shm: {}", listener.status().message());
  s->wake = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  s->doorbell = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s->wake.valid() || !s->doorbell.valid()) {
    return Err(Errc::kTransport, "shm: eventfd failed: {}", std::strerror(errno));
  }
  net::FrameServerOptions o;
  o.name = "hixl shm socket";
  o.secret = secret;
  o.kind = auth::Kind::kShm;
  o.fixed_frame = sizeof(Msg);
  o.pass_fds = true;
  o.same_user = !secret;  // without a secret, only this user
  o.max_out = 64 << 10;   // an origin has one request outstanding
  o.unbound_ms = 10000;   // an origin asks at once after connecting
  HIXL_RETURN_IF_ERROR(o.ApplyEnv());
  HIXL_ASSIGN_OR_RETURN(s->fs, net::FrameServer::Create(std::move(o)));
  s->live->fs = s->fs.get();
  s->live->doorbell = s->doorbell.get();
  std::unique_ptr<ShmServer> server(new ShmServer(s));
  s->thread = std::thread([st = s.get()] { st->Run(); });
  ::pthread_setname_np(s->thread.native_handle(), "hixl-shm");  // one per node: tests count them

  State* st = s.get();  // the handlers never run after fs is gone, and fs goes before State
  net::FrameServer::Handlers h;
  h.on_frame_fd = [st](ConnId id, std::string_view frame, Fd fd) { st->OnFrame(id, frame, std::move(fd)); };
  h.on_close = [st](ConnId id, const std::string&) { st->Queue(Cmd{Cmd::kClose, id, Fd(), 0}); };
  auto added = s->fs->AddListener(std::move(listener.value()), std::move(h));
  if (!added.ok()) return Err(Errc::kTransport, "shm: {}", added.status().message());  // ~ShmServer stops
  s->listener = added->id;
  return server;
}

ShmServer::~ShmServer() { Stop(); }

void ShmServer::Stop() {
  State& s = *s_;
  if (s.thread.joinable()) {
    {
      std::lock_guard lock(s.mu);
      s.stop = true;
    }
    s.Ring();
    s.thread.join();
  }
  if (s.fs) {
    // The socket and its connections close; no handler (which uses s.fs)
    // runs after this returns.
    if (s.listener != 0) s.fs->RemoveListener(s.listener);
    // Replies the thread posted and the loop has not run yet go nowhere.
    s.fs->loop().Call([live = s.live] { live->alive = false; });
    s.fs.reset();
  }
}

Status ShmServer::AddSegment(uint32_t id, int backing_fd, uint64_t size) {
  std::lock_guard lock(s_->segments_mu);
  if (s_->segments.count(id)) return Status::Ok();
  int fd = ::fcntl(backing_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return Err(Errc::kTransport, "shm: dup of a heap segment failed: {}", std::strerror(errno));
  s_->segments.emplace(id, std::make_pair(Fd(fd), size));
  return Status::Ok();
}

void ShmServer::RemoveSegment(uint32_t id) {
  Fd gone;  // closed after the lock is let go
  std::lock_guard lock(s_->segments_mu);
  auto it = s_->segments.find(id);
  if (it == s_->segments.end()) return;
  gone = std::move(it->second.first);
  s_->segments.erase(it);
}

}  // namespace hixl::transport::shm

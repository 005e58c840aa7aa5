// ControlServer (bootstrap/control.h) on the process's event loop, through
// the framed-connection server of base/frame_server.h: a client that sends
// half a request, or nothing, or does not read its replies, holds up no
// other client, and costs at most one of a listener's capped connections.
//
// Request frame: [u8 type][i64 from][payload].
// Reply frame:   [i32 code][payload, or the error message when code != 0].
//
// Identity: a connection is bound to the `from` of its first request.  A
// later request on it that claims another, or a second live connection of
// the same listener that claims a `from` already bound, is dropped with a
// warning.  `from` -1 (anonymous: an engine's HELLO dial) may be on any
// number of connections.
#include <map>
#include <mutex>

#include "base/frame_server.h"
#include "base/log.h"
#include "bootstrap/control.h"

namespace hixl::bootstrap {

namespace {
constexpr size_t kRequestHeader = 1 + 8;
constexpr int64_t kAnonymous = -1;

// One listener's state; on the loop thread only.
struct Front {
  ControlHandler handler;
  net::FrameServer* fs = nullptr;
  std::map<net::FrameServer::ConnId, int64_t> from_of;  // bound connections
  std::map<int64_t, net::FrameServer::ConnId> owner;    // who is bound to a `from` (not -1)

  void OnFrame(net::FrameServer::ConnId id, std::string_view p) {
    if (p.size() < kRequestHeader) {
      return fs->Drop(id, fmt::format("a request of {} bytes, shorter than its header", p.size()));
    }
    const uint8_t type = static_cast<uint8_t>(p[0]);
    int64_t from = 0;
    std::memcpy(&from, p.data() + 1, 8);
    auto bound = from_of.find(id);
    if (bound == from_of.end()) {
      if (from != kAnonymous) {
        auto o = owner.find(from);
        // A client that reconnects closed its old connection first: its
        // end may not have been seen yet.
        if (o != owner.end() && o->second != id && fs->Gone(o->second)) o = owner.find(from);
        if (o != owner.end() && o->second != id) {
          return fs->Drop(id, fmt::format("it claimed to be {} on a connection that is new, while another live "
                                          "connection ({}) is {}",
                                          from, fs->Peer(o->second), from));
        }
        owner[from] = id;
      }
      from_of.emplace(id, from);
      fs->Bind(id);
    } else if (bound->second != from) {
      return fs->Drop(id, fmt::format("it claimed to be {} on a connection that is {}", from, bound->second));
    }
    Result<std::string> r = handler(from, type, p.substr(kRequestHeader));
    net::Writer reply;
    if (r.ok()) {
      reply.Put<int32_t>(0).str().append(r.value());
    } else {
      reply.Put<int32_t>(r.status().raw_code()).str().append(r.status().message());
    }
    fs->Send(id, reply.str());
  }

  void OnClose(net::FrameServer::ConnId id) {
    auto it = from_of.find(id);
    if (it == from_of.end()) return;
    auto o = owner.find(it->second);
    if (o != owner.end() && o->second == id) owner.erase(o);
    from_of.erase(it);
  }
};
}  // namespace

struct ControlServer::Impl {
  std::unique_ptr<net::FrameServer> fs;
  mutable std::mutex mu;
  uint16_t first_port = 0;  // guarded by mu
};

Result<std::unique_ptr<ControlServer>> ControlServer::Create(const auth::MaybeSecret& secret) {
  net::FrameServerOptions o;
  o.name = "hixl control listener";
  o.secret = secret;
  o.kind = auth::Kind::kControl;
  // A peer may connect ahead of its first request (ControlClient::Connect),
  // so there is no limit on the wait for it; the cap makes room by closing
  // the oldest connection that never sent one.
  o.unbound_ms = 0;
  o.max_out = size_t{kMaxControlReply} + (size_t{1} << 20);
  HIXL_RETURN_IF_ERROR(o.ApplyEnv());
  auto impl = std::make_unique<Impl>();
  HIXL_ASSIGN_OR_RETURN(impl->fs, net::FrameServer::Create(std::move(o)));
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

Result<std::unique_ptr<ControlServer>> ControlServer::Start(const std::string& host, ControlHandler handler,
                                                            uint16_t port, const auth::MaybeSecret& secret) {
  HIXL_ASSIGN_OR_RETURN(std::unique_ptr<ControlServer> s, Create(secret));
  HIXL_RETURN_IF_ERROR(s->AddListener(host, port, std::move(handler)).status());
  return s;
}

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControlServer::~ControlServer() = default;  // the frame server closes every socket

Result<ControlServer::Listener> ControlServer::AddListener(const std::string& host, uint16_t port,
                                                           ControlHandler handler) {
  HIXL_ASSIGN_OR_RETURN(net::Fd fd, net::Listen(host, port));
  auto front = std::make_shared<Front>();
  front->handler = std::move(handler);
  front->fs = impl_->fs.get();
  net::FrameServer::Handlers h;
  h.max_frame = [](const uint8_t*) { return kMaxControlRequest; };
  h.on_frame = [front](net::FrameServer::ConnId id, std::string_view p) { front->OnFrame(id, p); };
  h.on_close = [front](net::FrameServer::ConnId id, const std::string&) { front->OnClose(id); };
  HIXL_ASSIGN_OR_RETURN(net::FrameServer::Listener l, impl_->fs->AddListener(std::move(fd), std::move(h)));
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->first_port == 0) impl_->first_port = l.port;
  }
  return Listener{l.id, l.port};
}

void ControlServer::RemoveListener(int id) { impl_->fs->RemoveListener(id); }

uint16_t ControlServer::port() const {
  std::lock_guard lock(impl_->mu);
  return impl_->first_port;
}

}  // namespace hixl::bootstrap

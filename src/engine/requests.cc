// What the engine's peers ask of it (hello, goodbye, gone, region tables,
// invalidations, notifications) and how it learns of their deaths (the
// peer watch); its life cycle and connections are in connections.cc.
#include <algorithm>
#include <string>

#include "base/log.h"
#include "core/control_protocol.h"
#include "engine/engine_impl.h"

namespace hixl {

using core::ControlMsg;

// ------------------------------------------------------- control requests

// Every request but a hello names its sender by the id we gave it (a
// client's) or it gave us (a connection's); one naming neither is refused
// before anything is done.  Its connection is bound to that id already
// (bootstrap::ControlHandler), so the log names the id.

bool Engine::Impl::KnownClient(int64_t from, const char* what) {
  {
    std::lock_guard lock(clients_mu);
    if (clients.count(from)) return true;
  }
  HIXL_LOG_WARN("engine {}: refused a {} request from id {}, which is none of its clients", local_name, what, from);
  return false;
}

Result<core::Session::Subscriber> Engine::Impl::SubscriberFor(int64_t from) {
  {
    std::lock_guard lock(clients_mu);
    auto it = clients.find(from);
    if (it != clients.end()) return core::Session::Subscriber{"engine " + it->second.name, it->second.callback};
  }
  (void)KnownClient(from, "fetch-table");  // logs
  return Err(Errc::kPeerFailed, "engine {} does not know this client (id {})", local_name, from);
}

Result<std::shared_ptr<core::PeerSession>> Engine::Impl::PeerFor(int64_t from) {
  if (auto c = ConnById(from)) return c->peer;
  {
    std::lock_guard lock(conns_mu);
    // Disconnected: its table is closed and nothing of ours is in flight
    // to it, which is what an invalidation asks.
    if (std::find(closed_ids.begin(), closed_ids.end(), from) != closed_ids.end())
      return std::shared_ptr<core::PeerSession>();
  }
  HIXL_LOG_WARN("engine {}: refused an invalidation from id {}, which is none of its connections", local_name, from);
  return Err(Errc::kPeerFailed, "engine {} has no connection with id {}", local_name, from);
}

Status Engine::Impl::Notified(int64_t from, std::string_view payload) {
  if (!KnownClient(from, "notify")) {
    return Err(Errc::kPeerFailed, "engine {} does not know this client (id {})", local_name, from);
  }
  auto m = core::DecodeNamedNotify(payload);
  if (!m) {
    HIXL_LOG_WARN("engine {}: refused a malformed notification of {} bytes from connection {} (name + msg at most {})",
                  local_name, payload.size(), from, core::kMaxNamedNotifyBytes);
    return Err(Errc::kInvalidArg, "malformed notification ({} bytes; name + msg at most {})", payload.size(),
               core::kMaxNamedNotifyBytes);
  }
  size_t waiting = 0;
  if (!notifies.Push(NotifyDesc{std::move(m->name), std::move(m->msg)}, &waiting)) {
    return Err(Errc::kQueueFull,
               "the notification queue of engine {} is full ({} waiting, notify_queue_depth={}): it has not "
               "called GetNotifies",
               local_name, waiting, cfg.notify_queue_depth);
  }
  return Status::Ok();
}

Result<std::string> Engine::Impl::Other(int64_t from, uint8_t type, std::string_view payload) {
  switch (static_cast<ControlMsg>(type)) {
    case ControlMsg::kHello: return Hello(payload);
    case ControlMsg::kBye: {
      size_t erased = 0;
      uint64_t key = 0;
      {
        std::lock_guard lock(clients_mu);
        if (auto it = clients.find(from); it != clients.end()) {
          key = it->second.watch;
          clients.erase(it);
          erased = 1;
        }
      }
      Unwatch(key);  // it left cleanly: its end is no death
      if (!erased) {
        (void)KnownClient(from, "goodbye");  // logs
        return Err(Errc::kPeerFailed, "engine {} does not know this client (id {})", local_name, from);
      }
      if (session) session->Unsubscribe(from);
      return std::string();
    }
    case ControlMsg::kGone: {
      auto c = ConnById(from);
      if (!c) {
        HIXL_LOG_WARN("engine {}: refused a gone request from id {}, which is none of its connections", local_name,
                      from);
        return Err(Errc::kPeerFailed, "engine {} has no connection with id {}", local_name, from);
      }
      c->Break("it was finalized");
      Unwatch(c->watch);  // it left cleanly: its end is no death
      return std::string();
    }
    default: return Err(Errc::kInvalidArg, "unknown control request {}", type);
  }
}

std::shared_ptr<Engine::Impl::Conn> Engine::Impl::ConnById(int64_t id) {
  std::lock_guard lock(conns_mu);
  auto it = conns_by_id.find(id);
  return it == conns_by_id.end() ? nullptr : it->second;
}

Result<std::string> Engine::Impl::Hello(std::string_view payload) {
  auto h = core::DecodeHello(payload);
  if (!h) return Err(Errc::kInvalidArg, "malformed hello");
  std::lock_guard lock(clients_mu);
  if (clients.size() >= kMaxClients) {
    HIXL_LOG_WARN("engine {}: refused a hello from {}: it has {} clients already (at most {})", local_name, h->name,
                  clients.size(), kMaxClients);
    return Err(Errc::kQueueFull, "engine {} has {} clients already (at most {})", local_name, clients.size(),
               kMaxClients);
  }
  const int64_t id = engine::NewConnectionId();
  Client c;
  c.name = h->name;
  c.callback = std::make_shared<bootstrap::ControlClient>(h->id_for_server, id, h->callback_host, h->callback_port,
                                                          "engine " + h->name, cfg.secret);
  // The client listens there before it says hello: a call back refused
  // later means it is gone, found at once instead of by the timeout.
  c.callback->PeerListensAlready();
  auto listens = engine::ParseEngine("hello", h->name);
  c.death_key = listens.ok() && listens.value().port != 0
                    ? h->name
                    : fmt::format("{} via {}:{}", h->name, h->callback_host, h->callback_port);
  ForgetDeath(c.death_key);
  // Watched through that endpoint: its death ends our WaitNotifies.
  c.watch = WatchPeer(h->callback_host, h->callback_port, "engine " + h->name,
                      [this, id](const std::string& why) { ClientDied(id, why); });
  clients.emplace(id, std::move(c));
  return core::Encode(core::HelloReply{uuid, id, session->Addresses()});
}

// ------------------------------------------------------------ dead peers

uint64_t Engine::Impl::WatchPeer(const std::string& host, uint16_t port, const std::string& who,
                                 core::PeerWatch::OnDead died) {
  std::lock_guard lock(watch_mu);
  if (!watch) watch = core::PeerWatch::Acquire();
  return watch ? watch->Watch(host, port, cfg.secret, who, std::move(died)) : 0;
}

void Engine::Impl::Unwatch(uint64_t key) {
  if (key == 0) return;
  std::shared_ptr<core::PeerWatch> w;
  {
    std::lock_guard lock(watch_mu);
    w = watch;
  }
  if (w) w->Unwatch(key);
}

void Engine::Impl::ConnDied(int64_t id, const std::string& why) {
  std::string name;
  {
    std::lock_guard lock(conns_mu);
    auto it = conns_by_id.find(id);
    if (it == conns_by_id.end()) return;  // disconnected meanwhile
    name = it->second->name;
  }
  TellDeath(name, fmt::format("Engine::WaitNotifies: engine {} (which engine {} connected to) died: {}", name,
                              local_name, why));
}

void Engine::Impl::ClientDied(int64_t id, const std::string& why) {
  std::string name, key;
  {
    std::lock_guard lock(clients_mu);
    auto it = clients.find(id);
    if (it == clients.end()) return;  // it said goodbye meanwhile
    name = it->second.name;
    key = it->second.death_key;
  }
  TellDeath(key,
            fmt::format("Engine::WaitNotifies: engine {} (connected to engine {}) died: {}", name, local_name, why));
}

void Engine::Impl::TellDeath(const std::string& key, std::string alert) {
  {
    std::lock_guard lock(dead_mu);
    if (!told_dead.insert(key).second) return;
  }
  notifies.Alert(std::move(alert));
}

void Engine::Impl::ForgetDeath(const std::string& key) {
  std::lock_guard lock(dead_mu);
  told_dead.erase(key);
}

}  // namespace hixl

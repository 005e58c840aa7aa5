#include "core/session.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "base/log.h"

namespace hixl::core {

// ------------------------------------------------------------ PeerSession

Result<std::string> PeerSession::Call(ControlMsg type, std::string_view payload, int64_t timeout_ms) const {
  if (!control_) return Err(Errc::kInternal, "no control connection to {}", who_);
  return control_->Call(Wire(type), payload, timeout_ms);
}

Status PeerSession::Refresh(int64_t timeout_ms) {
  std::lock_guard lock(refresh_mu_);
  return RefreshPeerTable(table_, *transport_, id_, who_, [&]() -> Result<RegionTable> {
    if (self_) return self_->Table();
    auto bytes = Call(ControlMsg::kFetchTable, {}, timeout_ms);
    if (!bytes.ok()) {
      return Err(bytes.status().code(), "fetching the region table of {}: {}", who_, bytes.status().message());
    }
    return RegionTable::Parse(bytes.value());
  });
}

Result<const PeerTable::Entry*> PeerSession::Find(uint64_t addr, uint64_t len, int64_t timeout_ms,
                                                  PeerTable::Pin* pin) {
  *pin = table_.Hold();
  if (const PeerTable::Entry* e = table_.Find(addr, len)) return e;
  pin->Release();
  HIXL_RETURN_IF_ERROR(Refresh(timeout_ms));
  *pin = table_.Hold();
  return table_.Find(addr, len);
}

Status PeerSession::Quiesce(int64_t timeout_ms) {
  const auto start = std::chrono::steady_clock::now();
  if (!table_.AwaitReaders(timeout_ms)) {
    return Err(Errc::kTimeout, "transfers to {} still used the region after {} ms", who_, timeout_ms);
  }
  // What those operations left in flight (UCX puts, relayed slots) completes
  // here: its data lands, or fails, before the owner hears back.
  Status s = transport_->Flush(id_);
  if (s.ok()) return s;
  if (s.code() == Errc::kTimeout) {
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    return Err(Errc::kTimeout, "transfers to {} were still in flight after {} ms: {}", who_, waited, s.message());
  }
  // Failed transfers landed nothing; their issuer hears of them at its fence.
  std::lock_guard lock(deferred_mu_);
  if (deferred_.ok()) deferred_ = std::move(s);
  has_deferred_.store(true, std::memory_order_release);
  return Status::Ok();
}

Status PeerSession::TakeDeferred() {
  if (!has_deferred_.load(std::memory_order_acquire)) return Status::Ok();
  std::lock_guard lock(deferred_mu_);
  has_deferred_.store(false, std::memory_order_relaxed);
  return std::exchange(deferred_, Status::Ok());
}

// ---------------------------------------------------------------- Session

Session::Options Session::Options::From(const bootstrap::SharedOptions& shared, int self_id, int identity_ids) {
  Options o;
  o.self_id = self_id;
  o.identity_ids = identity_ids;
  o.node = Node::Options::From(shared);
  return o;
}

Result<std::unique_ptr<Session>> Session::Create(const Options& options) {
  HIXL_ASSIGN_OR_RETURN(std::shared_ptr<Node> node, Node::Attach(options.node, options.self_id, options.identity_ids));
  std::unique_ptr<Session> s(new Session(options, std::move(node)));
  for (int id = 0; id < options.identity_ids; ++id) s->ids_.push_back(id);
  return s;
}

Session::~Session() {
  Shutdown();
  std::lock_guard lock(ids_mu_);
  node_->Detach(ids_);
}

void Session::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // After RemoveListener no request of this door is being served, or will be.
  if (server_) server_->RemoveListener(listener_);
  server_ = nullptr;
  ReleaseAllRegions();
}

int Session::NewPeerId() {
  const int id = node_->AllocateId();
  std::lock_guard lock(ids_mu_);
  ids_.push_back(id);
  return id;
}

void Session::ReleasePeerId(int id) {
  {
    std::lock_guard lock(ids_mu_);
    auto it = std::find(ids_.begin(), ids_.end(), id);
    if (it == ids_.end()) return;
    ids_.erase(it);
  }
  node_->FreeId(id);
}

PublishedAddresses Session::Addresses() const {
  PublishedAddresses out;
  for (const auto& t : transports()) out.push_back({std::string(t->name()), t->LocalAddress()});
  return out;
}

Session::Choice Session::Pick(const PublishedAddresses& theirs, transport::MemKind kind) const {
  for (const auto& t : transports()) {
    const transport::Capabilities& caps = t->caps();
    if (kind == transport::MemKind::kHost ? !caps.host_memory : !caps.device_memory) continue;
    // The peer's address of the same kind of transport, if it published one.
    for (const PublishedAddress& a : theirs) {
      if (a.kind == t->name() && t->CanReach(a.address)) return {t.get(), a.address, a.address == t->LocalAddress()};
    }
  }
  return {};
}

bool Session::ReachesOtherHosts() const {
  for (const auto& t : transports()) {
    if (t->caps().remote_hosts) return true;
  }
  return false;
}

std::string Session::TransportNames() const {
  std::string s;
  for (const auto& t : transports()) s += (s.empty() ? "" : ", ") + std::string(t->name());
  return s;
}

Status Session::Flush() {
  Status first;
  for (const auto& t : transports()) {
    Status s = t->Flush();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

Status Session::Listen(const std::string& host, uint16_t port, Delegate* delegate) {
  if (server_) return Err(Errc::kInternal, "this front door listens already (on port {})", port_);
  delegate_ = delegate;
  HIXL_ASSIGN_OR_RETURN(bootstrap::ControlServer * server, node_->Control());
  auto serve = [this](int from, uint8_t type, std::string_view p) { return Serve(from, type, p); };
  HIXL_ASSIGN_OR_RETURN(bootstrap::ControlServer::Listener l, server->AddListener(host, port, serve));
  server_ = server;
  listener_ = l.id;
  port_ = l.port;
  return Status::Ok();
}

uint16_t Session::port() const { return server_ ? port_ : 0; }

Result<std::string> Session::Serve(int from, uint8_t type, std::string_view payload) {
  switch (static_cast<ControlMsg>(type)) {
    case ControlMsg::kFetchTable: {
      HIXL_ASSIGN_OR_RETURN(Subscriber sub, delegate_->SubscriberFor(from));
      {
        std::lock_guard lock(subscribers_mu_);
        subscribers_.insert_or_assign(from, std::move(sub));
      }
      return registry_.Table().Serialize();
    }
    case ControlMsg::kInvalidate: {
      auto m = DecodeInvalidation(payload);
      if (!m) {
        HIXL_LOG_WARN("refused a malformed invalidation ({} bytes, not 24) from peer {}", payload.size(), from);
        return Err(Errc::kInvalidArg, "malformed invalidation ({} bytes)", payload.size());
      }
      HIXL_ASSIGN_OR_RETURN(std::shared_ptr<PeerSession> peer, delegate_->PeerFor(from));
      if (!peer) return std::string();
      peer->table().Invalidate(m->generation, m->base, m->len);
      // The acknowledgement is the fence: only once our transfers into the
      // region have finished.
      HIXL_RETURN_IF_ERROR(peer->Quiesce(opts_.node.timeout_ms));
      return std::string();
    }
    case ControlMsg::kNotify: HIXL_RETURN_IF_ERROR(delegate_->Notified(from, payload)); return std::string();
    default: return delegate_->Other(from, type, payload);
  }
}

Status Session::AddRegion(LocalRegistry::Region region) {
  HIXL_RETURN_IF_ERROR(node_->Acquire(region, &region.keys));
  bool added = false;
  Status s = registry_.Add(region, &added);
  // One node reference per region of this door, however often it registers it.
  if (!s.ok() || !added) node_->Release(region.desc, region.heap);
  return s;
}

Status Session::RemoveRegion(uint64_t base, bool heap, std::optional<LocalRegistry::Region>* removed) {
  std::optional<LocalRegistry::Region> gone;
  HIXL_RETURN_IF_ERROR(registry_.Remove(base, heap, &gone));
  if (!gone) return Status::Ok();  // references remain
  const Invalidation inv{registry_.generation(), base, gone->desc.len};
  Status dead;    // the first subscriber found gone
  Status silent;  // the first that did not acknowledge
  if (self_peer_) {
    self_peer_->table().Invalidate(inv.generation, inv.base, inv.len);
    silent = self_peer_->Quiesce(opts_.node.timeout_ms);
  }
  // Every peer that holds a copy of our table forgets the region, and
  // finishes its transfers into it, before it answers.  Copied out: our own
  // control thread (a connection to ourselves) may need the lock to answer.
  std::vector<std::pair<int, Subscriber>> subs;
  {
    std::lock_guard lock(subscribers_mu_);
    for (auto& [from, s] : subscribers_) subs.emplace_back(from, s);
  }
  const std::string payload = Encode(inv);
  for (const auto& [from, s] : subs) {
    auto r = s.client->Call(Wire(ControlMsg::kInvalidate), payload, opts_.node.timeout_ms);
    if (r.ok()) continue;
    if (r.status().code() == Errc::kPeerFailed) {
      // A peer that is gone reaches nothing any more: done with it.
      HIXL_LOG_WARN("{} is gone; it no longer holds region [{:#x}, +{}): {}", s.who, base, inv.len,
                    r.status().message());
      Unsubscribe(from);
      if (dead.ok()) dead = Err(Errc::kPeerFailed, "{} is gone ({})", s.who, r.status().message());
    } else if (silent.ok()) {
      silent = Err(r.status().code(), "{} did not acknowledge within {} ms that it no longer accesses it: {}", s.who,
                   opts_.node.timeout_ms, r.status().message());
    }
  }
  // The transports' registration (UCX memory handle, the node's range that
  // the relay checks) goes only after the answers: a late relayed or UCX
  // write then fails instead of landing.
  node_->Release(gone->desc, gone->heap);
  if (removed) *removed = std::move(gone);
  const std::string what = fmt::format("region [{:#x}, +{}) is deregistered here, but", base, inv.len);
  if (!silent.ok()) {
    return Err(silent.code(), "{} {}; that peer may still reach the memory", what, silent.message());
  }
  if (!dead.ok()) return Err(Errc::kPeerFailed, "{} {}; every other peer acknowledged", what, dead.message());
  return Status::Ok();
}

void Session::Unsubscribe(int from) {
  std::lock_guard lock(subscribers_mu_);
  subscribers_.erase(from);
}

void Session::ReleaseAllRegions() {
  for (LocalRegistry::Region& r : registry_.TakeAll()) node_->Release(r.desc, r.heap);
}

}  // namespace hixl::core

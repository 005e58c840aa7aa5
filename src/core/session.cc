#include "core/session.h"

#include <algorithm>

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

Result<const PeerTable::Entry*> PeerSession::Find(uint64_t addr, uint64_t len, int64_t timeout_ms) {
  if (const PeerTable::Entry* e = table_.Find(addr, len)) return e;
  HIXL_RETURN_IF_ERROR(Refresh(timeout_ms));
  return table_.Find(addr, len);
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
      if (peer) peer->table().Invalidate(m->generation, m->base, m->len);
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
  if (self_peer_) self_peer_->table().Invalidate(inv.generation, inv.base, inv.len);
  // Every peer that holds a copy of our table forgets the region before we
  // return, so no access reaches it afterwards.  Copied out: our own control
  // thread (a connection to ourselves) may need the lock to answer.
  std::vector<Subscriber> subs;
  {
    std::lock_guard lock(subscribers_mu_);
    for (auto& [from, s] : subscribers_) subs.push_back(s);
  }
  const std::string payload = Encode(inv);
  for (const Subscriber& s : subs) {
    auto r = s.client->Call(Wire(ControlMsg::kInvalidate), payload, opts_.node.timeout_ms);
    if (!r.ok()) HIXL_LOG_DEBUG("{} did not acknowledge a deregistration: {}", s.who, r.status().message());
  }
  node_->Release(gone->desc, gone->heap);
  if (removed) *removed = std::move(gone);
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

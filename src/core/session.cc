#include "core/session.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <tuple>
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
    return FetchTable(timeout_ms);
  });
}

Result<RegionTable> PeerSession::ReadBoard() const {
  HIXL_ASSIGN_OR_RETURN(std::string bytes, board_->Read());
  Result<RegionTable> t = RegionTable::Parse(bytes);
  if (!t.ok()) {
    HIXL_LOG_WARN("the table board of {} holds a malformed table: {}", who_, t.status().message());
    return Err(t.status().code(), "the table board of {} holds a malformed table ({})", who_, t.status().message());
  }
  return t;
}

Result<RegionTable> PeerSession::FetchTable(int64_t timeout_ms) {
  if (board_) {
    // Subscribed before the read: the owner then tells us of every removal
    // it publishes after our bit was set.
    board_->Subscribe(board_self_id_);
    Result<RegionTable> t = ReadBoard();
    if (t.ok()) return t;
    HIXL_LOG_DEBUG("{}; asking over the control connection", t.status().message());
  }
  auto bytes = Call(ControlMsg::kFetchTable, {}, timeout_ms);
  if (!bytes.ok()) {
    return Err(bytes.status().code(), "fetching the region table of {}: {}", who_, bytes.status().message());
  }
  return RegionTable::Parse(bytes.value());
}

Status PeerSession::AcknowledgeRemovals(int self_id, int64_t timeout_ms) {
  if (!board_) return Status::Ok();
  const BoardReader::Removal r = board_->LatestRemoval();
  // The peer published its table before it rang: what our copy holds and
  // that table does not (the same range with the same key) is what it
  // removed.  Regions it still has stay, so no lookup of another thread
  // misses one of them meanwhile.
  Result<RegionTable> now = [&] {
    std::lock_guard lock(refresh_mu_);
    return FetchTable(timeout_ms);
  }();
  if (now.ok()) {
    const std::string tname(transport_->name());
    std::set<std::tuple<uint64_t, uint64_t, std::string_view>> held;
    for (const RegionRecord& rr : now->regions) {
      auto k = rr.keys.find(tname);
      if (k != rr.keys.end()) held.emplace(rr.base, rr.len, k->second);
    }
    table_.Retain(std::max(now->generation, r.generation), [&](const PeerTable::Entry& e) {
      return held.count({e.base, e.len, e.blob.view()}) != 0;
    });
  } else {
    HIXL_LOG_DEBUG("dropping every region of {} from our copy ({})", who_, now.status().message());
    table_.Invalidate(r.generation, 0, UINT64_MAX);
  }
  HIXL_RETURN_IF_ERROR(Quiesce(timeout_ms));
  board_->Ack(self_id, r.number);
  return Status::Ok();
}

void PeerSession::Warm(std::span<const Span> hot) {
  std::lock_guard lock(refresh_mu_);
  if (!board_) return;
  Result<RegionTable> t = ReadBoard();
  if (!t.ok()) {
    HIXL_LOG_DEBUG("not preparing {} ahead: {}", who_, t.status().message());
    return;
  }
  const std::string tname(transport_->name());
  for (const RegionRecord& r : t->regions) {
    auto k = r.keys.find(tname);
    if (k == r.keys.end()) continue;
    auto key = transport_->UnpackKey(id_, r.base, r.len, k->second);
    if (!key.ok()) {
      HIXL_LOG_DEBUG("not preparing {} ahead: {}", who_, key.status().message());
      continue;
    }
    for (const Span& s : hot) key.value()->Prefault(s.addr, s.len);
  }
}

Result<const PeerTable::Entry*> PeerSession::FindAfterRefresh(uint64_t addr, uint64_t len, int64_t timeout_ms,
                                                              PeerTable::Pin* pin) {
  pin->Release();
  bool learned = false;
  if (board_ && !self_) {
    HIXL_ASSIGN_OR_RETURN(learned, LearnFromBoard(addr, len));
  }
  if (!learned) HIXL_RETURN_IF_ERROR(Refresh(timeout_ms));
  table_.Hold(pin);
  return table_.Find(addr, len);
}

Result<bool> PeerSession::LearnFromBoard(uint64_t addr, uint64_t len) {
  std::lock_guard lock(refresh_mu_);
  // Subscribed before the read, as in FetchTable: a removal of the region
  // after it reaches us as an invalidation.
  board_->Subscribe(board_self_id_);
  // The region holding the range wholly, and its key for our transport.
  struct Finder final : RegionTableVisitor {
    uint64_t addr = 0, len = 0;
    std::string_view tname;
    bool inside = false, found = false;
    uint64_t base = 0, size = 0;
    std::string blob;
    void Region(uint64_t b, uint64_t l, transport::MemKind) override {
      inside = RangeInside(addr, len, b, l);
      if (inside) base = b, size = l;
    }
    void Key(std::string_view name, std::string_view b) override {
      if (inside && name == tname) found = true, blob.assign(b);
    }
  } f;
  f.addr = addr;
  f.len = len;
  f.tname = transport_->name();
  for (int attempt = 0; attempt < 8; ++attempt) {
    uint64_t generation = 0;
    Status s = board_->Visit([&](std::string_view bytes) -> Status {
      f.inside = f.found = false;  // a torn read's findings are dropped
      HIXL_ASSIGN_OR_RETURN(generation, ScanRegionTable(bytes, f));
      return Status::Ok();
    });
    if (!s.ok()) {
      // The whole table, which says what is wrong and asks over the control
      // connection where the board cannot answer.
      HIXL_LOG_DEBUG("learning a region of {} from its board: {}", who_, s.message());
      return false;
    }
    if (!f.found) return true;  // no such region (reachable by our transport): the lookup misses
    HIXL_ASSIGN_OR_RETURN(auto key, transport_->UnpackKey(id_, f.base, f.size, f.blob));
    switch (table_.Add(generation, {f.base, f.size, std::move(key), PeerTable::Blob(f.blob)})) {
      case PeerTable::Added::kYes: return true;
      case PeerTable::Added::kStale: continue;  // a removal newer than our read was taken meanwhile
      case PeerTable::Added::kOverlaps: return false;
    }
  }
  return false;
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

// ---------------------------------------------------------------- fan-out

std::vector<Result<std::string>> CallEach(const std::vector<FanoutCall>& calls, int64_t timeout_ms) {
  std::vector<Result<std::string>> out(calls.size(), Result<std::string>(Status(Errc::kInternal, "not called")));
  if (calls.empty()) return out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::atomic<size_t> next{0};
  // Each thread takes the next call and gives it what is left of the one
  // deadline: a peer that never answers holds one thread until then, and
  // the calls whose turn comes later are not made at all.
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < calls.size(); i = next.fetch_add(1)) {
      const int64_t left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) {
        out[i] = Err(Errc::kTimeout, "not asked: the {} ms bound was spent waiting on other peers", timeout_ms);
        continue;
      }
      out[i] = calls[i].client ? calls[i].client->Call(calls[i].type, calls[i].payload, left)
                               : Result<std::string>(Err(Errc::kInternal, "no control connection"));
    }
  };
  const size_t n = std::min(calls.size(), kMaxFanoutThreads);
  std::vector<std::thread> threads;
  threads.reserve(n - 1);
  for (size_t t = 1; t < n; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  return out;
}

std::string NameSome(const std::vector<std::string>& names, size_t most) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < most; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > most) s += fmt::format(" (and {} more)", names.size() - most);
  return s;
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
  if (rings_.joinable()) {
    stop_rings_.store(true, std::memory_order_seq_cst);
    board_->WakeRings();
    rings_.join();
  }
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
  if (board_) out.push_back({std::string(kBoardKind), board_->Address()});
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
  auto serve = [this](int64_t from, uint8_t type, std::string_view p) { return Serve(from, type, p); };
  HIXL_ASSIGN_OR_RETURN(bootstrap::ControlServer::Listener l, server->AddListener(host, port, serve));
  server_ = server;
  listener_ = l.id;
  port_ = l.port;
  return Status::Ok();
}

uint16_t Session::port() const { return server_ ? port_ : 0; }

Status Session::EnableBoard(uint32_t ids) {
  if (board_) return Status::Ok();
  HIXL_ASSIGN_OR_RETURN(const bool allowed, transport::ProcFdAllowed(opts_.node.transports));
  if (!allowed) return Status::Ok();  // peers ask over the control connection
  HIXL_ASSIGN_OR_RETURN(board_, TableBoard::Create(ids));
  PublishTable();
  return Status::Ok();
}

void Session::ServeBoard() {
  if (!board_ || rings_.joinable() || shut_down_) return;
  rings_ = std::thread([this] { ServeRings(); });
  ::pthread_setname_np(rings_.native_handle(), "hixl-board");
}

void Session::ServeRings() {
  while (!stop_rings_.load(std::memory_order_acquire)) {
    for (int owner : board_->TakeRings(-1, &stop_rings_)) {
      if (owner == self_id() || !delegate_) continue;
      Result<std::shared_ptr<PeerSession>> peer = delegate_->PeerFor(owner);
      if (!peer.ok() || !peer.value()) continue;  // not a peer of ours: nothing to drop, no word to answer in
      Status s = peer.value()->AcknowledgeRemovals(self_id(), opts_.node.timeout_ms);
      if (!s.ok()) {
        HIXL_LOG_WARN("not acknowledging the removal by {} (it will report us as silent): {}", peer.value()->who(),
                      s.message());
      }
    }
  }
}

void Session::PublishTable() {
  if (board_) board_->Publish([this] { return registry_.Table().Serialize(); });
}

bootstrap::ControlAnswer Session::Serve(int64_t from, uint8_t type, std::string_view payload) {
  switch (static_cast<ControlMsg>(type)) {
    case ControlMsg::kFetchTable: {
      HIXL_ASSIGN_OR_RETURN(Subscriber sub, delegate_->SubscriberFor(from));
      {
        std::lock_guard lock(subscribers_mu_);
        board_dropped_.erase(from);
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
      // region have finished.  That wait is a worker's, off the event loop
      // (which serves every other request meanwhile); the requester's
      // connection waits for it.  The requester's bound counts from now:
      // time spent queued behind other work comes out of it.
      const int64_t bound = opts_.node.timeout_ms;
      const auto asked = std::chrono::steady_clock::now();
      return bootstrap::ControlAnswer::Later([peer = std::move(peer), bound, asked]() -> Result<std::string> {
        const int64_t queued =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - asked).count();
        if (queued >= bound) {
          return Err(Errc::kTimeout, "the invalidation from {} waited {} ms for a control worker (bound {} ms)",
                     peer->who(), queued, bound);
        }
        HIXL_RETURN_IF_ERROR(peer->Quiesce(bound - queued));
        return std::string();
      });
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
  if (s.ok() && added) PublishTable();
  return s;
}

Status Session::RemoveRegion(uint64_t base, bool heap, std::optional<LocalRegistry::Region>* removed) {
  std::optional<LocalRegistry::Region> gone;
  HIXL_RETURN_IF_ERROR(registry_.Remove(base, heap, &gone));
  if (!gone) return Status::Ok();  // references remain
  // Off the board before its subscribers are read: a peer that subscribes
  // later reads a table without the region.
  PublishTable();
  const Invalidation inv{registry_.generation(), base, gone->desc.len};
  const int64_t bound = opts_.node.timeout_ms;
  Status self_silent;
  if (self_peer_) {
    self_peer_->table().Invalidate(inv.generation, inv.base, inv.len);
    self_silent = self_peer_->Quiesce(bound);
  }
  // Every peer that holds a copy of our table forgets the region, and
  // finishes its transfers into it, before it answers; all are asked at
  // once, so that a crowd of silent ones cannot stretch this past the
  // bound.  Copied out: our own control thread (a connection to ourselves)
  // may need the lock to answer.
  std::vector<std::pair<int64_t, Subscriber>> subs;
  std::set<int64_t> board_dropped;
  {
    std::lock_guard lock(subscribers_mu_);
    for (auto& [from, s] : subscribers_) subs.emplace_back(from, s);
    board_dropped = board_dropped_;
  }
  // And the peers that read the board (their bits; this process's own id,
  // one the door does not know, or one dropped before is not asked): rung
  // on their own boards where we have them open, else asked over the
  // control connection.
  struct Rung {
    int id;
    std::shared_ptr<PeerSession> peer;
  };
  std::vector<Rung> rung;
  if (board_ && delegate_) {
    for (int id : board_->Subscribers()) {
      const bool known = std::any_of(subs.begin(), subs.end(), [&](const auto& s) { return s.first == id; });
      if (id == self_id() || known || board_dropped.count(id) != 0) continue;
      Result<std::shared_ptr<PeerSession>> peer = delegate_->PeerFor(id);
      if (peer.ok() && peer.value() && peer.value()->has_board()) {
        rung.push_back({id, std::move(peer.value())});
        continue;
      }
      Result<Subscriber> sub = delegate_->SubscriberFor(id);
      if (sub.ok() && sub->client) subs.emplace_back(id, std::move(sub.value()));
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(bound);
  uint64_t number = 0;
  if (!rung.empty()) {
    number = board_->BeginRemoval(inv.generation);
    for (const Rung& r : rung) r.peer->RingBoard(self_id());  // each has a board: checked above
  }
  std::vector<FanoutCall> calls;
  calls.reserve(subs.size());
  const std::string payload = Encode(inv);
  for (const auto& [from, s] : subs) calls.push_back({s.client, Wire(ControlMsg::kInvalidate), payload});
  const std::vector<Result<std::string>> answers = CallEach(calls, bound);
  std::vector<std::pair<int, Errc>> unacked;
  if (!rung.empty()) {
    std::vector<int> ids;
    ids.reserve(rung.size());
    for (const Rung& r : rung) ids.push_back(r.id);
    unacked = board_->AwaitAcks(number, ids, deadline, [&](int id) {
      for (const Rung& r : rung) {
        if (r.id == id) return !r.peer->BoardAlive();
      }
      return false;
    });
  }
  const size_t asked = subs.size() + rung.size();
  std::vector<std::string> dead, silent, dropped;  // who, for the messages
  Status first_silent;                             // the first silent one's error, for its code
  for (const auto& [id, code] : unacked) {
    std::string who;
    for (const Rung& r : rung) {
      if (r.id == id) who = r.peer->who();
    }
    if (code == Errc::kPeerFailed) {
      // Gone: never asked again (as a dropped subscriber).
      {
        std::lock_guard lock(subscribers_mu_);
        board_dropped_.insert(id);
      }
      dropped.push_back(who);
      dead.push_back(who);
    } else {
      if (first_silent.ok()) {
        first_silent = Err(code, "{}: did not acknowledge on its table board within {} ms", who, bound);
      }
      silent.push_back(who);
    }
  }
  for (size_t i = 0; i < subs.size(); ++i) {
    if (answers[i].ok()) continue;
    const Status& e = answers[i].status();
    const std::string& who = subs[i].second.who;
    // A peer that is gone, or whose address never answered at all (an
    // address anyone may have given), is dropped: no later deregistration
    // waits on it again.  One that did answer once stays: it may be slow,
    // and it still holds our table, so it must hear of later removals.
    const bool drop =
        e.code() == Errc::kPeerFailed || !subs[i].second.client || !subs[i].second.client->answered_once();
    if (drop) {
      Unsubscribe(subs[i].first);
      dropped.push_back(who);
    }
    if (e.code() == Errc::kPeerFailed) {
      dead.push_back(who);
    } else {
      if (first_silent.ok()) first_silent = Err(e.code(), "{}: {}", who, e.message());
      silent.push_back(who);
    }
  }
  if (!silent.empty() || !dropped.empty()) {  // one line, however many
    HIXL_LOG_WARN("region [{:#x}, +{}): {} of {} peers did not acknowledge its removal ({}); dropped: {}", base,
                  inv.len, silent.size() + dead.size(), asked, first_silent.ok() ? "gone" : first_silent.message(),
                  dropped.empty() ? "none" : NameSome(dropped));
  }
  // The transports' registration (UCX memory handle, the node's range that
  // the relay checks) goes only after the answers: a late relayed or UCX
  // write then fails instead of landing.
  node_->Release(gone->desc, gone->heap);
  if (removed) *removed = std::move(gone);
  const std::string what = fmt::format("region [{:#x}, +{}) is deregistered here, but", base, inv.len);
  if (!self_silent.ok()) {
    return Err(self_silent.code(), "{} {}; this process may still reach the memory", what, self_silent.message());
  }
  if (!silent.empty()) {
    return Err(first_silent.code(),
               "{} {} of {} peers did not acknowledge within {} ms that they no longer access it, and may still "
               "reach the memory: {}{}; first error: {}",
               what, silent.size(), asked, bound, NameSome(silent),
               dead.empty() ? "" : fmt::format("; {} are gone: {}", dead.size(), NameSome(dead)),
               first_silent.message());
  }
  if (!dead.empty()) {
    return Err(Errc::kPeerFailed, "{} {} of {} peers are gone (dropped): {}; every other peer acknowledged", what,
               dead.size(), asked, NameSome(dead));
  }
  return Status::Ok();
}

void Session::Unsubscribe(int64_t from) {
  std::lock_guard lock(subscribers_mu_);
  subscribers_.erase(from);
  // Its board bit stays set: it is not asked again, as if it had left.
  if (board_) board_dropped_.insert(from);
}

void Session::ReleaseAllRegions() {
  std::vector<LocalRegistry::Region> all = registry_.TakeAll();
  PublishTable();
  for (LocalRegistry::Region& r : all) node_->Release(r.desc, r.heap);
}

}  // namespace hixl::core

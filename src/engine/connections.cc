// The engine's life cycle, its connections and its memory (the requests
// its peers make, and their deaths: requests.cc).
#include <algorithm>
#include <chrono>

#include "base/log.h"
#include "base/socket.h"
#include "core/control_protocol.h"
#include "engine/engine_impl.h"

namespace hixl {

using core::ControlMsg;

// ------------------------------------------------------------ life cycle

Status Engine::Impl::Start(const std::string& local_engine, const std::map<std::string, std::string>& options) {
  HIXL_ASSIGN_OR_RETURN(local, engine::ParseEngine("Engine::Initialize", local_engine));
  HIXL_ASSIGN_OR_RETURN(cfg, engine::ParseOptions(options));
  local_name = local_engine;
  uuid = engine::RandomId();
  notifies.set_depth(static_cast<size_t>(cfg.notify_queue_depth));
  // Engines (and the world) with the same options share the process's node.
  core::Session::Options sopts = core::Session::Options::From(cfg);
  // An engine listening on loopback is reached (and called back) only from
  // this host.
  sopts.node.transports.local_only = net::IsLoopback(local.host);
  auto s = core::Session::Create(sopts);
  if (!s.ok()) {
    const std::string& only = sopts.node.transports.only;
    // A malformed value (kInvalidArg) names its option or variable itself.
    return Err(
        s.status().code(), "Engine::Initialize: {}{}",
        only.empty() || s.status().code() == Errc::kInvalidArg ? "" : "transport " + only + " was asked for but ",
        s.status().message());
  }
  session = std::move(s.value());
  // A port > 0: listen there for peers.  Otherwise a free port serves only
  // the calls back from engines we connect to.
  Status l = session->Listen(local.host, local.port, this);
  if (!l.ok()) return Err(Errc::kBootstrap, "Engine::Initialize: cannot listen on {}: {}", local_engine, l.message());
  callback_host = local.host;
  if (callback_host == "0.0.0.0" || callback_host == "::") callback_host.clear();  // decided per peer
  return Status::Ok();
}

void Engine::Impl::Teardown() {
  {
    std::lock_guard lock(req_mu);
    stopping = true;
  }
  req_cv.notify_all();
  for (auto& w : workers) w.join();
  workers.clear();
  for (auto& [id, r] : requests) {
    if (r->state.load() == static_cast<int>(TransferStatus::WAITING)) {
      r->message = "the engine was finalized before the transfer completed";
      r->state.store(static_cast<int>(TransferStatus::FAILED));
    }
  }
  notifies.Close();
  // Tell the engines we connected to, and those connected to us.
  std::map<std::string, std::shared_ptr<Conn>> cs;
  {
    std::lock_guard lock(conns_mu);
    cs.swap(conns);
    conns_by_id.clear();
  }
  std::map<int64_t, Client> cl;
  {
    std::lock_guard lock(clients_mu);
    cl.swap(clients);
  }
  // Nobody is watched any more (a goodbye that goes unanswered is no death
  // to report), and no callback of the watch runs after this.
  for (auto& [name, c] : cs) {
    if (c) Unwatch(c->watch);
  }
  for (auto& [id, c] : cl) Unwatch(c.watch);
  // Every goodbye at once, under one short bound: however many clients
  // there are (at most kMaxClients), and whether or not their callback
  // addresses answer, Finalize waits `quick` for them in all.
  const int64_t quick = std::min<int64_t>(cfg.timeout_ms, 2000);
  std::vector<core::FanoutCall> calls;
  std::vector<std::string> whom;
  for (auto& [name, c] : cs) {
    if (c && !c->broken) {
      calls.push_back({c->peer->control(), core::Wire(ControlMsg::kBye), {}});
      whom.push_back("engine " + name);
    }
  }
  for (auto& [id, c] : cl) {
    calls.push_back({c.callback, core::Wire(ControlMsg::kGone), {}});
    whom.push_back("engine " + c.name);
  }
  const auto answers = core::CallEach(calls, quick);
  std::vector<std::string> silent;
  for (size_t i = 0; i < answers.size(); ++i) {
    if (!answers[i].ok()) silent.push_back(whom[i]);
  }
  if (!silent.empty()) {
    HIXL_LOG_INFO("engine {}: finalized; {} of {} engines did not hear its goodbye within {} ms: {}", local_name,
                  silent.size(), calls.size(), quick, core::NameSome(silent));
  }
  if (session) {
    session->Shutdown();
    session->ReleaseAllRegions();
    session.reset();
  }
  // Clients whose hello came meanwhile (the listener is closed now).
  std::map<int64_t, Client> late;
  {
    std::lock_guard lock(clients_mu);
    late.swap(clients);
  }
  for (auto& [id, c] : late) Unwatch(c.watch);
  std::shared_ptr<core::PeerWatch> last;
  {
    std::lock_guard lock(watch_mu);
    last.swap(watch);
  }
  last.reset();  // the last holder joins its thread here, with no lock held
}

// ------------------------------------------------------------- memory

Status Engine::Impl::Register(const MemDesc& mem, MemType type) {
  if (type == MEM_DEVICE) {
    return Err(Errc::kUnsupported, "Engine::RegisterMem: device memory is not supported yet (only MEM_HOST)");
  }
  if (type != MEM_HOST)
    return Err(Errc::kInvalidArg, "Engine::RegisterMem: unknown MemType {}", static_cast<int>(type));
  if (mem.addr == 0) return Err(Errc::kInvalidArg, "Engine::RegisterMem: addr is 0");
  if (mem.len == 0) return Err(Errc::kInvalidArg, "Engine::RegisterMem: len is 0");
  if (mem.addr + mem.len < mem.addr) {
    return Err(Errc::kInvalidArg, "Engine::RegisterMem: [{:#x}, +{}) wraps around", mem.addr, mem.len);
  }
  LocalRegistry::Region r;
  r.desc.base = mem.addr;
  r.desc.len = mem.len;
  Status s = session->AddRegion(std::move(r));
  if (!s.ok()) return Err(s.code(), "Engine::RegisterMem: {}", s.message());
  return s;
}

Status Engine::Impl::Deregister(MemHandle handle) {
  // Every engine holding our table forgets the region before this returns.
  std::optional<LocalRegistry::Region> removed;
  Status s = session->RemoveRegion(reinterpret_cast<uint64_t>(handle), false, &removed);
  // Removed, but some engine did not acknowledge (gone, or silent: named).
  if (!s.ok() && removed) return Err(s.code(), "Engine::DeregisterMem: {}", s.message());
  if (!s.ok()) {
    return Err(Errc::kInvalidArg, "Engine::DeregisterMem: handle {} is not a registration of this engine ({})", handle,
               s.message());
  }
  return s;
}

// ---------------------------------------------------------- connections

Status Engine::Impl::Connect(const std::string& remote, int32_t timeout_ms) {
  HIXL_ASSIGN_OR_RETURN(engine::HostPort hp, engine::ParseEngine("Engine::Connect", remote));
  if (hp.port == 0) {
    return Err(Errc::kInvalidArg,
               "Engine::Connect: '{}' has no port; an engine is reached at the ip:port it "
               "listens on",
               remote);
  }
  if (timeout_ms <= 0) return Err(Errc::kInvalidArg, "Engine::Connect: timeout_ms {} must be > 0", timeout_ms);
  const int64_t id = engine::NewConnectionId();
  {
    std::lock_guard lock(conns_mu);
    if (auto it = conns.find(remote); it != conns.end()) {
      return Status(Errc::kAlreadyConnected, fmt::format("Engine::Connect: already connected to {}{}", remote,
                                                         it->second ? "" : " (a connection is being made)"));
    }
    conns.emplace(remote, nullptr);  // reserved while we connect
  }
  auto c = std::make_shared<Conn>();
  Status s = Dial(remote, hp, id, timeout_ms, c.get());
  // An engine of another process is watched: its death ends our
  // WaitNotifies (one of this process cannot die apart from us).
  if (s.ok() && c->owns_peer_id) {
    c->watch =
        WatchPeer(hp.host, hp.port, "engine " + remote, [this, id](const std::string& why) { ConnDied(id, why); });
  }
  std::unique_lock lock(conns_mu);
  if (!s.ok() || state != State::kLive) {
    conns.erase(remote);
    lock.unlock();
    Unwatch(c->watch);
    return s.ok() ? Err(Errc::kNotInitialized, "Engine::Connect: the engine was finalized meanwhile") : s;
  }
  conns[remote] = c;
  conns_by_id[c->id] = c;
  lock.unlock();
  ForgetDeath(remote);
  return Status::Ok();
}

Status Engine::Impl::Dial(const std::string& remote, const engine::HostPort& hp, int64_t id, int32_t timeout_ms,
                          Conn* c) {
  const std::string who = "engine " + remote;
  core::Hello hello;
  hello.uuid = uuid;
  hello.name = local_name;
  hello.callback_host = callback_host.empty() ? net::LocalAddressTowards(hp.host, hp.port) : callback_host;
  hello.callback_port = session->port();
  hello.id_for_server = id;
  bootstrap::ControlClient dial(-1, -1, hp.host, hp.port, who, cfg.secret);
  const auto start = std::chrono::steady_clock::now();
  // Nobody listening there (yet): Connect retries until the deadline.
  if (Status c = dial.Connect(timeout_ms); !c.ok()) {
    if (c.code() == Errc::kTimeout) {
      return Err(Errc::kTimeout, "Engine::Connect: no engine answered at {} within {} ms: {}", remote, timeout_ms,
                 c.message());
    }
    return Err(Errc::kPeerFailed, "Engine::Connect: {}", c.message());
  }
  // The reply gets what is left of the one timeout.
  const auto spent =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  auto reply =
      dial.Call(core::Wire(ControlMsg::kHello), core::Encode(hello), std::max<int64_t>(1, int64_t{timeout_ms} - spent));
  dial.Close();
  if (!reply.ok()) {
    if (reply.status().code() == Errc::kTimeout) {
      return Err(Errc::kTimeout, "Engine::Connect: the engine at {} did not answer within {} ms: {}", remote,
                 timeout_ms, reply.status().message());
    }
    return Err(Errc::kPeerFailed, "Engine::Connect: {}", reply.status().message());
  }
  std::optional<core::HelloReply> r = core::DecodeHelloReply(reply.value());
  if (!r) return Err(Errc::kTransport, "Engine::Connect: malformed reply from {}", who);
  c->name = remote;
  c->id = id;
  c->our_id_there = r->id_for_client;
  core::Session::Choice choice = session->Pick(r->addresses);
  if (!choice.transport) {
    std::string theirs;
    for (auto& a : r->addresses) theirs += (theirs.empty() ? "" : ", ") + a.kind;
    return Err(Errc::kUnsupported,
               "Engine::Connect: {} cannot be reached with the transports in use here ({}; it offers {}): it is on "
               "another host{}",
               who, session->TransportNames(), theirs,
               !session->ReachesOtherHosts() && !cfg.transport.empty()
                   ? fmt::format(" and transport={} allows only same-host engines", cfg.transport)
                   : std::string());
  }
  // An engine of this process (this one, or another on the same node) is
  // reached through the node's own peer id, connected already; any other
  // gets a peer id of its own.
  const int peer_id = choice.self ? session->self_id() : session->NewPeerId();
  if (!choice.self) {
    // hp.host answered: the transports may connect there too.
    Status s = choice.transport->Connect(peer_id, choice.address, hp.host);
    if (!s.ok()) {
      return Err(s.code(), "Engine::Connect: {} transport to {}: {}", choice.transport->name(), who, s.message());
    }
  }
  c->owns_peer_id = !choice.self;
  auto control = std::make_shared<bootstrap::ControlClient>(r->id_for_client, id, hp.host, hp.port, who, cfg.secret);
  // It answered there: a refused connection later means it is gone, found
  // at once instead of by retrying until the call's timeout.
  control->PeerListensAlready();
  c->peer = std::make_shared<core::PeerSession>(peer_id, who, choice.transport, std::move(control));
  return Status::Ok();
}

Status Engine::Impl::Disconnect(const std::string& remote, int32_t timeout_ms) {
  if (timeout_ms <= 0) return Err(Errc::kInvalidArg, "Engine::Disconnect: timeout_ms {} must be > 0", timeout_ms);
  std::shared_ptr<Conn> c;
  {
    std::lock_guard lock(conns_mu);
    auto it = conns.find(remote);
    if (it == conns.end() || !it->second) {
      return Err(Errc::kNotConnected, "Engine::Disconnect: not connected to {}", remote);
    }
    c = it->second;
    conns.erase(it);
  }
  Unwatch(c->watch);  // we leave it: its end is no death
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  // Every wait below (the flush of what is in flight, the release) ends by
  // this call's own deadline.
  const transport::CallDeadline bound(deadline);
  // Transfers on this connection (asynchronous ones included) end before
  // this returns: the table forgets every region and we wait for those
  // that used it, then for what they left in flight.
  c->peer->table().Close();
  Status quiet = c->peer->Quiesce(timeout_ms);
  if (!c->broken)
    (void)c->peer->Call(ControlMsg::kBye, {}, transport::WaitMs(*session->node()));  // it may have gone anyway
  {
    // Until its goodbye went out the server could still ask us to forget a
    // region (answered with the closed table); after it, such a request
    // crossed the goodbye (PeerFor).
    std::lock_guard lock(conns_mu);
    conns_by_id.erase(c->id);
    closed_ids.push_back(c->id);
    if (closed_ids.size() > kRecentlyClosed) closed_ids.pop_front();
  }
  // Everything the connection took goes now: the transport's resources for
  // the peer (relay channel, mappings, endpoint), its peer id and its
  // control connection (with the last reference to the Conn).  Work still
  // in flight to a peer that did not answer in time is cut off with them:
  // it touches none of our memory after this.
  if (c->owns_peer_id) {
    std::lock_guard lock(c->release_mu);
    c->released = true;
    session->ReleasePeerId(c->peer->id());
    if (!quiet.ok()) {
      HIXL_LOG_INFO("Engine::Disconnect({}): {}; what was in flight was cut off", remote, quiet.message());
    }
    return Status::Ok();
  }
  if (!quiet.ok())
    return Err(quiet.code(), "Engine::Disconnect: disconnected from {}, but {}", remote, quiet.message());
  return Status::Ok();
}

Result<std::shared_ptr<Engine::Impl::Conn>> Engine::Impl::Find(const char* api, const std::string& remote) {
  std::shared_ptr<Conn> c;
  {
    std::lock_guard lock(conns_mu);
    auto it = conns.find(remote);
    if (it != conns.end()) c = it->second;
  }
  if (!c) return Err(Errc::kNotConnected, "{}: not connected to engine {} (call Connect first)", api, remote);
  if (c->broken) {
    return Err(Errc::kNotConnected, "{}: engine {} has gone away ({}); Disconnect, then Connect again", api, remote,
               c->BrokenReason());
  }
  return c;
}

}  // namespace hixl

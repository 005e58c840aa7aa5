#include "world/world.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "base/socket.h"
#include "bootstrap/pmix.h"
#include "transport/transport.h"

namespace hixl::world {

using core::DecodePeerRecord;
using core::Encode;
using core::PeerRecord;

namespace {

std::mutex g_mu;                           // init / finalize
std::atomic<WorldImpl*> g_world{nullptr};  // deliberately leaked at exit without finalize
bool g_finalized = false;

}  // namespace

WorldImpl* Current() { return g_world.load(std::memory_order_acquire); }

Status NotInitialized(const char* api) {
  std::lock_guard lock(g_mu);
  return Err(Errc::kNotInitialized, "{} called {}", api, g_finalized ? "after hixl_finalize" : "before hixl_init");
}

Status InitCurrent() {
  std::lock_guard lock(g_mu);
  if (g_world.load()) return Err(Errc::kAlreadyInitialized, "hixl_init called twice");
  HIXL_ASSIGN_OR_RETURN(bootstrap::Config cfg, bootstrap::ParseConfig(bootstrap::ProcessEnv()));
  // A malformed configuration is a kBootstrap error, as ParseConfig's are.
  if (Status s = transport::CheckName("HIXL_TRANSPORT", cfg.transport); !s.ok()) {
    return Status(Errc::kBootstrap, s.message());
  }
  HIXL_ASSIGN_OR_RETURN(std::unique_ptr<WorldImpl> w, WorldImpl::Create(cfg));
  g_world.store(w.release(), std::memory_order_release);
  g_finalized = false;
  return Status::Ok();
}

Status FinalizeCurrent() {
  std::lock_guard lock(g_mu);
  WorldImpl* w = g_world.load();
  if (!w) {
    return Err(Errc::kNotInitialized, "hixl_finalize called {}", g_finalized ? "twice" : "before hixl_init");
  }
  Status s = w->Finalize();
  g_world.store(nullptr, std::memory_order_release);
  g_finalized = true;
  delete w;
  return s;
}

WorldImpl::WorldImpl(const bootstrap::Config& config)
    : cfg_(config), notifications_(static_cast<size_t>(config.notify_queue_depth)) {}

WorldImpl::~WorldImpl() {
  // Stop every thread before the state it uses goes away.
  if (session_) session_->Shutdown();
}

Result<std::unique_ptr<WorldImpl>> WorldImpl::Create(const bootstrap::Config& config) {
  log::Configure(config.log_level, config.rank);
  std::unique_ptr<WorldImpl> w(new WorldImpl(config));
  HIXL_RETURN_IF_ERROR(w->Start());
  return w;
}

Status WorldImpl::Start() {
  const int n = cfg_.world_size;
  // 1. Rendezvous.
  if (n == 1) {
    store_ = std::make_unique<bootstrap::MemoryStore>();
  } else {
    if (cfg_.pmix_rendezvous) {
      // The launcher is a PMIx server: rank 0 hosts the store on a port of
      // its choosing and publishes where; every rank learns it.
      auto host_store = [&](const std::string& bind) -> Result<bootstrap::StoreAddress> {
        auto server = bootstrap::TcpStoreServer::Start(bind, 0, n, cfg_.secret);
        if (!server.ok()) {
          return Err(Errc::kBootstrap, "rank 0 cannot host the store on {}: {}", bind, server.status().message());
        }
        store_server_ = std::move(server.value());
        return bootstrap::StoreAddress{bind, store_server_->port()};
      };
      HIXL_ASSIGN_OR_RETURN(bootstrap::StoreAddress at,
                            bootstrap::PmixRendezvous(cfg_.rank, n, cfg_.master_addr_set ? cfg_.master_addr : "",
                                                      cfg_.net_dev, cfg_.timeout_ms, host_store));
      cfg_.master_addr = at.host;
      cfg_.master_port = at.port;
    } else if (cfg_.rank == 0) {
      HIXL_ASSIGN_OR_RETURN(store_server_, HostStore());
    }
    auto client =
        bootstrap::TcpStoreClient::Connect(cfg_.master_addr, cfg_.master_port, cfg_.rank, cfg_.timeout_ms, cfg_.secret);
    if (!client.ok()) {
      return Err(client.status().code() == Errc::kTimeout ? Errc::kTimeout : Errc::kBootstrap,
                 "rank {} cannot reach the store of rank 0 at {}:{} (MASTER_ADDR/MASTER_PORT): {}", cfg_.rank,
                 cfg_.master_addr, cfg_.master_port, client.status().message());
    }
    tcp_store_ = client.value().get();
    store_ = std::move(client.value());
  }

  // 2. The symmetric heap, at the same address everywhere.
  HIXL_RETURN_IF_ERROR(PlaceHeap());

  // 3. Transports: the process's node, shared with its engines when they
  // asked for the same options (its peer ids are then the ranks).
  Session::Options sopts = Session::Options::From(cfg_, cfg_.rank, n);
  // Every rank reached rank 0's store at MASTER_ADDR: a loopback one means
  // they all run here.
  sopts.node.transports.local_only = n == 1 || net::IsLoopback(cfg_.master_addr);
  auto session = Session::Create(sopts);
  if (!session.ok()) {
    const std::string& only = sopts.node.transports.only;
    // A malformed transport switch (kInvalidArg) names its variable itself
    // and is a malformed configuration, as ParseConfig's errors are.
    if (session.status().code() == Errc::kInvalidArg) return Status(Errc::kBootstrap, session.status().message());
    return only.empty() ? session.status()
                        : Err(session.status().code(), "HIXL_TRANSPORT={} but {}", only, session.status().message());
  }
  session_ = std::move(session.value());

  // 4. The barrier's flags: the first symmetric block, so at the same
  // address on every rank, registered before the peers meet.
  HIXL_RETURN_IF_ERROR(AllocBarrierBlock());

  // 5. Peers.
  HIXL_RETURN_IF_ERROR(ConnectPeers());
  StartBarrier();
  return Status::Ok();
}

Status WorldImpl::PlaceHeap() {
  const std::vector<uint64_t> bases = SymmetricHeap::CandidateBases();
  size_t first = 0;
  for (size_t attempt = 0; attempt < bases.size(); ++attempt) {
    heap_.reset();
    uint64_t got = bases.size();
    for (size_t i = first; i < bases.size() && !heap_; ++i) {
      auto h = SymmetricHeap::Reserve(bases[i]);
      if (h.ok()) {
        heap_ = std::move(h.value());
        got = i;
      }
    }
    std::vector<uint64_t> all(static_cast<size_t>(size()));
    HIXL_RETURN_IF_ERROR(Allgather(&got, all.data(), sizeof(got)));
    uint64_t worst = *std::max_element(all.begin(), all.end());
    if (worst >= bases.size()) {
      return Err(Errc::kNoMemory, "no rank-common address range is free for the symmetric heap (rank {} found none)",
                 std::max_element(all.begin(), all.end()) - all.begin());
    }
    if (std::all_of(all.begin(), all.end(), [&](uint64_t v) { return v == got; })) return Status::Ok();
    first = static_cast<size_t>(worst);
  }
  return Err(Errc::kNoMemory, "the ranks could not agree on an address for the symmetric heap");
}

// Rank 0's store server, on the socket the launcher bound for it (hixlrun's
// HIXL_STORE_FD) or on MASTER_ADDR:MASTER_PORT.  Only there: an address of
// this host that cannot be bound is an error, never a silent fallback to
// every interface.
Result<std::unique_ptr<bootstrap::TcpStoreServer>> WorldImpl::HostStore() {
  const int n = size();
  if (cfg_.store_fd >= 0) {
    net::Fd fd(cfg_.store_fd);
    cfg_.store_fd = -1;  // owned by the server (or closed) from here
    auto port = net::LocalPort(fd.get());
    if (port.ok() && port.value() != cfg_.master_port) {
      return Err(Errc::kBootstrap, "HIXL_STORE_FD={} listens on port {}, but MASTER_PORT is {}", fd.get(), port.value(),
                 cfg_.master_port);
    }
    auto server = bootstrap::TcpStoreServer::StartOn(std::move(fd), n, cfg_.secret);
    if (!server.ok()) {
      return Err(Errc::kBootstrap, "rank 0 cannot host the store on the socket its launcher passed (HIXL_STORE_FD): {}",
                 server.status().message());
    }
    return server;
  }
  auto server = bootstrap::TcpStoreServer::Start(cfg_.master_addr, cfg_.master_port, n, cfg_.secret);
  if (!server.ok()) {
    return Err(Errc::kBootstrap,
               "rank 0 cannot host the store on MASTER_ADDR:MASTER_PORT = {}:{} ({}); MASTER_ADDR must be an "
               "address of rank 0's host that the other ranks reach",
               cfg_.master_addr, cfg_.master_port, server.status().message());
  }
  return server;
}

Status WorldImpl::ConnectPeers() {
  const int n = size();
  peers_.resize(static_cast<size_t>(n));

  PeerRecord mine;
  mine.host = n > 1 ? net::LocalAddressTowards(cfg_.master_addr, cfg_.master_port) : "127.0.0.1";
  if (n > 1) {
    HIXL_RETURN_IF_ERROR(session_->Listen(mine.host, 0, this));
    // Our table where the ranks of this host read it without a message.
    HIXL_RETURN_IF_ERROR(session_->EnableBoard(static_cast<uint32_t>(n)));
  }
  mine.port = session_->port();
  mine.addresses = session_->Addresses();
  HIXL_RETURN_IF_ERROR(store_->Set(fmt::format("peer/{}", rank()), Encode(mine)));

  // Everyone's record in one request: the store answers when all are in.
  auto records = store_->Gather("peer/", n, cfg_.timeout_ms);
  if (!records.ok()) {
    return Err(records.status().code(), "waiting for every rank to join: {}", records.status().message());
  }
  host_ranks_ = 0;
  host_index_ = 0;
  for (int r = 0; r < n; ++r) {
    std::optional<PeerRecord> rec = DecodePeerRecord(records.value()[static_cast<size_t>(r)]);
    if (!rec) return Err(Errc::kBootstrap, "malformed peer record for rank {}", r);
    if (rec->host == mine.host) {
      if (r < rank()) ++host_index_;
      ++host_ranks_;
    }
    Session::Choice c = session_->Pick(rec->addresses);
    if (!c.transport) {
      return Err(Errc::kUnsupported,
                 "rank {} (at {}) is not reachable with the transports in use here ({}): it is on another host"
                 "{}",
                 r, rec->host, session_->TransportNames(),
                 session_->ReachesOtherHosts() ? ""
                 : !cfg_.transport.empty()
                     ? fmt::format(" and HIXL_TRANSPORT={} allows only same-host peers", cfg_.transport)
                     : std::string(" and no network transport is available"));
    }
    // Rank r is the transports' peer id r (Session::Options::identity_ids);
    // this process itself is connected by the node already.
    const bool self = r == rank();
    if (!self) HIXL_RETURN_IF_ERROR(c.transport->Connect(r, c.address, {}));
    auto control =
        self ? nullptr : std::make_shared<bootstrap::ControlClient>(rank(), r, rec->host, rec->port, cfg_.secret);
    peers_[static_cast<size_t>(r)] = std::make_shared<PeerSession>(
        r, fmt::format("rank {}", r), c.transport, std::move(control), self ? &session_->registry() : nullptr);
    if (self) session_->set_self_peer(peers_[static_cast<size_t>(r)]);
    if (!self) AttachBoard(r, rec->addresses);
  }
  // Every rank's flag block is registered before anyone signals into it.
  HIXL_RETURN_IF_ERROR(StoreBarrier());
  // The peers of this host, ready for their first touch with no message
  // (docs/scale.md, "First touch"): their heap segments mapped, and the page
  // tables made for their barrier flags and for the first blocks that
  // hixl_alloc will hand out, right after the barrier's block (the heap is
  // symmetric: where ours will be, theirs will).  A first put into each of
  // many peers otherwise takes a page fault each.
  const auto block = reinterpret_cast<uint64_t>(barrier_block_);
  const PeerSession::Span hot[] = {{block, DisseminationBarrier::kBlockBytes},
                                   {block + kBarrierBlockBytes, kWarmBlockBytes}};
  for (int r = 0; r < n; ++r) {
    if (r != rank()) peer(r).Warm(hot);
  }
  // Every peer is known from here: removals of theirs can be answered.
  session_->ServeBoard();
  return Status::Ok();
}

void WorldImpl::AttachBoard(int r, const core::PublishedAddresses& addresses) {
  for (const core::PublishedAddress& a : addresses) {
    if (a.kind != core::kBoardKind) continue;
    auto board = core::BoardReader::Open(a.address, peer(r).who());
    if (!board.ok()) {
      HIXL_LOG_DEBUG("rank {}: reading the region table of rank {} over its control connection: {}", rank(), r,
                     board.status().message());
    } else if (board.value()) {
      peer(r).AttachBoard(std::move(board.value()), rank());
    }
    return;
  }
}

// ------------------------------------------------------------------ memory

Result<void*> WorldImpl::Alloc(size_t size) {
  HIXL_ASSIGN_OR_RETURN(SymmetricHeap::Block b, heap_->Alloc(size));
  LocalRegistry::Region r;
  r.heap = true;
  r.desc.base = reinterpret_cast<uint64_t>(b.ptr);
  r.desc.len = size;
  r.desc.backing_fd = b.fd;
  r.desc.segment_id = b.segment_id;
  r.desc.segment_offset = b.segment_offset;
  r.desc.segment_size = b.segment_size;
  Status s = session_->AddRegion(std::move(r));
  if (!s.ok()) {
    (void)heap_->Free(b.ptr);
    return s;
  }
  return b.ptr;
}

Status WorldImpl::Free(void* ptr) {
  if (!ptr) return Status::Ok();
  if (!heap_->Contains(ptr))
    return Err(Errc::kInvalidArg, "hixl_free: {} is not symmetric memory from hixl_alloc", ptr);
  if (ptr == barrier_block_) {
    return Err(Errc::kInvalidArg, "hixl_free: {} is hixl's own block (the barrier's flags), not from hixl_alloc", ptr);
  }
  std::optional<LocalRegistry::Region> removed;
  Status s = session_->RemoveRegion(reinterpret_cast<uint64_t>(ptr), true, &removed);
  if (!s.ok() && !removed) return Err(s.code(), "hixl_free: {}", s.message());
  if (!s.ok() && s.code() != Errc::kPeerFailed) {
    // A peer may still write the block: it is never handed out again.
    return Err(s.code(), "hixl_free: {}; the block is kept out of the heap for good", s.message());
  }
  // Every live peer acknowledged (a peer that is gone maps nothing any more).
  auto freed = heap_->Free(ptr);
  if (!freed.ok()) return freed.status();
  if (!s.ok()) return Err(s.code(), "hixl_free: {}", s.message());
  return Status::Ok();
}

Status WorldImpl::Register(void* addr, size_t size) {
  if (!addr) return Err(Errc::kInvalidArg, "hixl_register_memory: addr is NULL");
  if (size == 0) return Err(Errc::kInvalidArg, "hixl_register_memory: size is 0");
  const auto base = reinterpret_cast<uint64_t>(addr);
  if (base + size < base) return Err(Errc::kInvalidArg, "hixl_register_memory: [{}, +{}) wraps around", addr, size);
  LocalRegistry::Region r;
  r.desc.base = base;
  r.desc.len = size;
  Status s = session_->AddRegion(std::move(r));
  if (!s.ok()) return Err(s.code(), "hixl_register_memory: {}", s.message());
  return s;
}

Status WorldImpl::Deregister(void* addr) {
  if (!addr) return Err(Errc::kInvalidArg, "hixl_deregister_memory: addr is NULL");
  Status s = session_->RemoveRegion(reinterpret_cast<uint64_t>(addr), false);
  if (!s.ok()) return Err(s.code(), "hixl_deregister_memory: {}", s.message());
  return s;
}

// -------------------------------------------------------------- operations

Status WorldImpl::CheckRemote(const char* op, int peer, uint64_t addr, const void* local, size_t size) const {
  if (peer < 0 || peer >= cfg_.world_size) {
    return Err(Errc::kInvalidRank, "{}: rank {} is outside the world [0, {})", op, peer, cfg_.world_size);
  }
  if (!local) return Err(Errc::kInvalidArg, "{}: the local buffer is NULL", op);
  if (addr == 0) return Err(Errc::kInvalidArg, "{}: the remote address is 0", op);
  if (addr + size < addr) return Err(Errc::kInvalidArg, "{}: remote range [{:#x}, +{}) wraps around", op, addr, size);
  auto l = reinterpret_cast<uintptr_t>(local);
  if (l + size < l) return Err(Errc::kInvalidArg, "{}: local range [{}, +{}) wraps around", op, local, size);
  return Status::Ok();
}

Result<const PeerTable::Entry*> WorldImpl::Lookup(const char* op, int peer, uint64_t addr, size_t size,
                                                  PeerTable::Pin* pin) {
  // A miss refreshes the table: the peer may have registered since we last looked.
  HIXL_ASSIGN_OR_RETURN(const PeerTable::Entry* e, this->peer(peer).Find(addr, size, cfg_.timeout_ms, pin));
  if (e) return e;
  return NotRegistered(op, peer, addr, size);
}

Status WorldImpl::NotRegistered(const char* op, int peer, uint64_t addr, size_t size) const {
  return Err(Errc::kNotRegistered,
             "Remote memory not registered: rank {} has no registered region holding {} bytes at {:#x} "
             "(the range [{:#x}, {:#x}) must lie inside one region that rank registered or allocated) [{}]",
             peer, size, addr, addr, addr + size, op);
}

// ----------------------------------------------------- control requests

Status WorldImpl::CheckFrom(int64_t from) const {
  if (from < 0 || from >= size() || from == rank()) {
    return Err(Errc::kInvalidRank, "control request from unknown rank {}", from);
  }
  return Status::Ok();
}

Result<Session::Subscriber> WorldImpl::SubscriberFor(int64_t from64) {
  HIXL_RETURN_IF_ERROR(CheckFrom(from64));
  const int from = static_cast<int>(from64);  // a rank: CheckFrom bounded it
  // Peers ask only after the barrier that ends ConnectPeers; this guards against a peer that does not.
  if (!peers_[static_cast<size_t>(from)]) return Err(Errc::kInvalidRank, "rank {} has not joined yet", from);
  return Session::Subscriber{peer(from).who(), peer(from).control()};
}

Result<std::shared_ptr<PeerSession>> WorldImpl::PeerFor(int64_t from) {
  HIXL_RETURN_IF_ERROR(CheckFrom(from));
  return peers_[static_cast<size_t>(from)];
}

Status WorldImpl::Notified(int64_t from, std::string_view payload) {
  HIXL_RETURN_IF_ERROR(CheckFrom(from));
  // hixl_notify sends at most HIXL_NOTIFY_MAX_BYTES; a longer one would not
  // fit the receiver's hixl_notification_t.  Refused, never queued.
  if (payload.size() > HIXL_NOTIFY_MAX_BYTES) {
    HIXL_LOG_WARN("rank {}: refused a notification of {} bytes from rank {} (at most HIXL_NOTIFY_MAX_BYTES = {})",
                  rank(), payload.size(), from, HIXL_NOTIFY_MAX_BYTES);
    return Err(Errc::kInvalidArg, "a notification of {} bytes is longer than HIXL_NOTIFY_MAX_BYTES ({})",
               payload.size(), HIXL_NOTIFY_MAX_BYTES);
  }
  return EnqueueNotification(static_cast<int>(from), std::string(payload));
}

Result<std::string> WorldImpl::Other(int64_t from, uint8_t type, std::string_view payload) {
  (void)payload;
  HIXL_RETURN_IF_ERROR(CheckFrom(from));
  return Err(Errc::kInvalidArg, "unknown control request {}", type);
}

Status WorldImpl::Put(int dst_rank, const void* src, uint64_t dst_addr, size_t size, int lane) {
  if (size == 0) {
    return dst_rank < 0 || dst_rank >= cfg_.world_size ? CheckRemote("hixl_put", dst_rank, 1, src, 0) : Status::Ok();
  }
  if (!RemoteOk(dst_rank, dst_addr, src, size)) return CheckRemote("hixl_put", dst_rank, dst_addr, src, size);
  PeerTable::Pin pin;
  PeerSession& p = peer(dst_rank);
  const PeerTable::Entry* e = p.FindKnown(dst_addr, size, &pin);
  if (!e) {
    HIXL_ASSIGN_OR_RETURN(e, Lookup("hixl_put", dst_rank, dst_addr, size, &pin));
  }
  transport::Transport& t = p.transport();
  return lane == 0 ? t.Put(dst_rank, *e->key, src, dst_addr, size)
                   : t.PutOn(lane, dst_rank, *e->key, src, dst_addr, size);
}

Status WorldImpl::Get(int src_rank, uint64_t src_addr, void* dst, size_t size, int lane) {
  if (size == 0) {
    return src_rank < 0 || src_rank >= cfg_.world_size ? CheckRemote("hixl_get", src_rank, 1, dst, 0) : Status::Ok();
  }
  if (!RemoteOk(src_rank, src_addr, dst, size)) return CheckRemote("hixl_get", src_rank, src_addr, dst, size);
  PeerTable::Pin pin;
  PeerSession& p = peer(src_rank);
  const PeerTable::Entry* e = p.FindKnown(src_addr, size, &pin);
  if (!e) {
    HIXL_ASSIGN_OR_RETURN(e, Lookup("hixl_get", src_rank, src_addr, size, &pin));
  }
  transport::Transport& t = p.transport();
  return lane == 0 ? t.Get(src_rank, *e->key, src_addr, dst, size)
                   : t.GetOn(lane, src_rank, *e->key, src_addr, dst, size);
}

Result<void*> WorldImpl::Direct(int rank, uint64_t addr, size_t size) {
  HIXL_RETURN_IF_ERROR(CheckRemote("hixl_direct", rank, addr, &addr, size));
  if (rank == cfg_.rank) return reinterpret_cast<void*>(addr);
  PeerTable::Pin pin;
  HIXL_ASSIGN_OR_RETURN(const PeerTable::Entry* e, Lookup("hixl_direct", rank, addr, size, &pin));
  return e->key->Direct(addr);
}

Status WorldImpl::Fence() {
  Status s = session_->Flush();
  // Failures of transfers that a deregistration's fence completed.
  for (const auto& p : peers_) {
    if (!p) continue;
    Status d = p->TakeDeferred();
    if (s.ok() && !d.ok()) s = std::move(d);
  }
  return s;
}

Status WorldImpl::Fence(int rank) { return FenceOf(rank, kAllLanes); }

Status WorldImpl::FenceLane(int rank, int lane) {
  if (lane < 0) return Err(Errc::kInvalidArg, "fence: lane {} is invalid", lane);
  return FenceOf(rank, lane);
}

Status WorldImpl::FenceTransport(int rank) { return FenceOf(rank, kWholeTransport); }

Status WorldImpl::FenceOf(int rank, int lanes) {
  if (rank < 0 || rank >= size())
    return Err(Errc::kInvalidArg, "fence: rank {} is outside the world of {}", rank, size());
  PeerSession& p = peer(rank);
  transport::Transport& t = p.transport();
  Status s = lanes == kWholeTransport ? t.Flush() : lanes == kAllLanes ? t.Flush(rank) : t.FlushLane(rank, lanes);
  Status d = p.TakeDeferred();
  return s.ok() ? d : s;
}

Status WorldImpl::Finalize() {
  if (finalized_) return Status::Ok();
  finalized_ = true;
  // Fences, and nobody leaves while others still work: the data-plane
  // barrier, then the store's, so that nobody closes the store (which the
  // data-plane barrier asks about dead peers) or unmaps while another is
  // still in the first.
  Status s = Barrier();
  if (s.ok()) s = StoreBarrier();
  session_->Shutdown();
  if (tcp_store_) {
    if (rank() == 0) {
      // Host the store until everyone has said goodbye.
      if (s.ok()) (void)store_->WaitAtLeast("finalize", size() - 1, cfg_.timeout_ms);
      (void)tcp_store_->Close();
      store_server_.reset();
    } else {
      (void)store_->Add("finalize", 1);
      (void)tcp_store_->Close();
    }
  }
  if (!s.ok()) return Err(s.code(), "hixl_finalize: {}", s.message());
  return Status::Ok();
}

std::string_view WorldImpl::TransportFor(int peer) const {
  if (peer < 0 || peer >= size()) return "";
  return this->peer(peer).transport().name();
}

}  // namespace hixl::world

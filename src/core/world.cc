#include "core/world.h"

#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netdb.h>

#include <algorithm>
#include <cstring>

#include "bootstrap/pmix.h"
#include "bootstrap/socket.h"
#include "core/log.h"

namespace hixl::core {

namespace {

// Control-plane request types.
constexpr uint8_t kFetchTable = 1;   // -> RegionTable::Serialize()
constexpr uint8_t kInvalidate = 2;   // [u64 generation][u64 base][u64 len] -> ""
// kNotifyRequest (world.h) = 3: [bytes] -> "" (or kQueueFull)

std::mutex g_mu;                          // init / finalize
std::atomic<WorldImpl*> g_world{nullptr};  // deliberately leaked at exit without finalize
bool g_finalized = false;

}  // namespace

WorldImpl* Current() { return g_world.load(std::memory_order_acquire); }

Status NotInitialized(const char* api) {
  std::lock_guard lock(g_mu);
  return Err(Errc::kNotInitialized, "{} called {}", api,
             g_finalized ? "after hixl_finalize" : "before hixl_init");
}

Status InitCurrent() {
  std::lock_guard lock(g_mu);
  if (g_world.load()) return Err(Errc::kAlreadyInitialized, "hixl_init called twice");
  HIXL_ASSIGN_OR_RETURN(bootstrap::Config cfg, bootstrap::ParseConfig(bootstrap::ProcessEnv()));
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

WorldImpl::WorldImpl(const bootstrap::Config& config) : cfg_(config) {}

WorldImpl::~WorldImpl() {
  // Stop every thread before the state it uses goes away.
  control_server_.reset();
  for (auto& t : transports_) t->Shutdown();
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
        auto server = bootstrap::TcpStoreServer::Start(bind, 0, n);
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
      auto server = bootstrap::TcpStoreServer::Start(cfg_.master_addr, cfg_.master_port, n);
      if (!server.ok()) {
        // MASTER_ADDR may name this host by an address we cannot bind.
        server = bootstrap::TcpStoreServer::Start("0.0.0.0", cfg_.master_port, n);
      }
      if (!server.ok()) {
        return Err(Errc::kBootstrap, "rank 0 cannot host the store on {}:{}: {}", cfg_.master_addr,
                   cfg_.master_port, server.status().message());
      }
      store_server_ = std::move(server.value());
    }
    auto client = bootstrap::TcpStoreClient::Connect(cfg_.master_addr, cfg_.master_port, cfg_.rank, cfg_.timeout_ms);
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

  // 3. Transports.
  transport::Options topts;
  topts.shm_cma = cfg_.shm_cma;
  topts.shm_thp = cfg_.shm_thp;
  topts.net_dev = cfg_.net_dev;
  if (cfg_.transport != bootstrap::TransportChoice::kAuto) {
    topts.only = cfg_.transport == bootstrap::TransportChoice::kShm ? "shm" : "ucx";
  }
  auto ts = transport::CreateTransports(this, topts);
  if (!ts.ok()) {
    return topts.only.empty() ? ts.status()
                              : Err(ts.status().code(), "HIXL_TRANSPORT={} but {}", topts.only, ts.status().message());
  }
  transports_ = std::move(ts.value());

  // 4. Peers.
  return ConnectPeers();
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

Status WorldImpl::ConnectPeers() {
  const int n = size();
  peers_.resize(static_cast<size_t>(n));
  for (auto& p : peers_) p = std::make_unique<Peer>();

  const std::string my_host = n > 1 ? net::LocalAddressTowards(cfg_.master_addr, cfg_.master_port) : "127.0.0.1";
  if (n > 1) {
    HIXL_ASSIGN_OR_RETURN(control_server_,
                          bootstrap::ControlServer::Start(my_host, [this](int from, uint8_t type, std::string_view p) {
                            return HandleControl(from, type, p);
                          }));
  }
  net::Writer info;
  info.PutBytes(my_host).Put<uint16_t>(control_server_ ? control_server_->port() : 0);
  info.Put<uint32_t>(static_cast<uint32_t>(transports_.size()));
  for (auto& t : transports_) info.PutBytes(t->name()).PutBytes(t->LocalAddress());
  HIXL_RETURN_IF_ERROR(store_->Set(fmt::format("peer/{}", rank()), info.str()));

  for (int r = 0; r < n; ++r) {
    auto blob = store_->Get(fmt::format("peer/{}", r), cfg_.timeout_ms);
    if (!blob.ok()) return Err(blob.status().code(), "waiting for rank {} to join: {}", r, blob.status().message());
    net::Reader rd(blob.value());
    std::string host;
    uint16_t port = 0;
    uint32_t count = 0;
    if (!rd.GetBytes(&host) || !rd.Get(&port) || !rd.Get(&count)) {
      return Err(Errc::kBootstrap, "malformed peer record for rank {}", r);
    }
    std::map<std::string, std::string> addrs;
    for (uint32_t i = 0; i < count; ++i) {
      std::string name, addr;
      if (!rd.GetBytes(&name) || !rd.GetBytes(&addr)) return Err(Errc::kBootstrap, "malformed peer record for rank {}", r);
      addrs.emplace(std::move(name), std::move(addr));
    }
    Peer& p = *peers_[static_cast<size_t>(r)];
    for (auto& t : transports_) {
      auto it = addrs.find(std::string(t->name()));
      if (it != addrs.end() && t->CanReach(it->second)) {
        HIXL_RETURN_IF_ERROR(t->Connect(r, it->second));
        p.transport = t.get();
        break;
      }
    }
    if (!p.transport) {
      std::string have;
      for (auto& t : transports_) have += (have.empty() ? "" : ", ") + std::string(t->name());
      return Err(Errc::kUnsupported,
                 "rank {} (at {}) is not reachable with the transports in use here ({}): it is on another host"
                 "{}",
                 r, host, have,
                 cfg_.transport == bootstrap::TransportChoice::kShm ? " and HIXL_TRANSPORT=shm allows only same-host peers"
                                                                   : " and no network transport is available");
    }
    if (r != rank()) p.control = std::make_unique<bootstrap::ControlClient>(rank(), r, host, port);
  }
  return Barrier();
}

bool WorldImpl::AccessLocalRange(uint64_t addr, uint64_t len, const std::function<void()>& fn) const {
  return registry_.Access(addr, len, fn);
}

// ------------------------------------------------------------------ memory

Status WorldImpl::AddRegion(LocalRegistry::Region region) {
  return AddRegionEverywhere(registry_, transports_, std::move(region));
}

Status WorldImpl::RemoveRegion(uint64_t base, bool heap) {
  std::optional<LocalRegistry::Region> removed;
  HIXL_RETURN_IF_ERROR(registry_.Remove(base, heap, &removed));
  if (!removed) return Status::Ok();  // references remain
  const uint64_t gen = registry_.generation();
  const uint64_t len = removed->desc.len;
  peers_[static_cast<size_t>(rank())]->table.Invalidate(gen, base, len);
  // Every peer that holds a copy of our table forgets the region before we
  // return, so no access reaches it afterwards.
  std::set<int> subs;
  {
    std::lock_guard lock(subscribers_mu_);
    subs = subscribers_;
  }
  net::Writer w;
  w.Put(gen).Put(base).Put(len);
  for (int r : subs) {
    auto res = peers_[static_cast<size_t>(r)]->control->Call(kInvalidate, w.str(), cfg_.timeout_ms);
    if (!res.ok()) HIXL_LOG_DEBUG("rank {} did not acknowledge a deregistration: {}", r, res.status().message());
  }
  for (auto& t : transports_) t->DeregisterRegion(removed->desc);
  return Status::Ok();
}

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
  Status s = AddRegion(std::move(r));
  if (!s.ok()) {
    (void)heap_->Free(b.ptr);
    return s;
  }
  return b.ptr;
}

Status WorldImpl::Free(void* ptr) {
  if (!ptr) return Status::Ok();
  if (!heap_->Contains(ptr)) return Err(Errc::kInvalidArg, "hixl_free: {} is not symmetric memory from hixl_alloc", ptr);
  Status s = RemoveRegion(reinterpret_cast<uint64_t>(ptr), true);
  if (!s.ok()) return Err(s.code(), "hixl_free: {}", s.message());
  auto freed = heap_->Free(ptr);
  return freed.status();
}

Status WorldImpl::Register(void* addr, size_t size) {
  if (!addr) return Err(Errc::kInvalidArg, "hixl_register_memory: addr is NULL");
  if (size == 0) return Err(Errc::kInvalidArg, "hixl_register_memory: size is 0");
  const auto base = reinterpret_cast<uint64_t>(addr);
  if (base + size < base) return Err(Errc::kInvalidArg, "hixl_register_memory: [{}, +{}) wraps around", addr, size);
  LocalRegistry::Region r;
  r.desc.base = base;
  r.desc.len = size;
  Status s = AddRegion(std::move(r));
  if (!s.ok()) return Err(s.code(), "hixl_register_memory: {}", s.message());
  return s;
}

Status WorldImpl::Deregister(void* addr) {
  if (!addr) return Err(Errc::kInvalidArg, "hixl_deregister_memory: addr is NULL");
  Status s = RemoveRegion(reinterpret_cast<uint64_t>(addr), false);
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

Result<const PeerTable::Entry*> WorldImpl::Lookup(const char* op, int peer, uint64_t addr, size_t size) {
  Peer& p = *peers_[static_cast<size_t>(peer)];
  if (const PeerTable::Entry* e = p.table.Find(addr, size)) return e;
  // A miss: the peer may have registered since we last looked.
  HIXL_RETURN_IF_ERROR(Refresh(peer));
  if (const PeerTable::Entry* e = p.table.Find(addr, size)) return e;
  return Err(Errc::kNotRegistered,
             "Remote memory not registered: rank {} has no registered region holding {} bytes at {:#x} "
             "(the range [{:#x}, {:#x}) must lie inside one region that rank registered or allocated) [{}]",
             peer, size, addr, addr, addr + size, op);
}

Status WorldImpl::Refresh(int peer) {
  Peer& p = *peers_[static_cast<size_t>(peer)];
  std::lock_guard lock(p.refresh_mu);
  return RefreshPeerTable(p.table, *p.transport, peer, fmt::format("rank {}", peer), [&]() -> Result<RegionTable> {
    if (peer == rank()) return registry_.Table();
    auto bytes = p.control->Call(kFetchTable, {}, cfg_.timeout_ms);
    if (!bytes.ok()) {
      return Err(bytes.status().code(), "fetching the region table of rank {}: {}", peer, bytes.status().message());
    }
    return RegionTable::Parse(bytes.value());
  });
}

Result<std::string> WorldImpl::HandleControl(int from, uint8_t type, std::string_view payload) {
  if (from < 0 || from >= size()) return Err(Errc::kInvalidRank, "control request from unknown rank {}", from);
  switch (type) {
    case kFetchTable: {
      {
        std::lock_guard lock(subscribers_mu_);
        subscribers_.insert(from);
      }
      return registry_.Table().Serialize();
    }
    case kInvalidate: {
      net::Reader rd(payload);
      uint64_t gen = 0, base = 0, len = 0;
      if (!rd.Get(&gen) || !rd.Get(&base) || !rd.Get(&len)) return Err(Errc::kInvalidArg, "malformed invalidation");
      peers_[static_cast<size_t>(from)]->table.Invalidate(gen, base, len);
      return std::string();
    }
    case kNotifyRequest: {
      HIXL_RETURN_IF_ERROR(EnqueueNotification(from, std::string(payload)));
      return std::string();
    }
    default:
      return Err(Errc::kInvalidArg, "unknown control request {}", type);
  }
}

Status WorldImpl::Put(int dst_rank, const void* src, uint64_t dst_addr, size_t size) {
  if (size == 0) {
    return dst_rank < 0 || dst_rank >= cfg_.world_size ? CheckRemote("hixl_put", dst_rank, 1, src, 0) : Status::Ok();
  }
  HIXL_RETURN_IF_ERROR(CheckRemote("hixl_put", dst_rank, dst_addr, src, size));
  HIXL_ASSIGN_OR_RETURN(const PeerTable::Entry* e, Lookup("hixl_put", dst_rank, dst_addr, size));
  return peers_[static_cast<size_t>(dst_rank)]->transport->Put(dst_rank, *e->key, src, dst_addr, size);
}

Status WorldImpl::Get(int src_rank, uint64_t src_addr, void* dst, size_t size) {
  if (size == 0) {
    return src_rank < 0 || src_rank >= cfg_.world_size ? CheckRemote("hixl_get", src_rank, 1, dst, 0) : Status::Ok();
  }
  HIXL_RETURN_IF_ERROR(CheckRemote("hixl_get", src_rank, src_addr, dst, size));
  HIXL_ASSIGN_OR_RETURN(const PeerTable::Entry* e, Lookup("hixl_get", src_rank, src_addr, size));
  return peers_[static_cast<size_t>(src_rank)]->transport->Get(src_rank, *e->key, src_addr, dst, size);
}

Status WorldImpl::Fence() {
  Status first;
  for (auto& t : transports_) {
    Status s = t->Flush();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

Status WorldImpl::Barrier() {
  HIXL_RETURN_IF_ERROR(Fence());
  const uint64_t epoch = barrier_epoch_.fetch_add(1);
  const std::string key = fmt::format("barrier/{}", epoch);
  HIXL_ASSIGN_OR_RETURN(int64_t arrived, store_->Add(key, 1));
  // The last to arrive knows that everyone has: asking the store again would
  // only give rank 0 (which may leave as soon as it has passed) time to go.
  if (arrived < size()) {
    Status s = store_->WaitAtLeast(key, size(), cfg_.timeout_ms);
    if (!s.ok()) return Err(s.code(), "hixl_barrier: {}", s.message());
  }
  // Everyone has passed barrier epoch-2 once anyone passes this one.
  if (rank() == 0 && epoch >= 2) (void)store_->Delete(fmt::format("barrier/{}", epoch - 2));
  return Status::Ok();
}

Status WorldImpl::Allgather(const void* send, void* recv, size_t bytes_per_rank) {
  if (bytes_per_rank == 0) return Status::Ok();
  if (!send || !recv) return Err(Errc::kInvalidArg, "hixl_allgather: {} is NULL", send ? "recv" : "send");
  if (bytes_per_rank > (size_t{64} << 20)) {
    return Err(Errc::kInvalidArg, "hixl_allgather: {} bytes per rank is too large (at most 64 MiB; it is meant for "
               "small data such as addresses)", bytes_per_rank);
  }
  const uint64_t epoch = allgather_epoch_.fetch_add(1);
  const std::string mine(static_cast<const char*>(send), bytes_per_rank);
  HIXL_RETURN_IF_ERROR(store_->Set(fmt::format("ag/{}/{}", epoch, rank()), mine));
  auto* out = static_cast<char*>(recv);
  for (int r = 0; r < size(); ++r) {
    auto v = store_->Get(fmt::format("ag/{}/{}", epoch, r), cfg_.timeout_ms);
    if (!v.ok()) return Err(v.status().code(), "hixl_allgather: waiting for rank {}: {}", r, v.status().message());
    if (v.value().size() != bytes_per_rank) {
      return Err(Errc::kInvalidArg, "hixl_allgather: rank {} sent {} bytes but this rank expects {}", r,
                 v.value().size(), bytes_per_rank);
    }
    std::memcpy(out + static_cast<size_t>(r) * bytes_per_rank, v.value().data(), bytes_per_rank);
  }
  // The last rank to finish reading removes the round's keys.
  HIXL_ASSIGN_OR_RETURN(int64_t done, store_->Add(fmt::format("ag/{}/done", epoch), 1));
  if (done == size()) {
    for (int r = 0; r < size(); ++r) (void)store_->Delete(fmt::format("ag/{}/{}", epoch, r));
    (void)store_->Delete(fmt::format("ag/{}/done", epoch));
  }
  return Status::Ok();
}

Status WorldImpl::Finalize() {
  if (finalized_) return Status::Ok();
  finalized_ = true;
  Status s = Barrier();  // fences, and nobody leaves while others still work
  control_server_.reset();
  for (auto& t : transports_) t->Shutdown();
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
  return peers_[static_cast<size_t>(peer)]->transport->name();
}

}  // namespace hixl::core

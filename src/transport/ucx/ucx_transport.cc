#include "transport/ucx/ucx_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "base/socket.h"
#include "transport/ucx/atomics.h"
#include "transport/ucx/endpoint.h"
#include "transport/ucx/listener.h"
#include "transport/ucx/memory.h"
#include "transport/ucx/options.h"
#include "transport/ucx/rma.h"
#include "transport/ucx/signals.h"
#include "transport/ucx/worker.h"

namespace hixl::transport::ucx {

namespace {

using net::Deadline;

constexpr std::string_view kAddressMagic = "hixl-ucx/2";

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

class UcxTransport final : public Transport {
 public:
  UcxTransport(Host* host, const UcxOptions& options, bool local_only)
      : host_(host), options_(options), local_only_(local_only) {}

  ~UcxTransport() override {
    Shutdown();
    if (!w_) return;
    std::vector<std::shared_ptr<Peer>> peers, dirty, retired;
    std::vector<std::vector<std::shared_ptr<Peer>>> lanes;
    {
      std::lock_guard lock(w_->mu);
      peers.swap(peers_);
      lanes.swap(lanes_);
      if (rma_) dirty = rma_->TakeAll();
      retired.swap(retired_);
    }
    if (regions_) {
      std::lock_guard lock(w_->mu);
      ClearSignalHandlers(w_.get());  // they read regions_
      if (atomics_) atomics_->ClearHandlers();
    }
    atomics_.reset();
    regions_.reset();
    // Endpoints close as their last holder lets go (keys may hold some).
  }

  Status Start() {
    HIXL_ASSIGN_OR_RETURN(w_, Worker::Create(options_));
    {
      // Peers that come and go (engines) connect here (listener.h).  Every
      // interface, as UCX's own TCP transport listens on; loopback only
      // when every peer is on this host.
      const std::string ip = local_only_ ? "127.0.0.1" : "0.0.0.0";
      std::lock_guard lock(w_->mu);
      auto a = Acceptor::Create(w_.get(), ip);
      if (a.ok()) {
        w_->acceptor = std::move(a.value());
      } else {
        HIXL_LOG_INFO(
            "{}; peers reach this process by its worker address only, and UCX keeps a connection per "
            "connect/disconnect cycle",
            a.status().message());
      }
    }
    regions_ = std::make_unique<Regions>(w_.get());
    atomics_ = std::make_unique<Atomics>(w_.get(), regions_.get());
    {
      std::lock_guard lock(w_->mu);
      HIXL_RETURN_IF_ERROR(SetSignalHandlers(w_.get(), regions_.get()));
      HIXL_RETURN_IF_ERROR(atomics_->SetHandlers());
    }
    rma_ = std::make_unique<Rma>(w_.get(), host_);
    host_name_ = HostName();
    return w_->StartProgressThread(options_.spin_us);
  }

  std::string_view name() const override { return "ucx"; }
  const Capabilities& caps() const override { return kCaps; }

  std::string LocalAddress() const override {
    net::Writer w;
    uint16_t port = 0;
    {
      std::lock_guard lock(w_->mu);
      if (w_->acceptor) port = w_->acceptor->port();
    }
    w.PutBytes(kAddressMagic).PutBytes(host_name_).PutBytes(w_->address).Put<uint16_t>(port);
    return std::move(w.str());
  }

  bool CanReach(std::string_view address) const override {
    std::string host, addr;
    uint16_t port = 0;
    return Parse(address, &host, &addr, &port);
  }

  Status Connect(int peer, std::string_view address, std::string_view reached_at) override {
    std::string host, addr;
    uint16_t port = 0;
    if (!Parse(address, &host, &addr, &port)) {
      return Err(Errc::kTransport, "ucx: malformed address from rank {}", peer);
    }
    if (peer < 0) return Err(Errc::kInvalidRank, "ucx: rank {} is invalid", peer);
    auto p = std::make_shared<Peer>(w_, peer, std::move(host), std::move(addr));
    // Through the peer's listener where the front door says where the peer
    // is (listener.h); an IPv4 address only, as the listener is.
    in_addr ip{};
    if (port != 0 && !reached_at.empty() && ::inet_pton(AF_INET, std::string(reached_at).c_str(), &ip) == 1) {
      p->listener_ip = std::string(reached_at);
      p->listener_port = port;
    }
    std::shared_ptr<Peer> old;  // released after the lock: ~Peer takes it
    std::lock_guard lock(w_->mu);
    if (peers_.size() <= static_cast<size_t>(peer)) peers_.resize(static_cast<size_t>(peer) + 1);
    old = std::exchange(peers_[static_cast<size_t>(peer)], std::move(p));
    if (old) return Err(Errc::kInternal, "ucx: rank {} connected twice", peer);  // Disconnect first
    return Status::Ok();
  }

  Result<std::string> RegisterRegion(const LocalRegion& region) override { return regions_->Register(region); }
  void DeregisterRegion(const LocalRegion& region) override { regions_->Deregister(region); }

  Result<std::shared_ptr<RemoteKey>> UnpackKey(int peer, uint64_t base, uint64_t len,
                                               std::string_view key_blob) override {
    std::lock_guard lock(w_->mu);
    HIXL_ASSIGN_OR_RETURN(std::shared_ptr<Peer> p, PeerLocked(peer));
    HIXL_RETURN_IF_ERROR(EnsureEndpoint(p.get(), peer == host_->rank(), options_.net_dev));
    return UnpackRkey(std::move(p), base, len, key_blob);
  }

  Status Put(int peer, const RemoteKey& key, const void* src, uint64_t dst, size_t n) override {
    return PutOn(0, peer, key, src, dst, n);
  }
  Status Get(int peer, const RemoteKey& key, uint64_t src, void* dst, size_t n) override {
    return GetOn(0, peer, key, src, dst, n);
  }
  Status PutSignal(int peer, const RemoteKey* data_key, const void* src, uint64_t dst, size_t n,
                   const RemoteKey& sig_key, uint64_t sig_addr, AtomicOp op, uint64_t value) override {
    return PutSignalOn(0, peer, data_key, src, dst, n, sig_key, sig_addr, op, value);
  }

  // Lanes (transport.h): each lane above 0 has an endpoint of its own to
  // each peer, a Peer of its own (its own flushes, errors and keys), made
  // on first use; a key is unpacked again for each lane that uses it.
  Status PutOn(int lane, int peer, const RemoteKey& key, const void* src, uint64_t dst, size_t n) override {
    const auto& k = static_cast<const UcxKey&>(key);
    HIXL_RETURN_IF_ERROR(CheckKey(k, peer));
    std::shared_ptr<UcxKey> stale;  // released after the lock (its destructor takes it)
    std::lock_guard lock(w_->mu);
    HIXL_ASSIGN_OR_RETURN(const UcxKey* lk, LaneKeyLocked(k, lane, &stale));
    return rma_->Put(*lk, src, dst, n);
  }

  Status GetOn(int lane, int peer, const RemoteKey& key, uint64_t src, void* dst, size_t n) override {
    const auto& k = static_cast<const UcxKey&>(key);
    HIXL_RETURN_IF_ERROR(CheckKey(k, peer));
    std::shared_ptr<UcxKey> stale;
    std::lock_guard lock(w_->mu);
    HIXL_ASSIGN_OR_RETURN(const UcxKey* lk, LaneKeyLocked(k, lane, &stale));
    return rma_->Get(*lk, src, dst, n);
  }

  Status PutSignalOn(int lane, int peer, const RemoteKey* data_key, const void* src, uint64_t dst, size_t n,
                     const RemoteKey& sig_key, uint64_t sig_addr, AtomicOp op, uint64_t value) override {
    const auto& sk = static_cast<const UcxKey&>(sig_key);
    HIXL_RETURN_IF_ERROR(CheckKey(sk, peer));
    const bool inline_data = n <= kMaxSignalData;
    if (n > 0) {
      HIXL_RETURN_IF_ERROR(CheckKey(static_cast<const UcxKey&>(*data_key), peer));
    }
    std::shared_ptr<UcxKey> stale_data, stale_sig;
    std::lock_guard lock(w_->mu);
    if (!inline_data) {
      HIXL_ASSIGN_OR_RETURN(const UcxKey* dk, LaneKeyLocked(static_cast<const UcxKey&>(*data_key), lane, &stale_data));
      HIXL_RETURN_IF_ERROR(rma_->Put(*dk, src, dst, n));
    }
    HIXL_ASSIGN_OR_RETURN(const UcxKey* lsk, LaneKeyLocked(sk, lane, &stale_sig));
    // Ordered after the put (and every earlier one on the lane's
    // endpoint) by the worker fence.
    return rma_->Signal(*lsk, inline_data ? src : nullptr, dst, inline_data ? n : 0, sig_addr, op, value);
  }

  Status Flush() override {
    std::lock_guard flush_lock(rma_->flush_mu());
    const Deadline deadline = WaitDeadline(*host_);
    std::unique_lock lock(w_->mu);
    return rma_->FlushAll(lock, deadline);
  }

  // Not behind flush_mu: a flush to one peer never waits for another's.
  // Every lane's.
  Status Flush(int peer) override {
    const Deadline deadline = WaitDeadline(*host_);
    std::unique_lock lock(w_->mu);
    std::vector<std::shared_ptr<Peer>> ps{FindPeerLocked(peer)};
    if (peer >= 0 && static_cast<size_t>(peer) < lanes_.size()) {
      const auto& row = lanes_[static_cast<size_t>(peer)];
      ps.insert(ps.end(), row.begin(), row.end());
    }
    return rma_->FlushSome(lock, std::move(ps), deadline);
  }

  Status FlushLane(int peer, int lane) override {
    const Deadline deadline = WaitDeadline(*host_);
    std::unique_lock lock(w_->mu);
    return rma_->FlushPeer(lock, lane == 0 ? FindPeerLocked(peer) : FindLanePeerLocked(peer, lane), deadline);
  }

  void CloseLane(int lane) override {
    if (lane <= 0) return;
    // As Disconnect: no flush runs meanwhile.
    std::lock_guard flush_lock(rma_->flush_mu());
    std::vector<std::shared_ptr<Peer>> closed, finished;  // released after the lock below: ~Peer takes it
    const Deadline deadline = WaitDeadline(*host_);
    std::unique_lock lock(w_->mu);
    SweepRetiredLocked(&finished);
    // Taken out first: closing unlocks meanwhile.
    for (auto& row : lanes_) {
      if (row.size() >= static_cast<size_t>(lane) && row[static_cast<size_t>(lane) - 1]) {
        closed.push_back(std::move(row[static_cast<size_t>(lane) - 1]));
      }
    }
    for (const auto& lp : closed) ClosePeerLocked(lp, lock, deadline);
    lock.unlock();
    w_->Kick();  // our progress calls may have taken events the progress thread waited for
  }

  void Disconnect(int peer) override {
    // No flush runs meanwhile (one may hold the peer, and would put it back
    // among those to flush if it timed out).
    std::lock_guard flush_lock(rma_->flush_mu());
    std::shared_ptr<Peer> p;                             // released after the lock below: ~Peer takes it
    std::vector<std::shared_ptr<Peer>> finished, lanes;  // the same
    const Deadline deadline = WaitDeadline(*host_);
    std::unique_lock lock(w_->mu);
    SweepRetiredLocked(&finished);
    p = FindPeerLocked(peer);
    if (!p) return;
    peers_[static_cast<size_t>(peer)].reset();
    // Its lanes' endpoints go with it (taken out first: closing unlocks
    // meanwhile).
    if (static_cast<size_t>(peer) < lanes_.size()) lanes.swap(lanes_[static_cast<size_t>(peer)]);
    ClosePeerLocked(p, lock, deadline);
    for (const auto& lp : lanes) {
      if (lp) ClosePeerLocked(lp, lock, deadline);
    }
    lock.unlock();
    w_->Kick();  // our progress calls may have taken events the progress thread waited for
  }

  Status Atomic(int peer, const RemoteKey& key, AtomicOp op, uint64_t addr, uint64_t operand, uint64_t compare,
                uint64_t* old) override {
    const auto& k = static_cast<const UcxKey&>(key);
    HIXL_RETURN_IF_ERROR(CheckKey(k, peer));
    // The target applies it and wakes the word's waiters (atomics.h).
    return atomics_->Apply(k, op, addr, operand, compare, old, WaitDeadline(*host_));
  }

  void Shutdown() override {
    if (w_) w_->StopProgressThread();
  }

  bool Poll() override { return w_ && w_->PollOnce(); }

  ProgressCounts Counts() const {
    if (!w_) return {};
    return {.aside_sleeps = w_->AsideSleeps(), .caller_sleeps = w_->CallerSleeps()};
  }

 private:
  static bool Parse(std::string_view address, std::string* host, std::string* worker_address, uint16_t* port) {
    net::Reader r(address);
    std::string magic;
    return r.GetBytes(&magic) && magic == kAddressMagic && r.GetBytes(host) && r.GetBytes(worker_address) &&
           !worker_address->empty() && r.Get(port) && r.empty();
  }

  static Status CheckKey(const UcxKey& k, int peer) {
    if (k.peer->rank == peer) return Status::Ok();
    return Err(Errc::kInternal, "ucx: a key of rank {} used for rank {}", k.peer->rank, peer);
  }

  // The peer connected as `peer`, or null; w_->mu held.
  std::shared_ptr<Peer> FindPeerLocked(int peer) {
    if (peer < 0 || static_cast<size_t>(peer) >= peers_.size()) return nullptr;
    return peers_[static_cast<size_t>(peer)];
  }

  // Lane `lane`'s Peer for `peer` (lane > 0), or null; w_->mu held.
  std::shared_ptr<Peer> FindLanePeerLocked(int peer, int lane) {
    if (peer < 0 || static_cast<size_t>(peer) >= lanes_.size() || lane <= 0) return nullptr;
    const auto& row = lanes_[static_cast<size_t>(peer)];
    return static_cast<size_t>(lane) <= row.size() ? row[static_cast<size_t>(lane) - 1] : nullptr;
  }

  // The key to use on `lane` for k's region: k itself on lane 0; else the
  // same region's rkey unpacked with the lane's endpoint to k's peer, made
  // with the endpoint on first use.  A lane key left from a lane closed
  // before goes to *stale, for the caller to release after the lock.
  // w_->mu held.
  Result<const UcxKey*> LaneKeyLocked(const UcxKey& k, int lane, std::shared_ptr<UcxKey>* stale) {
    if (lane == 0) return &k;
    if (lane < 0) return Err(Errc::kInvalidArg, "ucx: lane {} is invalid", lane);
    HIXL_RETURN_IF_ERROR(Usable(k.peer.get()));
    const Peer& main = *k.peer;
    const auto rank = static_cast<size_t>(main.rank);
    if (lanes_.size() <= rank) lanes_.resize(rank + 1);
    auto& row = lanes_[rank];
    const auto i = static_cast<size_t>(lane) - 1;
    if (row.size() <= i) row.resize(i + 1);
    std::shared_ptr<Peer>& lp = row[i];
    if (!lp) {
      lp = std::make_shared<Peer>(w_, main.rank, main.host, main.address);
      lp->listener_ip = main.listener_ip;
      lp->listener_port = main.listener_port;
    }
    HIXL_RETURN_IF_ERROR(EnsureEndpoint(lp.get(), main.rank == host_->rank(), options_.net_dev));
    if (k.lanes.size() <= i) k.lanes.resize(i + 1);
    if (k.lanes[i] && k.lanes[i]->peer == lp) return k.lanes[i].get();
    HIXL_ASSIGN_OR_RETURN(std::shared_ptr<RemoteKey> unpacked, UnpackRkey(lp, k.base, k.len, k.blob));
    *stale = std::exchange(k.lanes[i], std::static_pointer_cast<UcxKey>(std::move(unpacked)));
    return k.lanes[i].get();
  }

  // Disconnect's and CloseLane's part for one Peer (a peer, or one of its
  // lanes): from here every call with its keys fails; what is in flight
  // completes first (bounded), then the endpoint closes.  The caller keeps
  // p until after the lock.  lock holds w_->mu.
  void ClosePeerLocked(const std::shared_ptr<Peer>& p, std::unique_lock<std::mutex>& lock, Deadline deadline) {
    rma_->Forget(p);
    p->closed = true;
    CloseEndpoint(p.get(), lock, deadline);
    // UCX still owes completions that name the Peer: keep it for them.
    if (p->outstanding > 0 || p->flushing > 0) retired_.push_back(p);
  }

  // Moves the Peers closed before whose completions have all come in to
  // *finished (released by the caller after the lock).  w_->mu held.
  void SweepRetiredLocked(std::vector<std::shared_ptr<Peer>>* finished) {
    std::erase_if(retired_, [&](std::shared_ptr<Peer>& r) {
      if (r->outstanding > 0 || r->flushing > 0) return false;
      finished->push_back(std::move(r));
      return true;
    });
  }

  // w_->mu held.
  Result<std::shared_ptr<Peer>> PeerLocked(int peer) {
    std::shared_ptr<Peer> p = FindPeerLocked(peer);
    if (!p) return Err(Errc::kNotConnected, "ucx: rank {} is not connected", peer);
    return p;
  }

  Host* const host_;
  const UcxOptions options_;
  const bool local_only_;  // every peer is on this host: listen on loopback only
  // Device memory: RegisterRegion maps host memory only (UCS_MEMORY_TYPE_HOST).
  // Loopback: the endpoint to this process itself uses UCX's `self`
  // transport.  Atomics: hixl's own active messages (atomics.h), whose
  // target wakes the word's waiters.  Batch: no native batch; the
  // interface's default starts one put or get per piece.
  static constexpr Capabilities kCaps{.host_memory = true,
                                      .device_memory = false,
                                      .remote_hosts = true,
                                      .loopback = true,
                                      .atomics = true,
                                      .batch = false,
                                      .wakes_waiters = true};
  std::shared_ptr<Worker> w_;
  std::unique_ptr<Regions> regions_;
  std::unique_ptr<Atomics> atomics_;  // its handlers read regions_
  std::unique_ptr<Rma> rma_;
  std::string host_name_;

  // Guarded by w_->mu.  peers_ holds every connected Peer, so no Peer (whose
  // destructor takes w_->mu) is ever destroyed under it.
  std::vector<std::shared_ptr<Peer>> peers_;    // by rank; null when not connected
  std::vector<std::shared_ptr<Peer>> retired_;  // disconnected, with UCX completions still owed
  // By rank, at lane - 1: each lane's Peer (null where none was made).
  std::vector<std::vector<std::shared_ptr<Peer>>> lanes_;
};

}  // namespace

ProgressCounts CountProgress(const Transport& t) {
  const auto* u = dynamic_cast<const UcxTransport*>(&t);
  return u ? u->Counts() : ProgressCounts{};
}

Result<std::unique_ptr<Transport>> CreateUcxTransport(Host* host, const Options& options) {
  HIXL_ASSIGN_OR_RETURN(const UcxOptions parsed, ParseOptions(options));
  auto t = std::make_unique<UcxTransport>(host, parsed, options.local_only);
  HIXL_RETURN_IF_ERROR(t->Start());
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace hixl::transport::ucx

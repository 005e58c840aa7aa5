#include "transport/shm/shm_transport.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include "base/auth.h"
#include "base/copy_pool.h"
#include "base/log.h"
#include "base/shared_file.h"
#include "base/socket.h"
#include "transport/shm/cma.h"
#include "transport/shm/fd_channel.h"
#include "transport/shm/mapping.h"
#include "transport/shm/options.h"
#include "transport/shm/peer.h"
#include "transport/shm/promotion.h"
#include "transport/shm/relay.h"
#include "transport/shm/shm_server.h"

namespace hixl::transport::shm {

namespace {

// -------------------------------------------------------- the transport

class ShmTransport final : public Transport {
 public:
  ShmTransport(Host* host, const ShmOptions& options, const auth::MaybeSecret& secret)
      : host_(host), options_(options), secret_(secret) {}
  ~ShmTransport() override { Shutdown(); }

  Status Start() {
    host_id_ = sharedmem::HostIdentity();
    std::random_device rd;
    sock_name_ = fmt::format("hixl-{}-{:08x}{:08x}", ::getpid(), rd(), rd());
    HIXL_ASSIGN_OR_RETURN(server_, ShmServer::Start(host_, secret_, sock_name_));
    return Status::Ok();
  }

  std::string_view name() const override { return "shm"; }
  const Capabilities& caps() const override { return kCaps; }

  std::string LocalAddress() const override {
    net::Writer w;
    w.PutBytes(host_id_).Put<int32_t>(::getpid()).PutBytes(sock_name_);
    return std::move(w.str());
  }

  bool CanReach(std::string_view address) const override {
    net::Reader r(address);
    std::string id;
    return r.GetBytes(&id) && id == host_id_;
  }

  Status Connect(int peer, std::string_view address, std::string_view /*reached_at*/) override {
    net::Reader r(address);
    auto p = std::make_shared<Peer>();
    p->secret = secret_;
    std::string id;
    if (!r.GetBytes(&id) || !r.Get(&p->pid) || !r.GetBytes(&p->sock_name)) {
      return Err(Errc::kTransport, "shm: malformed address from rank {}", peer);
    }
    p->rank = peer;
    p->self = peer == host_->rank();
    p->use_cma = options_.cma;
    // Invalid where refused: no check then.  (glibc 2.36's sys/pidfd.h
    // declares pidfd_open without C linkage.)
    if (!p->self) p->pidfd = net::Fd(static_cast<int>(::syscall(SYS_pidfd_open, p->pid, 0)));
    std::lock_guard lock(peers_mu_);
    if (peers_.size() <= static_cast<size_t>(peer)) peers_.resize(static_cast<size_t>(peer) + 1);
    peers_[static_cast<size_t>(peer)] = std::move(p);
    return Status::Ok();
  }

  Result<std::string> RegisterRegion(const LocalRegion& region) override {
    if (region.kind != MemKind::kHost) {
      return Err(Errc::kUnsupported, "shm: this transport moves host memory only");
    }
    if (region.backing_fd < 0) {
      if (options_.promote) {
        Result<PromotedRange> pr = Promote(region.base, region.len);
        if (pr.ok()) return PromotedKey(region, *pr);
        HIXL_LOG_DEBUG("shm: registered memory [{:#x}, +{}) is reached by cross-memory attach: not promoted ({})",
                       region.base, region.len, pr.status().message());
      } else {
        HIXL_LOG_DEBUG("shm: registered memory [{:#x}, +{}) is reached by cross-memory attach (HIXL_SHM_PROMOTE=0)",
                       region.base, region.len);
      }
      if (options_.thp) AdviseHugePages(region.base, region.len);
      return std::string();
    }
    HIXL_RETURN_IF_ERROR(server_->AddSegment(region.segment_id, region.backing_fd, region.segment_size));
    // The heap's own descriptor, open as long as the heap: peers of this
    // user open it through /proc, without a message (Peer::MapSegment).
    return EncodeKey({region.segment_id, region.segment_offset, region.segment_size, region.backing_fd,
                      sharedmem::FileInode(region.backing_fd)});
  }

  void DeregisterRegion(const LocalRegion& region) override {
    if (region.backing_fd >= 0) return;
    uint32_t id = 0;
    bool last = true;  // no other region of ours is in the same promoted range
    {
      std::lock_guard lock(promoted_mu_);
      auto it = promoted_.find({region.base, region.len});
      if (it == promoted_.end()) return;
      id = it->second.first;
      if (--it->second.second == 0) promoted_.erase(it);
      for (const auto& [range, other] : promoted_) last = last && other.first != id;
    }
    if (last) server_->RemoveSegment(id);
    Unpromote(region.base, region.len);
  }

  Result<std::shared_ptr<RemoteKey>> UnpackKey(int peer, uint64_t base, uint64_t len,
                                               std::string_view key_blob) override {
    auto key = std::make_shared<ShmKey>();
    key->base = base;
    HIXL_ASSIGN_OR_RETURN(std::shared_ptr<Peer> p, GetPeer(peer));
    key->peer = p;
    if (key_blob.empty()) return std::shared_ptr<RemoteKey>(key);
    // An untrusted blob: the region must lie inside the segment it names,
    // and MapSegment checks the segment's real size.
    HIXL_ASSIGN_OR_RETURN(KeyFields f, ParseKey(key_blob, len, peer));
    if (p->self) {
      key->mapped = reinterpret_cast<uint8_t*>(base);
    } else if ((f.segment & kPromotedSegmentBit) && !options_.promote) {
      // HIXL_SHM_PROMOTE=0 here: the peer's promoted memory is reached as
      // registered memory that is not (cross-memory attach or the relay).
      return std::shared_ptr<RemoteKey>(key);
    } else {
      Result<std::shared_ptr<Mapping>> seg =
          p->MapSegment(f.segment, f.size, options_.procfd ? f.fd : -1, f.ino, WaitMs(*host_));
      if (!seg.ok() && (f.segment & kPromotedSegmentBit)) {
        // A promoted region deregistered meanwhile (its segment no longer
        // served), or a peer that cannot pass it: cross-memory attach, as
        // for memory that was never promoted.
        HIXL_LOG_DEBUG("shm: rank {}'s registered memory at {:#x} is reached by cross-memory attach: {}", peer, base,
                       seg.status().message());
        return std::shared_ptr<RemoteKey>(key);
      }
      if (!seg.ok()) return seg.status();
      key->segment = std::move(seg.value());
      key->mapped = static_cast<uint8_t*>(key->segment->get()) + f.offset;
      key->promoted = (f.segment & kPromotedSegmentBit) != 0;
    }
    return std::shared_ptr<RemoteKey>(key);
  }

  Status Put(int, const RemoteKey& k, const void* src, uint64_t dst, size_t n) override {
    const auto& key = static_cast<const ShmKey&>(k);
    Peer* p = key.peer.get();
    if (p->closed.load(std::memory_order_acquire)) return NotConnected(*p);
    if (key.mapped) {
      copy::Copy(key.mapped + (dst - key.base), src, n, options_.copy);
      if (!p->self) NoteMappedCopy(p);
      return Status::Ok();
    }
    if (p->self) {
      std::memmove(reinterpret_cast<void*>(dst), src, n);
      return Status::Ok();
    }
    if (p->use_cma.load(std::memory_order_relaxed)) {
      Status s = Cma(p, true, const_cast<void*>(src), dst, n, options_.copy);
      if (s.code() != Errc::kUnsupported) return s;
    }
    return RelayPut(p, Relay(), src, dst, n);
  }

  Status Get(int, const RemoteKey& k, uint64_t src, void* dst, size_t n) override {
    const auto& key = static_cast<const ShmKey&>(k);
    Peer* p = key.peer.get();
    if (p->closed.load(std::memory_order_acquire)) return NotConnected(*p);
    if (key.mapped) {
      copy::Copy(dst, key.mapped + (src - key.base), n, options_.copy);
      if (!p->self) NoteMappedCopy(p);
      return Status::Ok();
    }
    if (p->self) {
      std::memmove(dst, reinterpret_cast<const void*>(src), n);
      return Status::Ok();
    }
    if (p->use_cma.load(std::memory_order_relaxed)) {
      Status s = Cma(p, false, dst, src, n, options_.copy);
      if (s.code() != Errc::kUnsupported) return s;
    }
    return RelayGet(p, Relay(), src, dst, n);
  }

  // Blocks that go by cross-memory attach are moved many at a time
  // (one system call instead of one per block); the others as Put/Get do.
  Status Batch(int peer, bool write, const Piece* pieces, size_t count) override {
    std::vector<Piece> cma;
    Peer* cma_peer = nullptr;
    auto one = [&](const Piece& b) {
      return write ? Put(peer, *b.key, b.local, b.remote, b.n) : Get(peer, *b.key, b.remote, b.local, b.n);
    };
    auto flush = [&]() -> Status {
      if (cma.empty()) return Status::Ok();
      Status s = CmaV(cma_peer, write, cma.data(), cma.size(), options_.copy);
      if (s.code() == Errc::kUnsupported) {
        // Refused (before anything moved): the relay takes them, one by one.
        for (const Piece& b : cma) HIXL_RETURN_IF_ERROR(one(b));
        s = Status::Ok();
      }
      cma.clear();
      return s;
    };
    for (size_t i = 0; i < count; ++i) {
      const Piece& b = pieces[i];
      const auto& key = static_cast<const ShmKey&>(*b.key);
      Peer* p = key.peer.get();
      if (p->closed.load(std::memory_order_acquire)) {
        HIXL_RETURN_IF_ERROR(flush());
        return NotConnected(*p);
      }
      if (!key.mapped && !p->self && p->use_cma.load(std::memory_order_relaxed)) {
        if (cma_peer != p) HIXL_RETURN_IF_ERROR(flush());
        cma_peer = p;
        cma.push_back(b);
        continue;
      }
      HIXL_RETURN_IF_ERROR(flush());
      HIXL_RETURN_IF_ERROR(one(b));
    }
    return flush();
  }

  Status Flush() override {
    // Copies into mapped memory and cross-memory attach complete in the
    // call; only relayed puts can be outstanding.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    Status alive = CheckMappedPeers();
    // No relay channel open: nothing can be outstanding.  A channel opened
    // by a thread whose puts this fence must complete was counted before
    // those puts were posted, so the count is seen here.
    if (relay_channels_.load(std::memory_order_acquire) == 0) return alive;
    std::vector<std::shared_ptr<Peer>> relayed;
    {
      std::lock_guard lock(peers_mu_);
      for (auto& p : peers_) {
        if (p && p->relay.open.load(std::memory_order_acquire)) relayed.push_back(p);
      }
    }
    Status first = alive;
    for (auto& p : relayed) {
      Status s = FlushRelay(p.get(), Relay());
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  }

  Status Flush(int peer) override {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    std::shared_ptr<Peer> p = FindPeer(peer);
    if (!p) return Status::Ok();
    // Only relayed transfers can be outstanding (see Flush()); copies into
    // mapped memory are checked against the peer's death.
    Status s = FlushRelay(p.get(), Relay());
    if (s.ok() && p->mapped_copies.load(std::memory_order_relaxed) && p->mapped_copies.exchange(false)) {
      s = p->CheckAlive();
    }
    return s;
  }

  void Disconnect(int peer) override {
    std::shared_ptr<Peer> p;
    {
      std::lock_guard lock(peers_mu_);
      if (peer >= 0 && static_cast<size_t>(peer) < peers_.size()) p = std::move(peers_[static_cast<size_t>(peer)]);
    }
    if (!p) return;
    // From here every new call with the peer's keys fails; a call already
    // past that check finishes first where it holds a lock taken below.
    p->closed.store(true, std::memory_order_release);
    // Relayed puts in flight land (or time out) before the channel goes; the
    // target unmaps its side when the connection closes.
    CloseRelay(p.get(), Relay());
    // A segment stays mapped while a key unpacked before still points into
    // it (so a call racing with this one never touches unmapped memory); it
    // is unmapped when the last such key goes.
    p->CloseConnection();
  }

  Status Atomic(int, const RemoteKey& k, AtomicOp op, uint64_t addr, uint64_t operand, uint64_t compare,
                uint64_t* old) override {
    const auto& key = static_cast<const ShmKey&>(k);
    Peer* p = key.peer.get();
    if (p->closed.load(std::memory_order_acquire)) return NotConnected(*p);
    uint64_t* word = nullptr;
    if (key.mapped) {
      if (!p->self) HIXL_RETURN_IF_ERROR(p->CheckAlive());  // the result must come from a live peer
      word = reinterpret_cast<uint64_t*>(key.mapped + (addr - key.base));
    } else if (p->self) {
      word = reinterpret_cast<uint64_t*>(addr);
    } else {
      // Memory we do not map: the target's progress thread applies it, in
      // order behind any relayed puts.
      return RelayAtomic(p, Relay(), op, addr, operand, compare, old);
    }
    // Relayed puts to this peer must land before the atomic is seen.
    HIXL_RETURN_IF_ERROR(FlushRelay(p, Relay()));
    *old = ApplyAtomic(word, op, operand, compare);
    if (op != AtomicOp::kFetch) WakeWaiters(word);
    return Status::Ok();
  }

  void Shutdown() override {
    if (server_) server_->Stop();
  }

 private:
  // The peer connected as `peer`, or null.
  std::shared_ptr<Peer> FindPeer(int peer) {
    std::lock_guard lock(peers_mu_);
    if (peer < 0 || static_cast<size_t>(peer) >= peers_.size()) return nullptr;
    return peers_[static_cast<size_t>(peer)];
  }

  Result<std::shared_ptr<Peer>> GetPeer(int peer) {
    std::shared_ptr<Peer> p = FindPeer(peer);
    if (!p) return Err(Errc::kNotConnected, "shm: rank {} is not connected", peer);
    return p;
  }

  RelayContext Relay() { return RelayContext{host_, &relay_channels_}; }

  // A copy into (or out of) a peer's mapped memory, its heap or promoted
  // registered memory: the next flush checks the peer is alive (two relaxed
  // stores where not yet set).
  void NoteMappedCopy(Peer* p) {
    if (!p->mapped_copies.load(std::memory_order_relaxed)) p->mapped_copies.store(true, std::memory_order_relaxed);
    if (!mapped_copies_.load(std::memory_order_relaxed)) mapped_copies_.store(true, std::memory_order_relaxed);
  }

  // For Flush(): the first peer, among those copied into or out of through
  // mappings since the last flush, whose process has exited.
  // At most once per Peer::kAliveWindowNs (the flags stay set meanwhile,
  // for a later flush): a fence after every small put would otherwise pay a
  // lock, a scan of the peers and their pidfds.
  Status CheckMappedPeers() {
    if (!mapped_copies_.load(std::memory_order_relaxed)) return Status::Ok();
    const int64_t now = Peer::NowNs();
    if (now - mapped_checked_ns_.load(std::memory_order_relaxed) < Peer::kAliveWindowNs) return Status::Ok();
    if (!mapped_copies_.exchange(false)) return Status::Ok();
    mapped_checked_ns_.store(now, std::memory_order_relaxed);
    std::vector<std::shared_ptr<Peer>> copied;
    {
      std::lock_guard lock(peers_mu_);
      for (auto& p : peers_) {
        if (p && p->mapped_copies.load(std::memory_order_relaxed) && p->mapped_copies.exchange(false)) {
          copied.push_back(p);
        }
      }
    }
    return Peer::CheckAlive(copied);
  }

  // The key of a promoted region: that of a heap region ([segment][offset]
  // [size]), the segment being the promoted range's memfd.
  Result<std::string> PromotedKey(const LocalRegion& region, const PromotedRange& pr) {
    Status s = server_->AddSegment(pr.segment_id, pr.fd, pr.hi - pr.lo);
    if (!s.ok()) {
      Unpromote(region.base, region.len);
      return s;
    }
    {
      std::lock_guard lock(promoted_mu_);
      auto& [id, count] = promoted_[{region.base, region.len}];
      id = pr.segment_id;
      ++count;
    }
    HIXL_LOG_DEBUG(
        "shm: registered memory [{:#x}, +{}) promoted to shared memory (pages [{:#x}, {:#x}), segment {:#x}): peers on "
        "this host map it",
        region.base, region.len, pr.lo, pr.hi, pr.segment_id);
    // Asked for over the socket (fd -1): a promoted range's descriptor is
    // closed when it is deregistered, and its number may be reused.
    return EncodeKey({pr.segment_id, region.base - pr.lo, pr.hi - pr.lo, -1, 0});
  }

  Host* const host_;
  const ShmOptions options_;
  const auth::MaybeSecret secret_;
  // Atomics: on mapped (heap) words and on this process's own memory the
  // origin applies them; elsewhere the target's progress thread does, through
  // the relay.  Batch: cross-memory attach moves up to 64 pieces per call.
  // Either way the one who applies an atomic wakes the word's sleepers.
  static constexpr Capabilities kCaps{.host_memory = true,
                                      .device_memory = false,
                                      .remote_hosts = false,
                                      .loopback = true,
                                      .atomics = true,
                                      .batch = true,
                                      .wakes_waiters = true};
  std::string host_id_;
  std::string sock_name_;
  std::unique_ptr<ShmServer> server_;  // the socket (on the event loop) and the relay thread

  std::mutex peers_mu_;
  std::vector<std::shared_ptr<Peer>> peers_;               // by rank; null when not connected
  std::atomic<int> relay_channels_{0};                     // relay channels open (until Disconnect)
  std::atomic<bool> mapped_copies_{false};                 // some peer's mapped_copies is set
  std::atomic<int64_t> mapped_checked_ns_{INT64_MIN / 2};  // when CheckMappedPeers last scanned

  std::mutex promoted_mu_;
  // (base, len) -> (segment id, registrations: one Promote each, undone by
  // DeregisterRegion); guarded by promoted_mu_.
  std::map<std::pair<uint64_t, uint64_t>, std::pair<uint32_t, int>> promoted_;
};

}  // namespace

Result<std::unique_ptr<Transport>> CreateShmTransport(Host* host, const Options& options) {
  HIXL_ASSIGN_OR_RETURN(const ShmOptions parsed, ParseOptions(options));
  auto t = std::make_unique<ShmTransport>(host, parsed, options.secret);
  HIXL_RETURN_IF_ERROR(t->Start());
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace hixl::transport::shm

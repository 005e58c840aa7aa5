#include "transport/shm/shm_transport.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "bootstrap/socket.h"
#include "core/log.h"

namespace hixl::transport::shm {

namespace {

using net::Deadline;
using net::Fd;

// ---------------------------------------------------------------- helpers

std::string ReadFirstLine(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

uint64_t NamespaceInode(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

// Messages on the Unix socket between an origin and a target.
enum MsgType : uint32_t { kGetSegment = 1, kOpenRelay = 2 };
struct Msg {
  uint32_t type = 0;
  int32_t status = 0;
  uint64_t a = 0;
  uint64_t b = 0;
};

Status SendMsg(int sock, const Msg& m, int fd_to_pass, Deadline deadline) {
  iovec iov{const_cast<Msg*>(&m), sizeof(m)};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))];
  if (fd_to_pass >= 0) {
    std::memset(ctrl, 0, sizeof(ctrl));
    h.msg_control = ctrl;
    h.msg_controllen = sizeof(ctrl);
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd_to_pass, sizeof(int));
  }
  while (true) {
    ssize_t n = ::sendmsg(sock, &h, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(sizeof(m))) return Status::Ok();
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{sock, POLLOUT, 0};
      if (::poll(&p, 1, net::MsLeft(deadline)) == 0) return Err(Errc::kTimeout, "shm socket send timed out");
      continue;
    }
    return Err(Errc::kPeerFailed, "shm socket send failed: {}", n < 0 ? std::strerror(errno) : "short write");
  }
}

// Receives one message and the fd passed with it (or an invalid Fd).
Status RecvMsg(int sock, Msg* m, Fd* fd, Deadline deadline) {
  iovec iov{m, sizeof(*m)};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))];
  h.msg_control = ctrl;
  h.msg_controllen = sizeof(ctrl);
  while (true) {
    ssize_t n = ::recvmsg(sock, &h, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n == 0) return Err(Errc::kPeerFailed, "shm socket closed by peer");
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{sock, POLLIN, 0};
      if (::poll(&p, 1, net::MsLeft(deadline)) == 0) return Err(Errc::kTimeout, "shm socket receive timed out");
      continue;
    }
    if (n != static_cast<ssize_t>(sizeof(*m))) {
      return Err(Errc::kTransport, "shm socket receive failed: {}", n < 0 ? std::strerror(errno) : "short read");
    }
    break;
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int received = -1;
      std::memcpy(&received, CMSG_DATA(c), sizeof(int));
      if (fd) *fd = Fd(received);
      else ::close(received);
    }
  }
  return Status::Ok();
}

sockaddr_un AbstractAddress(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  a.sun_path[0] = '\0';
  std::memcpy(a.sun_path + 1, name.data(), std::min(name.size(), sizeof(a.sun_path) - 2));
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

// ------------------------------------------------------------ huge pages

constexpr uint64_t kHugePage = uint64_t{2} << 20;
constexpr uint64_t kHugeAdviceMin = uint64_t{4} << 20;  // smaller regions are left alone

// Asks for transparent huge pages (MADV_HUGEPAGE) on the 2 MiB-aligned
// interior of a registered region of at least 4 MiB, where it lies in
// private anonymous memory (malloc, mmap(MAP_ANONYMOUS|MAP_PRIVATE), the
// brk heap); file-backed and shared mappings are left as they are.  Pages
// faulted from now on are then huge, so cross-memory attach pins and walks
// 2 MiB pages instead of 4 KiB ones.  Contents do not change; pages that
// already exist stay small (khugepaged may collapse them later).  A hint:
// every failure (THP off, memory the kernel refuses) is ignored.
void AdviseHugePages(uint64_t base, uint64_t len) {
  if (len < kHugeAdviceMin) return;
  const uint64_t lo = (base + kHugePage - 1) & ~(kHugePage - 1);
  const uint64_t hi = (base + len) & ~(kHugePage - 1);
  if (hi <= lo) return;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    // "start-end perms offset dev inode [path]"
    unsigned long long start = 0, end = 0, offset = 0, inode = 0;
    char perms[8] = {}, dev[32] = {};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %31s %llu %n", &start, &end, perms, &offset, dev, &inode,
                    &path_at) < 6) {
      continue;
    }
    if (end <= lo) continue;
    if (start >= hi) break;  // the file is sorted by address
    const std::string path = path_at > 0 ? line.substr(static_cast<size_t>(path_at)) : std::string();
    const bool anonymous_private = inode == 0 && perms[3] == 'p' && (path.empty() || path == "[heap]");
    if (!anonymous_private) continue;
    const uint64_t a = std::max<uint64_t>(lo, start), b = std::min<uint64_t>(hi, end);
    if (b > a) (void)::madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE);
  }
}

// ------------------------------------------------------------ relay ring

constexpr uint32_t kSlots = 8;
constexpr uint64_t kSlotBytes = uint64_t{1} << 20;
constexpr uint64_t kSlotsOffset = 4096;
constexpr uint64_t kChannelBytes = kSlotsOffset + kSlots * kSlotBytes;
constexpr uint32_t kChannelMagic = 0x6869786c;  // "hixl"

enum SlotState : uint32_t { kFree = 0, kPosted = 1, kDone = 2 };
enum SlotOp : uint32_t { kOpPut = 1, kOpGet = 2, kOpAtomic = 3 };

struct alignas(64) Slot {
  std::atomic<uint32_t> state;  // origin: Free -> Posted; target: Posted -> Done
  uint32_t op;
  uint64_t addr;
  uint64_t len;
  int32_t status;
  uint32_t atomic_op;  // for kOpAtomic: an AtomicOp
  uint64_t operand;
  uint64_t compare;
  uint64_t result;     // for kOpAtomic: the value before
};
struct ChannelHeader {
  uint32_t magic;
  uint32_t slots;
  Slot slot[kSlots];
};
static_assert(sizeof(ChannelHeader) <= kSlotsOffset);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

uint8_t* SlotData(void* channel, uint32_t i) { return static_cast<uint8_t*>(channel) + kSlotsOffset + i * kSlotBytes; }

class Mapping {
 public:
  Mapping() = default;
  Mapping(void* p, size_t n) : p_(p), n_(n) {}
  Mapping(Mapping&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(o.n_) {}
  Mapping& operator=(Mapping&& o) noexcept {
    if (this != &o) {
      Reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = o.n_;
    }
    return *this;
  }
  ~Mapping() { Reset(); }
  void Reset() {
    if (p_) ::munmap(p_, n_);
    p_ = nullptr;
  }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

Result<Mapping> MapShared(int fd, size_t n) {
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Err(Errc::kNoMemory, "mmap of {} shared bytes failed: {}", n, std::strerror(errno));
  return Mapping(p, n);
}

// ------------------------------------------------------------ peers, keys

// What the transport holds for one connected peer.  Keys unpacked for the
// peer share it, so a key never outlives what it points to; Disconnect
// releases its resources and marks it closed, after which calls with its
// keys fail.
struct Peer {
  int rank = -1;
  bool self = false;
  int32_t pid = 0;
  std::string sock_name;
  std::atomic<bool> use_cma{true};
  std::atomic<bool> closed{false};  // set by Disconnect
  // The request connection to the peer's thread (segments, relay set-up).
  std::mutex conn_mu;
  Fd conn;
  std::map<uint32_t, std::shared_ptr<Mapping>> segments;  // guarded by conn_mu
  // The relay channel, made on first need.
  std::mutex relay_mu;
  std::atomic<bool> relay_open{false};
  Mapping channel;
  Fd doorbell;
  uint32_t next_slot = 0;  // the slot the next request goes to
  Status relay_error;      // the first failure reported by the target
};

Status NotConnected(const Peer& p) {
  return Err(Errc::kNotConnected, "shm: rank {} has been disconnected (Connect it again, then unpack its keys again)",
             p.rank);
}

struct ShmKey final : RemoteKey {
  uint64_t base = 0;
  uint8_t* mapped = nullptr;         // the region in this process, for heap regions
  std::shared_ptr<Mapping> segment;  // keeps `mapped` valid, even after Disconnect
  std::shared_ptr<Peer> peer;        // so the hot path takes no lock
};

// -------------------------------------------------------- the transport

class ShmTransport final : public Transport {
 public:
  ShmTransport(Host* host, const Options& options) : host_(host), options_(options) {}
  ~ShmTransport() override { Shutdown(); }

  Status Start() {
    host_id_ = HostIdentity();
    std::random_device rd;
    sock_name_ = fmt::format("hixl-{}-{:08x}{:08x}", ::getpid(), rd(), rd());
    listener_ = Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!listener_.valid()) return Err(Errc::kTransport, "shm: socket() failed: {}", std::strerror(errno));
    socklen_t len = 0;
    sockaddr_un a = AbstractAddress(sock_name_, &len);
    if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(listener_.get(), 128) != 0) {
      return Err(Errc::kTransport, "shm: cannot listen on a Unix socket: {}", std::strerror(errno));
    }
    wake_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    doorbell_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_.valid() || !doorbell_.valid()) {
      return Err(Errc::kTransport, "shm: eventfd failed: {}", std::strerror(errno));
    }
    thread_ = std::thread([this] { Run(); });
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

  Status Connect(int peer, std::string_view address) override {
    net::Reader r(address);
    auto p = std::make_shared<Peer>();
    std::string id;
    if (!r.GetBytes(&id) || !r.Get(&p->pid) || !r.GetBytes(&p->sock_name)) {
      return Err(Errc::kTransport, "shm: malformed address from rank {}", peer);
    }
    p->rank = peer;
    p->self = peer == host_->rank();
    p->use_cma = options_.shm_cma;
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
      if (options_.shm_thp) AdviseHugePages(region.base, region.len);
      return std::string();
    }
    {
      std::lock_guard lock(segments_mu_);
      if (!segments_.count(region.segment_id)) {
        int fd = ::fcntl(region.backing_fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0) return Err(Errc::kTransport, "shm: dup of a heap segment failed: {}", std::strerror(errno));
        segments_.emplace(region.segment_id, std::make_pair(Fd(fd), region.segment_size));
      }
    }
    net::Writer w;
    w.Put<uint32_t>(region.segment_id).Put<uint64_t>(region.segment_offset).Put<uint64_t>(region.segment_size);
    return std::move(w.str());
  }

  void DeregisterRegion(const LocalRegion&) override {}

  Result<std::shared_ptr<RemoteKey>> UnpackKey(int peer, uint64_t base, uint64_t len,
                                               std::string_view key_blob) override {
    auto key = std::make_shared<ShmKey>();
    key->base = base;
    HIXL_ASSIGN_OR_RETURN(std::shared_ptr<Peer> p, GetPeer(peer));
    key->peer = p;
    if (key_blob.empty()) return std::shared_ptr<RemoteKey>(key);
    net::Reader r(key_blob);
    uint32_t seg = 0;
    uint64_t off = 0, size = 0;
    if (!r.Get(&seg) || !r.Get(&off) || !r.Get(&size)) {
      return Err(Errc::kTransport, "shm: malformed key from rank {}", peer);
    }
    if (off > size || len > size - off) {
      // An untrusted blob: the region must lie inside the segment it names.
      return Err(Errc::kTransport, "shm: the key of rank {} for [{:#x}, +{}) does not fit its segment", peer, base, len);
    }
    if (p->self) {
      key->mapped = reinterpret_cast<uint8_t*>(base);
    } else {
      HIXL_ASSIGN_OR_RETURN(key->segment, MapPeerSegment(p.get(), seg, size));
      key->mapped = static_cast<uint8_t*>(key->segment->get()) + off;
    }
    return std::shared_ptr<RemoteKey>(key);
  }

  Status Put(int, const RemoteKey& k, const void* src, uint64_t dst, size_t n) override {
    const auto& key = static_cast<const ShmKey&>(k);
    Peer* p = key.peer.get();
    if (p->closed.load(std::memory_order_acquire)) return NotConnected(*p);
    if (key.mapped) {
      std::memcpy(key.mapped + (dst - key.base), src, n);
      return Status::Ok();
    }
    if (p->self) {
      std::memmove(reinterpret_cast<void*>(dst), src, n);
      return Status::Ok();
    }
    if (p->use_cma.load(std::memory_order_relaxed)) {
      Status s = Cma(p, true, const_cast<void*>(src), dst, n);
      if (s.code() != Errc::kUnsupported) return s;
    }
    return RelayPut(p, src, dst, n);
  }

  Status Get(int, const RemoteKey& k, uint64_t src, void* dst, size_t n) override {
    const auto& key = static_cast<const ShmKey&>(k);
    Peer* p = key.peer.get();
    if (p->closed.load(std::memory_order_acquire)) return NotConnected(*p);
    if (key.mapped) {
      std::memcpy(dst, key.mapped + (src - key.base), n);
      return Status::Ok();
    }
    if (p->self) {
      std::memmove(dst, reinterpret_cast<const void*>(src), n);
      return Status::Ok();
    }
    if (p->use_cma.load(std::memory_order_relaxed)) {
      Status s = Cma(p, false, dst, src, n);
      if (s.code() != Errc::kUnsupported) return s;
    }
    return RelayGet(p, src, dst, n);
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
      Status s = CmaV(cma_peer, write, cma.data(), cma.size());
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
    // No relay channel open: nothing can be outstanding.  A channel opened
    // by a thread whose puts this fence must complete was counted before
    // those puts were posted, so the count is seen here.
    if (relay_channels_.load(std::memory_order_acquire) == 0) return Status::Ok();
    std::vector<std::shared_ptr<Peer>> relayed;
    {
      std::lock_guard lock(peers_mu_);
      for (auto& p : peers_) {
        if (p && p->relay_open.load(std::memory_order_acquire)) relayed.push_back(p);
      }
    }
    Status first;
    for (auto& p : relayed) {
      std::lock_guard lock(p->relay_mu);
      Status s = DrainRelay(p.get());
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  }

  Status Flush(int peer) override {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    std::shared_ptr<Peer> p = FindPeer(peer);
    // Only relayed transfers can be outstanding (see Flush()).
    if (!p || !p->relay_open.load(std::memory_order_acquire)) return Status::Ok();
    std::lock_guard lock(p->relay_mu);
    return DrainRelay(p.get());
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
    {
      std::lock_guard lock(p->relay_mu);
      if (p->relay_open.load(std::memory_order_relaxed)) {
        // Relayed puts in flight land (or time out) before the channel goes;
        // the target unmaps its side when the connection below closes.
        Status s = DrainRelay(p.get());
        if (!s.ok()) HIXL_LOG_INFO("shm: disconnecting from rank {}: {}", p->rank, s.message());
        p->relay_open.store(false, std::memory_order_relaxed);
        p->channel.Reset();
        p->doorbell.Reset();
        relay_channels_.fetch_sub(1, std::memory_order_acq_rel);
      }
    }
    std::lock_guard lock(p->conn_mu);
    p->conn.Reset();
    // A segment stays mapped while a key unpacked before still points into
    // it (so a call racing with this one never touches unmapped memory); it
    // is unmapped when the last such key goes.
    p->segments.clear();
  }

  Status Atomic(int, const RemoteKey& k, AtomicOp op, uint64_t addr, uint64_t operand, uint64_t compare,
                uint64_t* old) override {
    const auto& key = static_cast<const ShmKey&>(k);
    Peer* p = key.peer.get();
    if (p->closed.load(std::memory_order_acquire)) return NotConnected(*p);
    uint64_t* word = nullptr;
    if (key.mapped) {
      word = reinterpret_cast<uint64_t*>(key.mapped + (addr - key.base));
    } else if (p->self) {
      word = reinterpret_cast<uint64_t*>(addr);
    } else {
      // Memory we do not map: the target's progress thread applies it, in
      // order behind any relayed puts.
      return RelayAtomic(p, op, addr, operand, compare, old);
    }
    if (p->relay_open.load(std::memory_order_acquire)) {
      // Relayed puts to this peer must land before the atomic is seen.
      std::lock_guard lock(p->relay_mu);
      HIXL_RETURN_IF_ERROR(DrainRelay(p));
    }
    *old = ApplyAtomic(word, op, operand, compare);
    if (op != AtomicOp::kFetch) WakeWaiters(word);
    return Status::Ok();
  }

  void Shutdown() override {
    if (thread_.joinable()) {
      uint64_t one = 1;
      ssize_t w = ::write(wake_.get(), &one, sizeof(one));
      (void)w;
      thread_.join();
    }
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

  // One request/response with the peer's thread; conn_mu is held.
  Status Request(Peer* p, const Msg& m, int fd_to_pass, Msg* reply, Fd* reply_fd) {
    if (p->closed.load(std::memory_order_acquire)) return NotConnected(*p);
    Deadline deadline = net::DeadlineIn(host_->timeout_ms());
    if (!p->conn.valid()) {
      Fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      socklen_t len = 0;
      sockaddr_un a = AbstractAddress(p->sock_name, &len);
      if (!s.valid() || ::connect(s.get(), reinterpret_cast<sockaddr*>(&a), len) != 0) {
        return Err(Errc::kPeerFailed, "shm: cannot connect to rank {} (pid {}): {}", p->rank, p->pid,
                   std::strerror(errno));
      }
      p->conn = std::move(s);
    }
    Status s = SendMsg(p->conn.get(), m, fd_to_pass, deadline);
    if (s.ok()) s = RecvMsg(p->conn.get(), reply, reply_fd, deadline);
    if (!s.ok()) {
      p->conn.Reset();
      return Err(s.code(), "shm: rank {} (pid {}) did not answer: {}", p->rank, p->pid, s.message());
    }
    if (reply->status != 0) {
      return Err(static_cast<Errc>(reply->status), "shm: rank {} refused the request", p->rank);
    }
    return Status::Ok();
  }

  Result<std::shared_ptr<Mapping>> MapPeerSegment(Peer* p, uint32_t seg, uint64_t size) {
    std::lock_guard lock(p->conn_mu);
    auto it = p->segments.find(seg);
    if (it != p->segments.end()) return it->second;
    Msg m, reply;
    m.type = kGetSegment;
    m.a = seg;
    Fd fd;
    HIXL_RETURN_IF_ERROR(Request(p, m, -1, &reply, &fd));
    if (!fd.valid()) return Err(Errc::kTransport, "shm: rank {} sent no fd for heap segment {}", p->rank, seg);
    HIXL_ASSIGN_OR_RETURN(Mapping map, MapShared(fd.get(), size));
    auto mapping = std::make_shared<Mapping>(std::move(map));
    p->segments.emplace(seg, mapping);
    return mapping;
  }

  // Cross-memory attach.  kUnsupported means "use the relay instead".
  Status Cma(Peer* p, bool write, void* local, uint64_t remote, size_t n) {
    const Piece one{nullptr, remote, local, n};
    return CmaV(p, write, &one, 1);
  }

  // Cross-memory attach of a batch of blocks with one peer, up to kIov
  // blocks per system call; a partial transfer resumes where it stopped.
  Status CmaV(Peer* p, bool write, const Piece* pieces, size_t count) {
    constexpr size_t kIov = 64;  // per system call; on the stack (no allocation per put)
    iovec liov[kIov], riov[kIov];
    size_t i = 0, done = 0;  // the next byte to move: piece i, offset done
    while (i < count) {
      size_t m = 0;
      for (size_t j = i; j < count && m < kIov; ++j) {
        const size_t off = j == i ? done : 0;
        if (pieces[j].n == off) continue;
        liov[m] = {static_cast<uint8_t*>(pieces[j].local) + off, pieces[j].n - off};
        riov[m] = {reinterpret_cast<void*>(pieces[j].remote + off), pieces[j].n - off};
        ++m;
      }
      if (m == 0) break;
      ssize_t k = write ? ::process_vm_writev(p->pid, liov, m, riov, m, 0)
                        : ::process_vm_readv(p->pid, liov, m, riov, m, 0);
      if (k > 0) {
        auto left = static_cast<size_t>(k);
        while (i < count && left >= pieces[i].n - done) {
          left -= pieces[i].n - done;
          ++i;
          done = 0;
        }
        done += left;
        continue;
      }
      int e = k == 0 ? EFAULT : errno;
      if (e == EINTR) continue;
      if (e == EPERM || e == ENOSYS || e == EACCES) {
        if (p->use_cma.exchange(false)) {
          HIXL_LOG_INFO("cross-memory attach to rank {} refused ({}); using the shared-memory relay", p->rank,
                        std::strerror(e));
        }
        return Status(Errc::kUnsupported, "");
      }
      if (e == ESRCH) return Err(Errc::kPeerFailed, "rank {} (pid {}) has exited", p->rank, p->pid);
      return Err(Errc::kTransport, "cross-memory {} of rank {} at {:#x} failed: {}", write ? "write" : "read",
                 p->rank, pieces[i].remote + done, std::strerror(e));
    }
    return Status::Ok();
  }

  // --- relay, origin side (relay_mu held unless noted)

  Status OpenRelay(Peer* p) {
    if (p->closed.load(std::memory_order_acquire)) return NotConnected(*p);
    if (p->relay_open.load(std::memory_order_relaxed)) return Status::Ok();
    Fd mem(::memfd_create("hixl-relay", MFD_CLOEXEC));
    if (!mem.valid() || ::ftruncate(mem.get(), static_cast<off_t>(kChannelBytes)) != 0) {
      return Err(Errc::kNoMemory, "shm: cannot create a relay channel: {}", std::strerror(errno));
    }
    HIXL_ASSIGN_OR_RETURN(Mapping map, MapShared(mem.get(), kChannelBytes));
    auto* h = new (map.get()) ChannelHeader{};
    h->magic = kChannelMagic;
    h->slots = kSlots;
    for (auto& s : h->slot) s.state.store(kFree, std::memory_order_relaxed);
    Msg m, reply;
    m.type = kOpenRelay;
    m.a = kChannelBytes;
    Fd bell;
    {
      std::lock_guard lock(p->conn_mu);
      HIXL_RETURN_IF_ERROR(Request(p, m, mem.get(), &reply, &bell));
    }
    if (!bell.valid()) return Err(Errc::kTransport, "shm: rank {} sent no doorbell for the relay", p->rank);
    p->channel = std::move(map);
    p->doorbell = std::move(bell);
    relay_channels_.fetch_add(1, std::memory_order_acq_rel);
    p->relay_open.store(true, std::memory_order_release);
    return Status::Ok();
  }

  ChannelHeader* Channel(Peer* p) { return static_cast<ChannelHeader*>(p->channel.get()); }

  void Ring(Peer* p) {
    uint64_t one = 1;
    ssize_t w = ::write(p->doorbell.get(), &one, sizeof(one));
    (void)w;
  }

  // Waits until slot i is not Posted; then, if it is Done, takes its result.
  Status Reclaim(Peer* p, uint32_t i) {
    Slot& s = Channel(p)->slot[i];
    HIXL_RETURN_IF_ERROR(WaitNotPosted(p, s));
    if (s.state.load(std::memory_order_acquire) == kDone) {
      if (s.status != 0 && p->relay_error.ok()) {
        p->relay_error = s.status == HIXL_ERR_NOT_REGISTERED
                             ? Err(Errc::kNotRegistered,
                                   "Remote memory not registered: rank {} refused a relayed {} of {} bytes at {:#x} "
                                   "(deregistered meanwhile)",
                                   p->rank, s.op == kOpPut ? "put" : "get", s.len, s.addr)
                             : Err(static_cast<Errc>(s.status), "rank {} failed a relayed transfer", p->rank);
      }
      s.state.store(kFree, std::memory_order_relaxed);
    }
    return Status::Ok();
  }

  Status DrainRelay(Peer* p) {
    if (!p->relay_open.load(std::memory_order_relaxed)) return Status::Ok();
    for (uint32_t i = 0; i < kSlots; ++i) HIXL_RETURN_IF_ERROR(Reclaim(p, i));
    return std::exchange(p->relay_error, Status::Ok());
  }

  void Post(Peer* p, uint32_t i, uint32_t op, uint64_t addr, uint64_t len) {
    Slot& s = Channel(p)->slot[i];
    s.op = op;
    s.addr = addr;
    s.len = len;
    s.status = 0;
    s.state.store(kPosted, std::memory_order_release);
    Ring(p);
  }

  Status RelayPut(Peer* p, const void* src, uint64_t dst, size_t n) {
    std::lock_guard lock(p->relay_mu);
    HIXL_RETURN_IF_ERROR(OpenRelay(p));
    auto* from = static_cast<const uint8_t*>(src);
    for (size_t done = 0; done < n;) {
      size_t chunk = std::min<size_t>(n - done, kSlotBytes);
      uint32_t i = p->next_slot;
      HIXL_RETURN_IF_ERROR(Reclaim(p, i));
      std::memcpy(SlotData(p->channel.get(), i), from + done, chunk);
      Post(p, i, kOpPut, dst + done, chunk);
      p->next_slot = (i + 1) % kSlots;
      done += chunk;
    }
    return Status::Ok();  // completes at Flush
  }

  Status RelayGet(Peer* p, uint64_t src, void* dst, size_t n) {
    std::lock_guard lock(p->relay_mu);
    HIXL_RETURN_IF_ERROR(OpenRelay(p));
    // Drain first so that an earlier failure is not mistaken for this one.
    HIXL_RETURN_IF_ERROR(DrainRelay(p));
    auto* to = static_cast<uint8_t*>(dst);
    struct Pending {
      uint32_t slot;
      size_t offset, len;
    };
    std::vector<Pending> inflight;
    size_t posted = 0, copied = 0;
    while (copied < n) {
      // Keep every slot busy, then collect in order.
      while (posted < n && inflight.size() < kSlots) {
        size_t chunk = std::min<size_t>(n - posted, kSlotBytes);
        uint32_t i = p->next_slot;
        HIXL_RETURN_IF_ERROR(Reclaim(p, i));
        Post(p, i, kOpGet, src + posted, chunk);
        inflight.push_back({i, posted, chunk});
        p->next_slot = (i + 1) % kSlots;
        posted += chunk;
      }
      Pending q = inflight.front();
      inflight.erase(inflight.begin());
      Slot& s = Channel(p)->slot[q.slot];
      HIXL_RETURN_IF_ERROR(WaitNotPosted(p, s));  // a slot we posted only becomes Done
      const int32_t status = s.status;
      if (status == 0) std::memcpy(to + q.offset, SlotData(p->channel.get(), q.slot), q.len);
      s.state.store(kFree, std::memory_order_relaxed);
      if (status != 0) {
        HIXL_RETURN_IF_ERROR(DrainRelay(p));
        return Err(Errc::kNotRegistered,
                   "Remote memory not registered: rank {} refused a relayed get of {} bytes at {:#x} "
                   "(deregistered meanwhile)", p->rank, n, src);
      }
      copied += q.len;
    }
    return Status::Ok();
  }

  Status RelayAtomic(Peer* p, AtomicOp op, uint64_t addr, uint64_t operand, uint64_t compare, uint64_t* old) {
    std::lock_guard lock(p->relay_mu);
    HIXL_RETURN_IF_ERROR(OpenRelay(p));
    const uint32_t i = p->next_slot;
    HIXL_RETURN_IF_ERROR(Reclaim(p, i));
    Slot& s = Channel(p)->slot[i];
    s.atomic_op = static_cast<uint32_t>(op);
    s.operand = operand;
    s.compare = compare;
    Post(p, i, kOpAtomic, addr, sizeof(uint64_t));
    p->next_slot = (i + 1) % kSlots;
    HIXL_RETURN_IF_ERROR(WaitNotPosted(p, s));
    const int32_t status = s.status;
    *old = s.result;
    s.state.store(kFree, std::memory_order_relaxed);
    if (status != 0) {
      return Err(Errc::kNotRegistered,
                 "Remote memory not registered: rank {} refused an atomic on the 8 bytes at {:#x} "
                 "(deregistered meanwhile)", p->rank, addr);
    }
    return Status::Ok();
  }

  // Spins briefly, then sleeps on the slot's futex; bounded by the timeout
  // and by the target's death.
  Status WaitNotPosted(Peer* p, Slot& s) {
    Deadline deadline = net::DeadlineIn(host_->timeout_ms());
    for (int spin = 0; s.state.load(std::memory_order_acquire) == kPosted; ++spin) {
      if (spin < 200) {
        std::this_thread::yield();
        continue;
      }
      if (::kill(p->pid, 0) != 0 && errno == ESRCH) {
        return Err(Errc::kPeerFailed, "rank {} (pid {}) exited with a relayed transfer pending", p->rank, p->pid);
      }
      if (net::Clock::now() >= deadline) {
        return Err(Errc::kTimeout, "rank {} did not serve a relayed transfer within HIXL_TIMEOUT_MS={}", p->rank,
                   host_->timeout_ms());
      }
      timespec ts{0, 10 * 1000 * 1000};
      Futex(&s.state, FUTEX_WAIT, kPosted, &ts);
    }
    return Status::Ok();
  }

  // --- the progress thread (target side)

  struct Served {
    Fd conn;
    Mapping channel;  // set once the origin opened a relay
    uint32_t next = 0;
  };

  void Run() {
    std::vector<std::unique_ptr<Served>> conns;
    while (true) {
      std::vector<pollfd> pfds;
      pfds.push_back({wake_.get(), POLLIN, 0});
      pfds.push_back({listener_.get(), POLLIN, 0});
      pfds.push_back({doorbell_.get(), POLLIN, 0});
      for (auto& c : conns) pfds.push_back({c->conn.get(), POLLIN, 0});
      if (::poll(pfds.data(), pfds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        HIXL_LOG_ERROR("shm progress thread: poll failed: {}", std::strerror(errno));
        return;
      }
      if (pfds[0].revents) return;
      if (pfds[1].revents & POLLIN) {
        int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          auto s = std::make_unique<Served>();
          s->conn = Fd(fd);
          conns.push_back(std::move(s));
        }
      }
      if (pfds[2].revents & POLLIN) {
        uint64_t count;
        ssize_t r = ::read(doorbell_.get(), &count, sizeof(count));
        (void)r;
      }
      // Serve the relay channels every time round: cheap when idle.
      for (auto& c : conns) ServeRelay(c.get());
      for (size_t i = 0; i < conns.size(); ++i) {
        if (i + 3 >= pfds.size() || !pfds[i + 3].revents) continue;
        if (!ServeRequest(conns[i].get())) conns[i].reset();
      }
      std::erase_if(conns, [](const auto& c) { return c == nullptr; });
    }
  }

  bool ServeRequest(Served* c) {
    Msg m, reply;
    Fd fd;
    if (!RecvMsg(c->conn.get(), &m, &fd, net::DeadlineIn(5000)).ok()) return false;
    int pass = -1;
    reply.type = m.type;
    if (m.type == kGetSegment) {
      std::lock_guard lock(segments_mu_);
      auto it = segments_.find(static_cast<uint32_t>(m.a));
      if (it == segments_.end()) {
        reply.status = HIXL_ERR_INVALID_ARG;
      } else {
        pass = it->second.first.get();
        reply.a = it->second.second;
      }
    } else if (m.type == kOpenRelay && fd.valid() && m.a == kChannelBytes) {
      auto map = MapShared(fd.get(), kChannelBytes);
      if (!map.ok() || static_cast<ChannelHeader*>(map.value().get())->magic != kChannelMagic) {
        reply.status = HIXL_ERR_TRANSPORT;
      } else {
        c->channel = std::move(map.value());
        c->next = 0;
        pass = doorbell_.get();
      }
    } else {
      reply.status = HIXL_ERR_INVALID_ARG;
    }
    return SendMsg(c->conn.get(), reply, pass, net::DeadlineIn(5000)).ok();
  }

  void ServeRelay(Served* c) {
    if (!c->channel.get()) return;
    auto* h = static_cast<ChannelHeader*>(c->channel.get());
    // Requests are posted in ring order; serve them in the same order.
    while (true) {
      Slot& s = h->slot[c->next];
      if (s.state.load(std::memory_order_acquire) != kPosted) return;
      uint8_t* data = SlotData(c->channel.get(), c->next);
      const uint64_t addr = s.addr, len = s.len;
      const uint32_t op = s.op;
      bool ok = len <= kSlotBytes && host_->AccessLocalRange(addr, len, [&] {
        if (op == kOpPut) {
          std::memcpy(reinterpret_cast<void*>(addr), data, len);
        } else if (op == kOpGet) {
          std::memcpy(data, reinterpret_cast<const void*>(addr), len);
        } else {
          auto* word = reinterpret_cast<uint64_t*>(addr);
          auto aop = static_cast<AtomicOp>(s.atomic_op);
          s.result = ApplyAtomic(word, aop, s.operand, s.compare);
          if (aop != AtomicOp::kFetch) WakeWaiters(word);
        }
      });
      s.status = ok ? 0 : HIXL_ERR_NOT_REGISTERED;
      s.state.store(kDone, std::memory_order_release);
      Futex(&s.state, FUTEX_WAKE, INT32_MAX, nullptr);
      c->next = (c->next + 1) % kSlots;
    }
  }

  Host* const host_;
  const Options options_;
  // Atomics: on mapped (heap) words and on this process's own memory the
  // origin applies them; elsewhere the target's progress thread does, through
  // the relay.  Batch: cross-memory attach moves up to 64 pieces per call.
  static constexpr Capabilities kCaps{.host_memory = true,
                                      .device_memory = false,
                                      .remote_hosts = false,
                                      .loopback = true,
                                      .atomics = true,
                                      .batch = true};
  std::string host_id_;
  std::string sock_name_;
  Fd listener_, wake_, doorbell_;
  std::thread thread_;

  std::mutex peers_mu_;
  std::vector<std::shared_ptr<Peer>> peers_;  // by rank; null when not connected
  std::atomic<int> relay_channels_{0};        // relay channels open (until Disconnect)

  std::mutex segments_mu_;
  std::map<uint32_t, std::pair<Fd, uint64_t>> segments_;  // id -> (memfd, size)
};

}  // namespace

std::string HostIdentity() {
  return fmt::format("{}/net:{}/pid:{}", ReadFirstLine("/proc/sys/kernel/random/boot_id"),
                     NamespaceInode("/proc/self/ns/net"), NamespaceInode("/proc/self/ns/pid"));
}

Result<std::unique_ptr<Transport>> CreateShmTransport(Host* host, const Options& options) {
  auto t = std::make_unique<ShmTransport>(host, options);
  HIXL_RETURN_IF_ERROR(t->Start());
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace hixl::transport::shm

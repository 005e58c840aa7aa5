#include "transport/shm/relay.h"

#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "base/log.h"
#include "transport/shm/fd_channel.h"
#include "transport/shm/peer.h"

// Under ThreadSanitizer: see UserMemory below.
#if defined(__SANITIZE_THREAD__)
#define HIXL_RELAY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HIXL_RELAY_TSAN 1
#endif
#endif
#ifdef HIXL_RELAY_TSAN
// The dynamic annotations the TSan runtime exports.
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace hixl::transport::shm {

namespace {

// The progress thread's copy of a relayed put writes the USER's registered
// memory, that of a relayed get reads it, and a relayed atomic updates a
// word of it.  What orders those accesses against the user's own threads is
// the one-sided protocol between processes: the origin's flush (or wait)
// sees the slot Done, then tells the target (a barrier, a signal, a
// notification, a message of its own) that the bytes are there or may be
// reused.  TSan sees one process only, so it would report every relayed
// transfer as a race with the user's next access.  So, while a UserMemory
// lives, this thread's accesses are left out of TSan's view; it spans the
// user access alone (a memcpy whose other side is the slot's data, which in
// this process only this thread touches, or the atomic on the user's word).
// The slots' fields and the ring's words stay checked, ordered by their
// acquire/release atomics.  Without TSan it does nothing.
class UserMemory {
 public:
#ifdef HIXL_RELAY_TSAN
  UserMemory() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~UserMemory() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  UserMemory() = default;
#endif
  UserMemory(const UserMemory&) = delete;
  UserMemory& operator=(const UserMemory&) = delete;
};

using net::Deadline;
using net::Fd;

// ------------------------------------------------------------ the ring

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
  uint64_t result;  // for kOpAtomic: the value before
};
struct ChannelHeader {
  uint32_t magic;
  uint32_t slots;
  Slot slot[kSlots];
};
static_assert(sizeof(ChannelHeader) <= kSlotsOffset);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

uint8_t* SlotData(void* channel, uint32_t i) { return static_cast<uint8_t*>(channel) + kSlotsOffset + i * kSlotBytes; }

long Futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

// ------------------------------------------------ the origin (relay.mu held)

ChannelHeader* Channel(Peer* p) { return static_cast<ChannelHeader*>(p->relay.channel.get()); }

Status OpenRelay(Peer* p, const RelayContext& cx) {
  if (p->closed.load(std::memory_order_acquire)) return NotConnected(*p);
  if (p->relay.open.load(std::memory_order_relaxed)) return Status::Ok();
  Fd mem(::memfd_create("hixl-relay", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!mem.valid() || ::ftruncate(mem.get(), static_cast<off_t>(kChannelBytes)) != 0) {
    return Err(Errc::kNoMemory, "shm: cannot create a relay channel: {}", std::strerror(errno));
  }
  HIXL_RETURN_IF_ERROR(SealSize(mem.get()));  // the target maps only a sealed one
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
    HIXL_RETURN_IF_ERROR(p->Request(m, mem.get(), &reply, &bell, WaitMs(*cx.host)));
  }
  if (!bell.valid()) return Err(Errc::kTransport, "shm: rank {} sent no doorbell for the relay", p->rank);
  p->relay.channel = std::move(map);
  p->relay.doorbell = std::move(bell);
  cx.open_channels->fetch_add(1, std::memory_order_acq_rel);
  p->relay.open.store(true, std::memory_order_release);
  return Status::Ok();
}

void Ring(Peer* p) {
  uint64_t one = 1;
  ssize_t w = ::write(p->relay.doorbell.get(), &one, sizeof(one));
  (void)w;
}

// Spins briefly, then sleeps on the slot's futex; bounded by the timeout
// and by the target's death.
Status WaitNotPosted(Peer* p, const RelayContext& cx, Slot& s) {
  const Deadline deadline = WaitDeadline(*cx.host);
  for (int spin = 0; s.state.load(std::memory_order_acquire) == kPosted; ++spin) {
    if (spin < 200) {
      std::this_thread::yield();
      continue;
    }
    if (::kill(p->pid, 0) != 0 && errno == ESRCH) {
      // Nobody will serve the ring again: what is posted is dropped (this
      // failure reports it), so that later flushes to this peer, and
      // flushes of every peer, do not meet it again.
      for (auto& slot : Channel(p)->slot) slot.state.store(kFree, std::memory_order_relaxed);
      return Err(Errc::kPeerFailed, "rank {} (pid {}) exited with a relayed transfer pending", p->rank, p->pid);
    }
    if (net::Clock::now() >= deadline) {
      return Err(Errc::kTimeout,
                 "rank {} (pid {}) did not serve a relayed transfer in time (the call's timeout, or "
                 "HIXL_TIMEOUT_MS={})",
                 p->rank, p->pid, cx.host->timeout_ms());
    }
    timespec ts{0, 10 * 1000 * 1000};
    Futex(&s.state, FUTEX_WAIT, kPosted, &ts);
  }
  return Status::Ok();
}

// Waits until slot i is not Posted; then, if it is Done, takes its result.
Status Reclaim(Peer* p, const RelayContext& cx, uint32_t i) {
  Slot& s = Channel(p)->slot[i];
  HIXL_RETURN_IF_ERROR(WaitNotPosted(p, cx, s));
  if (s.state.load(std::memory_order_acquire) == kDone) {
    if (s.status != 0 && p->relay.error.ok()) {
      p->relay.error = s.status == HIXL_ERR_NOT_REGISTERED
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

Status DrainRelay(Peer* p, const RelayContext& cx) {
  if (!p->relay.open.load(std::memory_order_relaxed)) return Status::Ok();
  for (uint32_t i = 0; i < kSlots; ++i) HIXL_RETURN_IF_ERROR(Reclaim(p, cx, i));
  return std::exchange(p->relay.error, Status::Ok());
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

}  // namespace

Status RelayPut(Peer* p, const RelayContext& cx, const void* src, uint64_t dst, size_t n) {
  std::lock_guard lock(p->relay.mu);
  HIXL_RETURN_IF_ERROR(OpenRelay(p, cx));
  const auto* from = static_cast<const uint8_t*>(src);
  for (size_t done = 0; done < n;) {
    size_t chunk = std::min<size_t>(n - done, kSlotBytes);
    uint32_t i = p->relay.next_slot;
    HIXL_RETURN_IF_ERROR(Reclaim(p, cx, i));
    std::memcpy(SlotData(p->relay.channel.get(), i), from + done, chunk);
    Post(p, i, kOpPut, dst + done, chunk);
    p->relay.next_slot = (i + 1) % kSlots;
    done += chunk;
  }
  return Status::Ok();  // completes at FlushRelay
}

Status RelayGet(Peer* p, const RelayContext& cx, uint64_t src, void* dst, size_t n) {
  std::lock_guard lock(p->relay.mu);
  HIXL_RETURN_IF_ERROR(OpenRelay(p, cx));
  // Drain first so that an earlier failure is not mistaken for this one.
  HIXL_RETURN_IF_ERROR(DrainRelay(p, cx));
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
      uint32_t i = p->relay.next_slot;
      HIXL_RETURN_IF_ERROR(Reclaim(p, cx, i));
      Post(p, i, kOpGet, src + posted, chunk);
      inflight.push_back({i, posted, chunk});
      p->relay.next_slot = (i + 1) % kSlots;
      posted += chunk;
    }
    Pending q = inflight.front();
    inflight.erase(inflight.begin());
    Slot& s = Channel(p)->slot[q.slot];
    HIXL_RETURN_IF_ERROR(WaitNotPosted(p, cx, s));  // a slot we posted only becomes Done
    const int32_t status = s.status;
    if (status == 0) std::memcpy(to + q.offset, SlotData(p->relay.channel.get(), q.slot), q.len);
    s.state.store(kFree, std::memory_order_relaxed);
    if (status != 0) {
      HIXL_RETURN_IF_ERROR(DrainRelay(p, cx));
      return Err(Errc::kNotRegistered,
                 "Remote memory not registered: rank {} refused a relayed get of {} bytes at {:#x} "
                 "(deregistered meanwhile)",
                 p->rank, n, src);
    }
    copied += q.len;
  }
  return Status::Ok();
}

Status RelayAtomic(Peer* p, const RelayContext& cx, AtomicOp op, uint64_t addr, uint64_t operand, uint64_t compare,
                   uint64_t* old) {
  std::lock_guard lock(p->relay.mu);
  HIXL_RETURN_IF_ERROR(OpenRelay(p, cx));
  const uint32_t i = p->relay.next_slot;
  HIXL_RETURN_IF_ERROR(Reclaim(p, cx, i));
  Slot& s = Channel(p)->slot[i];
  s.atomic_op = static_cast<uint32_t>(op);
  s.operand = operand;
  s.compare = compare;
  Post(p, i, kOpAtomic, addr, sizeof(uint64_t));
  p->relay.next_slot = (i + 1) % kSlots;
  HIXL_RETURN_IF_ERROR(WaitNotPosted(p, cx, s));
  const int32_t status = s.status;
  *old = s.result;
  s.state.store(kFree, std::memory_order_relaxed);
  if (status != 0) {
    return Err(Errc::kNotRegistered,
               "Remote memory not registered: rank {} refused an atomic on the 8 bytes at {:#x} "
               "(deregistered meanwhile)",
               p->rank, addr);
  }
  return Status::Ok();
}

Status FlushRelay(Peer* p, const RelayContext& cx) {
  if (!p->relay.open.load(std::memory_order_acquire)) return Status::Ok();
  std::lock_guard lock(p->relay.mu);
  return DrainRelay(p, cx);
}

void CloseRelay(Peer* p, const RelayContext& cx) {
  std::lock_guard lock(p->relay.mu);
  if (!p->relay.open.load(std::memory_order_relaxed)) return;
  // Relayed puts in flight land (or time out) before the channel goes.
  Status s = DrainRelay(p, cx);
  if (!s.ok()) HIXL_LOG_INFO("shm: closing the relay to rank {}: {}", p->rank, s.message());
  p->relay.open.store(false, std::memory_order_relaxed);
  p->relay.channel.Reset();
  p->relay.doorbell.Reset();
  cx.open_channels->fetch_sub(1, std::memory_order_acq_rel);
}

uint64_t RelayChannelBytes() { return kChannelBytes; }

Result<Mapping> AcceptRelayChannel(int memfd, uint64_t size) {
  if (size != kChannelBytes) return Err(Errc::kInvalidArg, "a relay channel of {} bytes", size);
  // The size the message claims is untrusted, and so is the file: mapped
  // past its end, or truncated later by the origin, a touch would raise
  // SIGBUS in the relay thread.
  HIXL_ASSIGN_OR_RETURN(Mapping map, MapPeerFile(memfd, kChannelBytes, "a relay channel"));
  if (static_cast<ChannelHeader*>(map.get())->magic != kChannelMagic) {
    return Err(Errc::kTransport, "not a relay channel");
  }
  return map;
}

void ServeRelay(const Mapping& channel, uint32_t* next, const Host& host) {
  if (!channel.get()) return;
  auto* h = static_cast<ChannelHeader*>(channel.get());
  // Requests are posted in ring order; serve them in the same order.
  while (true) {
    Slot& s = h->slot[*next];
    if (s.state.load(std::memory_order_acquire) != kPosted) return;
    uint8_t* data = SlotData(channel.get(), *next);
    const uint64_t addr = s.addr, len = s.len;
    const uint32_t op = s.op;
    bool ok = len <= kSlotBytes && host.AccessLocalRange(addr, len, [&] {
      if (op == kOpPut) {
        [[maybe_unused]] const UserMemory user;
        std::memcpy(reinterpret_cast<void*>(addr), data, len);
      } else if (op == kOpGet) {
        [[maybe_unused]] const UserMemory user;
        std::memcpy(data, reinterpret_cast<const void*>(addr), len);
      } else {
        auto* word = reinterpret_cast<uint64_t*>(addr);
        const auto aop = static_cast<AtomicOp>(s.atomic_op);
        const uint64_t operand = s.operand, compare = s.compare;
        uint64_t old;
        {
          [[maybe_unused]] const UserMemory user;
          old = ApplyAtomic(word, aop, operand, compare);
        }
        s.result = old;
        if (aop != AtomicOp::kFetch) WakeWaiters(word);
      }
    });
    s.status = ok ? 0 : HIXL_ERR_NOT_REGISTERED;
    s.state.store(kDone, std::memory_order_release);
    Futex(&s.state, FUTEX_WAKE, INT32_MAX, nullptr);
    *next = (*next + 1) % kSlots;
  }
}

}  // namespace hixl::transport::shm

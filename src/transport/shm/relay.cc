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
#include "transport/shm/relay_slot.h"

namespace hixl::transport::shm {

namespace {

using net::Deadline;
using net::Fd;

// ------------------------------------------------------------ the ring
// (its layout: relay_slot.h)

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

void Post(Peer* p, uint32_t i, const SlotRequest& r) {
  Slot& s = Channel(p)->slot[i];
  WriteRequest(s, r);
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
    Post(p, i, SlotRequest{.op = kOpPut, .addr = dst + done, .len = chunk});
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
      Post(p, i, SlotRequest{.op = kOpGet, .addr = src + posted, .len = chunk});
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
  Post(p, i,
       SlotRequest{.op = kOpAtomic,
                   .atomic_op = static_cast<uint32_t>(op),
                   .addr = addr,
                   .len = sizeof(uint64_t),
                   .operand = operand,
                   .compare = compare});
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
    // The peer may rewrite the slot meanwhile: what is checked and done is
    // this copy, read once.
    const SlotRequest r = CopyRequest(s);
    const SlotAnswer a = ServeRequest(r, SlotData(channel.get(), *next), host);
    s.result = a.result;
    s.status = a.status;
    s.state.store(kDone, std::memory_order_release);
    Futex(&s.state, FUTEX_WAKE, INT32_MAX, nullptr);
    *next = (*next + 1) % kSlots;
  }
}

}  // namespace hixl::transport::shm

// Signals, remote atomics and notifications: how a target learns that data
// arrived without taking part in the transfer.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <thread>

#include "world/world.h"

namespace hixl::world {

using core::ControlMsg;

namespace {

bool Compare(uint64_t v, int cmp, uint64_t value) {
  switch (cmp) {
    case HIXL_CMP_EQ: return v == value;
    case HIXL_CMP_NE: return v != value;
    case HIXL_CMP_GT: return v > value;
    case HIXL_CMP_GE: return v >= value;
    case HIXL_CMP_LT: return v < value;
    case HIXL_CMP_LE: return v <= value;
  }
  return false;
}

}  // namespace

Status CheckCmp(int cmp) {
  if (cmp < HIXL_CMP_EQ || cmp > HIXL_CMP_LE) {
    return Err(Errc::kInvalidArg, "comparison {} is not one of HIXL_CMP_EQ..HIXL_CMP_LE", cmp);
  }
  return Status::Ok();
}

Result<bool> TestSignal(const uint64_t* sig, int cmp, uint64_t value) {
  if (!sig) return Err(Errc::kInvalidArg, "the signal address is NULL");
  if (reinterpret_cast<uintptr_t>(sig) % 8 != 0) {
    return Err(Errc::kInvalidArg, "the signal word at {} is not 8-byte aligned", static_cast<const void*>(sig));
  }
  HIXL_RETURN_IF_ERROR(CheckCmp(cmp));
  return Compare(std::atomic_ref<const uint64_t>(*sig).load(std::memory_order_acquire), cmp, value);
}

Status WorldImpl::WaitUntil(const uint64_t* sig, int cmp, uint64_t value, int64_t timeout_ms) const {
  HIXL_ASSIGN_OR_RETURN(bool done, TestSignal(sig, cmp, value));
  if (done) return Status::Ok();
  const int64_t limit = timeout_ms < 0 ? cfg_.timeout_ms : timeout_ms;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit);
  std::atomic_ref<const uint64_t> word(*sig);
  // Spin briefly: a signal that is about to arrive costs no system call.
  // Meanwhile serve the transports' incoming messages here (UCX): the
  // signal's message is then handled without waking the progress thread.
  for (int i = 0; i < 2000; ++i) {
    if (Compare(word.load(std::memory_order_acquire), cmp, value)) return Status::Ok();
    if (i % 16 == 0) {
      session_->PollTransports();
    } else {
      __builtin_ia32_pause();
    }
  }
  auto next_probe = std::chrono::steady_clock::now() + kProbeEvery;
  // Then sleep.  Writers wake the low half of the word (see WakeWaiters);
  // the sleep is also cut into slices, so a change that only touches the
  // high half is seen within a slice even if its wake-up raced ahead of us.
  while (true) {
    const uint64_t v = word.load(std::memory_order_acquire);
    if (Compare(v, cmp, value)) return Status::Ok();
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return Err(Errc::kTimeout, "hixl_wait_until: the word at {} is {} and did not become {} {} within {} ms",
                 static_cast<const void*>(sig), v,
                 std::array{"==", "!=", ">", ">=", "<", "<="}[static_cast<size_t>(cmp)], value, limit);
    }
    if (now >= next_probe) {
      // A peer that was to write the word may have died.
      HIXL_RETURN_IF_ERROR(DeadPeer("hixl_wait_until"));
      next_probe = now + kProbeEvery;
    }
    auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count();
    timespec ts{0, static_cast<long>(std::min<int64_t>(left, 10'000'000))};
    ::syscall(SYS_futex, const_cast<uint64_t*>(sig), FUTEX_WAIT, static_cast<uint32_t>(v), &ts, nullptr, 0);
  }
}

Status WorldImpl::Atomic(const char* api, int rank, uint64_t addr, transport::AtomicOp op, uint64_t operand,
                         uint64_t compare, uint64_t* old) {
  static uint64_t dummy;
  HIXL_RETURN_IF_ERROR(CheckRemote(api, rank, addr, &dummy, sizeof(uint64_t)));
  if (addr % 8 != 0) return Err(Errc::kInvalidArg, "{}: the remote word at {:#x} is not 8-byte aligned", api, addr);
  PeerTable::Pin pin;
  HIXL_ASSIGN_OR_RETURN(const PeerTable::Entry* e, Lookup(api, rank, addr, sizeof(uint64_t), &pin));
  uint64_t seen = 0;
  Status s = peer(rank).transport().Atomic(rank, *e->key, op, addr, operand, compare, &seen);
  if (!s.ok()) return Err(s.code(), "{}: {}", api, s.message());
  if (old) *old = seen;
  return Status::Ok();
}

Status WorldImpl::PutSignal(int dst_rank, const void* src, uint64_t dst_addr, size_t size, uint64_t sig_addr,
                            uint64_t value, int op, int lane) {
  if (op != HIXL_SIGNAL_SET && op != HIXL_SIGNAL_ADD) {
    return Err(Errc::kInvalidArg, "hixl_put_signal: op {} is neither HIXL_SIGNAL_SET nor HIXL_SIGNAL_ADD", op);
  }
  // Check the signal word before writing any data, so a bad signal writes nothing.
  static uint64_t dummy;
  HIXL_RETURN_IF_ERROR(CheckRemote("hixl_put_signal", dst_rank, sig_addr, &dummy, sizeof(uint64_t)));
  if (sig_addr % 8 != 0) {
    return Err(Errc::kInvalidArg, "hixl_put_signal: the signal word at {:#x} is not 8-byte aligned", sig_addr);
  }
  // One pin holds both entries until the atomic has returned.
  PeerTable::Pin pin;
  HIXL_ASSIGN_OR_RETURN(const PeerTable::Entry* sig, Lookup("hixl_put_signal", dst_rank, sig_addr, 8, &pin));
  const transport::RemoteKey* data_key = nullptr;
  if (size > 0) {
    HIXL_RETURN_IF_ERROR(CheckRemote("hixl_put_signal", dst_rank, dst_addr, src, size));
    const PeerTable::Entry* e = peer(dst_rank).table().Find(dst_addr, size);
    if (!e) {
      // The refresh runs with no pin held; then the signal word is looked up again under the new pin.
      HIXL_ASSIGN_OR_RETURN(e, Lookup("hixl_put_signal", dst_rank, dst_addr, size, &pin));
      sig = peer(dst_rank).table().Find(sig_addr, 8);
      if (!sig) return NotRegistered("hixl_put_signal", dst_rank, sig_addr, 8);
    }
    data_key = e->key.get();
  }
  // The transport orders the signal after the data and wakes the target's waiters.
  auto aop = op == HIXL_SIGNAL_SET ? transport::AtomicOp::kSet : transport::AtomicOp::kAdd;
  transport::Transport& t = peer(dst_rank).transport();
  Status s = lane == 0 ? t.PutSignal(dst_rank, data_key, src, dst_addr, size, *sig->key, sig_addr, aop, value)
                       : t.PutSignalOn(lane, dst_rank, data_key, src, dst_addr, size, *sig->key, sig_addr, aop, value);
  if (!s.ok()) return Err(s.code(), "hixl_put_signal: {}", s.message());
  return Status::Ok();
}

Status WorldImpl::EnqueueNotification(int from, std::string data) {
  size_t waiting = 0;
  if (!notifications_.Push(Notification{from, std::move(data)}, &waiting)) {
    return Err(Errc::kQueueFull,
               "rank {}'s notification queue is full ({} messages, HIXL_NOTIFY_QUEUE_DEPTH): it has not taken "
               "them yet; retry later",
               rank(), waiting);
  }
  return Status::Ok();
}

Status WorldImpl::Notify(int dst_rank, const void* bytes, size_t len) {
  if (dst_rank < 0 || dst_rank >= size()) {
    return Err(Errc::kInvalidRank, "hixl_notify: rank {} is outside the world [0, {})", dst_rank, size());
  }
  if (len > HIXL_NOTIFY_MAX_BYTES) {
    return Err(Errc::kInvalidArg, "hixl_notify: {} bytes is more than HIXL_NOTIFY_MAX_BYTES ({})", len,
               HIXL_NOTIFY_MAX_BYTES);
  }
  if (!bytes && len > 0) return Err(Errc::kInvalidArg, "hixl_notify: bytes is NULL");
  // Every put issued to the target before the notification is complete
  // before it is sent; transfers to other ranks may stay in flight (and a
  // rank that died meanwhile fails the calls to it, not this one).
  std::string data(static_cast<const char*>(bytes), len);
  if (dst_rank == rank()) {
    HIXL_RETURN_IF_ERROR(Fence());
    return EnqueueNotification(rank(), std::move(data));
  }
  HIXL_RETURN_IF_ERROR(Fence(dst_rank));
  auto r = peer(dst_rank).Call(ControlMsg::kNotify, data, cfg_.timeout_ms);
  if (!r.ok()) return Err(r.status().code(), "hixl_notify to rank {}: {}", dst_rank, r.status().message());
  return Status::Ok();
}

Status WorldImpl::TakeNotifications(size_t max, bool wait, int64_t timeout_ms, std::vector<Notification>* out) {
  const int64_t limit = timeout_ms < 0 ? cfg_.timeout_ms : timeout_ms;
  if (!wait || size() == 1) {
    if (notifications_.Take(max, wait, limit, out) != NotifyQueue<Notification>::Taken::kTaken) {
      return Err(Errc::kTimeout, "hixl_wait_notification: no notification arrived within {} ms", limit);
    }
    return Status::Ok();
  }
  // Wait in slices (a push wakes the wait at once), asking between them
  // whether a peer has died, so that a wait for a notification that a dead
  // peer would have sent ends with kPeerFailed rather than the timeout.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit);
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    const int64_t slice = std::clamp<int64_t>(left, 0, kProbeEvery.count());
    if (notifications_.Take(max, true, slice, out) == NotifyQueue<Notification>::Taken::kTaken) return Status::Ok();
    if (left <= slice) {
      return Err(Errc::kTimeout, "hixl_wait_notification: no notification arrived within {} ms", limit);
    }
    HIXL_RETURN_IF_ERROR(DeadPeer("hixl_wait_notification"));
  }
}

Status WorldImpl::DeadPeer(const char* api, std::chrono::milliseconds wait) const {
  if (size() == 1) return Status::Ok();
  // The store fails a wait that would block once it knows a rank died (and
  // a parked one as soon as it learns); a wait of 0 ms on a key nobody sets
  // only asks.
  Status s = store_->WaitAtLeast(bootstrap::kDeathNewsKey, 1, wait.count());
  if (s.code() != Errc::kPeerFailed) return Status::Ok();
  return Err(Errc::kPeerFailed, "{}: {}", api, s.message());
}

std::chrono::milliseconds WorldImpl::DeathNews() const {
  return std::min(kDeathNews, std::chrono::milliseconds(std::max<int64_t>(cfg_.timeout_ms, 0)));
}

}  // namespace hixl::world

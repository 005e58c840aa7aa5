#include "world/barrier.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "transport/transport.h"

namespace hixl::world {

namespace {

int64_t Us(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

void Relax(bool yield) {
  if (yield) {
    ::sched_yield();
  } else {
    __builtin_ia32_pause();
  }
}

}  // namespace

DisseminationBarrier::DisseminationBarrier(const Options& options, uint64_t* flags, Signal signal, Probe probe,
                                           Wakes wakes)
    : opt_(options),
      flags_(flags),
      signal_(std::move(signal)),
      probe_(std::move(probe)),
      wakes_(std::move(wakes)),
      spin_us_(std::max<int64_t>(0, options.spin_ceiling_us)) {}

void DisseminationBarrier::SignalMapped(uint64_t* peer_block, size_t round, uint64_t epoch) {
  uint64_t* const flag = peer_block + FlagOffset(round) / sizeof(uint64_t);
  // Sequentially consistent on both sides (Wait: the sleep word's store,
  // then the flag's load): either the waiter sees the epoch before it
  // sleeps, or this sees that it sleeps (or is about to: the futex wait
  // returns at once when the flag no longer holds what the waiter read).
  std::atomic_ref<uint64_t>(*flag).store(epoch, std::memory_order_seq_cst);
  if (std::atomic_ref<uint64_t>(peer_block[SleepOffset(round) / sizeof(uint64_t)]).load(std::memory_order_seq_cst) !=
      0) {
    transport::WakeWaiters(flag);
  }
}

size_t DisseminationBarrier::Rounds(int n) {
  size_t k = 0;
  while (k < kMaxRounds && (uint64_t{1} << k) < static_cast<uint64_t>(std::max(n, 1))) ++k;
  return k;
}

Status DisseminationBarrier::Run(const BeforeSignal& before_signal) {
  std::lock_guard lock(mu_);
  const int n = opt_.size;
  if (n <= 1) return Status::Ok();
  const uint64_t epoch = ++epoch_;
  const auto deadline = Clock::now() + std::chrono::milliseconds(opt_.timeout_ms);
  const size_t rounds = Rounds(n);
  for (size_t k = 0; k < rounds; ++k) {
    const int dist = static_cast<int>((uint64_t{1} << k) % static_cast<uint64_t>(n));
    const int to = (opt_.rank + dist) % n;
    const int from = (opt_.rank - dist + n) % n;
    if (before_signal) HIXL_RETURN_IF_ERROR(before_signal(k, to));
    Status s = signal_(to, k, epoch);
    if (!s.ok()) {
      // A peer that died is the cause worth naming, whichever it is; where
      // this one is gone, the store may not have heard yet (Options).
      const auto wait =
          s.code() == Errc::kPeerFailed
              ? std::min(opt_.death_news, std::chrono::milliseconds(std::max<int64_t>(opt_.timeout_ms, 0)))
              : std::chrono::milliseconds(0);
      HIXL_RETURN_IF_ERROR(ProbeFor(nullptr, wait));
      return Err(s.code(), "hixl_barrier: rank {} cannot signal rank {} (round {} of {}): {}", opt_.rank, to, k + 1,
                 rounds, s.message());
    }
    HIXL_RETURN_IF_ERROR(Wait(k, from, epoch, deadline));
  }
  return Status::Ok();
}

Status DisseminationBarrier::Await(const char* api, size_t line, int from, uint64_t epoch) {
  std::lock_guard lock(mu_);  // the spin's adaptation is the barrier's
  return Wait(line, from, epoch, Clock::now() + std::chrono::milliseconds(opt_.timeout_ms), api);
}

Status DisseminationBarrier::Wait(size_t round, int from, uint64_t epoch, Clock::time_point deadline, const char* api) {
  uint64_t* const raw = flags_ + FlagOffset(round) / sizeof(uint64_t);
  std::atomic_ref<uint64_t> word(*raw);
  if (word.load(std::memory_order_acquire) >= epoch) return Status::Ok();
  const auto start = Clock::now();
  // Spin: a signal that comes within the spin costs no system call on
  // either side's path to it (the sender's futex wake finds no sleeper).
  // It spins with `pause` only briefly (pause_us_), then with sched_yield:
  // a peer we have just woken is queued on our CPU (the kernel wakes it
  // where its waker runs), and a `pause` spin would keep it from running
  // until the spin ends -- which costs the whole spin per barrier on a busy
  // machine, or the pause part of it while both ranks share one CPU.
  if (spin_us_ > 0) {
    const auto until = start + std::chrono::microseconds(spin_us_);
    const auto pause_until = start + std::chrono::microseconds(opt_.yield ? 0 : pause_us_);
    bool yield = opt_.yield || pause_us_ == 0;
    for (unsigned i = 1;; ++i) {
      if (word.load(std::memory_order_acquire) >= epoch) {
        Adapt(Clock::now() - start, false, yield && pause_us_ > 0);
        if (yield && opt_.waited_long) opt_.waited_long();
        return Status::Ok();
      }
      Relax(yield);
      if (yield || i % 16 == 0) {
        if (opt_.poll) opt_.poll();
        const auto now = Clock::now();
        if (now >= until) break;
        yield = now >= pause_until;
      }
    }
  }
  // Sleep on the word's futex (the low half: the epoch's low 32 bits change
  // with every barrier), asking now and then whether a peer has died.
  // One poll first, also when there was no spin: a transport whose progress
  // thread stood aside for this thread's own calls serves the network again
  // (UCX), since the signal comes through it.
  if (opt_.poll) opt_.poll();
  // The sleep word first (SignalMapped's other half), cleared on the way out.
  const bool wakes = wakes_(from);
  std::atomic_ref<uint64_t> sleeping(flags_[SleepOffset(round) / sizeof(uint64_t)]);
  sleeping.store(1, std::memory_order_seq_cst);
  struct Awake {
    std::atomic_ref<uint64_t>& s;
    ~Awake() { s.store(0, std::memory_order_relaxed); }
  } awake{sleeping};
  auto next_probe = Clock::now() + opt_.probe_every;
  while (true) {
    const uint64_t v = word.load(std::memory_order_seq_cst);
    if (v >= epoch) {
      Adapt(Clock::now() - start, true, pause_us_ > 0);
      if (opt_.waited_long) opt_.waited_long();
      return Status::Ok();
    }
    auto now = Clock::now();
    if (now >= deadline && api != nullptr) {
      return Err(Errc::kTimeout,
                 "{}: rank {} waited {} ms in vain for the signal of rank {} (its flag shows {}, not yet {}) "
                 "(HIXL_TIMEOUT_MS={})",
                 api, opt_.rank, Us(now - start) / 1000, from, v, epoch, opt_.timeout_ms);
    }
    if (now >= deadline) {
      return Err(Errc::kTimeout,
                 "hixl_barrier: rank {} waited {} ms in vain for the signal of rank {} (round {}, barrier {}; its "
                 "flag shows barrier {}) (HIXL_TIMEOUT_MS={})",
                 opt_.rank, Us(now - start) / 1000, from, round + 1, epoch, v, opt_.timeout_ms);
    }
    if (now >= next_probe) {
      HIXL_RETURN_IF_ERROR(ProbeFor(api));
      now = Clock::now();
      next_probe = now + opt_.probe_every;
    }
    auto until = std::min(next_probe, deadline);
    if (!wakes) until = std::min<Clock::time_point>(until, now + opt_.poll_slice);
    const int64_t ns =
        std::max<int64_t>(1000, std::chrono::duration_cast<std::chrono::nanoseconds>(until - now).count());
    timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    ::syscall(SYS_futex, raw, FUTEX_WAIT, static_cast<uint32_t>(v), &ts, nullptr, 0);
  }
}

void DisseminationBarrier::Adapt(Clock::duration waited, bool slept, bool past_pause) {
  // The pause part: dropped after a wait that outlasted it (the peer we
  // wait for may share our CPU), tried again every kPauseRetry waits (the
  // kernel may have moved it since).
  if (past_pause) {
    pause_us_ = 0;
    waits_without_pause_ = 0;
  } else if (pause_us_ == 0 && ++waits_without_pause_ >= kPauseRetry) {
    pause_us_ = kPauseUs;
  }
  const int64_t ceiling = std::max<int64_t>(0, opt_.spin_ceiling_us);
  const int64_t floor = std::min(kSpinFloorUs, ceiling);
  const int64_t w = Us(waited);
  int64_t next;
  if (slept) {
    // The signal came after the spin: spin longer next time, past the
    // sleeper's wake-up, or both sides of a pair keep sleeping.
    next = std::max(spin_us_ * 2, w * 2);
  } else {
    // Came within the spin: shrink slowly towards what was needed.
    next = std::max(w * 4, spin_us_ - spin_us_ / 8);
  }
  spin_us_ = std::clamp(next, floor, ceiling);
}

}  // namespace hixl::world

// The world's barrier on the data plane: a dissemination barrier over flag
// words in a small symmetric block, set by the transports' remote atomics.
//
// ceil(log2 n) rounds; in round k rank r signals rank (r + 2^k) mod n and
// waits for the signal of rank (r - 2^k) mod n.  Each round has its own flag
// word (a cache line each) in the block, written by exactly one peer, which
// stores the barrier's epoch there: epochs only grow, so no flag is ever
// reset, and a flag that already shows a later epoch (its sender has passed
// this barrier and entered the next) satisfies the wait too.
//
// The waiter spins (adaptively: see Barrier::Wait), then sleeps on the flag
// word's futex; transports that wake futex sleepers (Capabilities::
// wakes_waiters) end the sleep at once, others are polled in short slices.
// The line's second word says whether its waiter is asleep (or about to
// be): a signaller that stores into the peer's block itself (SignalMapped)
// makes the futex wake system call only then, so a barrier whose signals
// come within the spin costs no system call on either side.
// While it sleeps it asks, every probe interval, whether a peer has died, so
// a dead peer ends the barrier with kPeerFailed naming it rather than the
// timeout.
//
// The block's layout and the algorithm know nothing of ranks' transports or
// the store: the world hands in how to signal a peer, how to probe for dead
// peers and whether a peer's signal wakes a sleeper (barrier.cc; unit-tested
// with threads, tests/unit/barrier_test.cc).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

#include "base/status.h"

namespace hixl::world {

class DisseminationBarrier {
 public:
  // The flag block: one 64-byte line per round; 64 rounds cover any int n.
  static constexpr size_t kLine = 64;
  static constexpr size_t kMaxRounds = 64;
  static constexpr size_t kBlockBytes = kLine * kMaxRounds;  // 4 KiB
  // A barrier of an int n takes at most 31 rounds: the lines from 32 on
  // serve the world's broadcast, one per slot of its ring (Await).
  static constexpr size_t kRingLine = 32;
  static constexpr size_t kRingSlots = 16;
  static_assert(kRingLine + kRingSlots <= kMaxRounds, "the ring's lines lie in the block");
  // The spin never falls below this (unless the ceiling does): a shorter
  // one lets both sides of a pair fall asleep for good (docs/perf.md).
  static constexpr int64_t kSpinFloorUs = 50;
  // The first part of the spin polls with `pause`, the rest with sched_yield.
  static constexpr int64_t kPauseUs = 20;

  struct Options {
    int rank = 0;
    int size = 1;
    // HIXL_BARRIER_SPIN_US: the most a wait spins before it sleeps (0:
    // sleep at once).
    int64_t spin_ceiling_us = 1000;
    // More ranks on this host than CPUs: spin with sched_yield, not pause,
    // so that the rank we wait for gets the CPU.
    bool yield = false;
    int64_t timeout_ms = 60000;  // bound on one barrier
    std::chrono::milliseconds probe_every{50};
    // A signal that failed because its peer is gone waits up to this long
    // for the store to hear of a death (capped by timeout_ms): the peer may
    // have left because another rank died, and the store, which names the
    // rank that died, may hear of it after this rank's transport did.
    std::chrono::milliseconds death_news{1000};
    // Sleep slice for a peer whose signal does not wake us.
    std::chrono::microseconds poll_slice{100};
    // Called now and then while the wait spins (may be empty): serves the
    // transports' incoming messages on the waiting thread (Transport::Poll).
    std::function<void()> poll;
    // Called after a wait that outlasted the `pause` part of its spin or
    // slept (may be empty): the world moves the thread back to its own CPU.
    std::function<void()> waited_long;
  };
  // Sets the flag word of `round` at `peer` to `epoch` (the word at
  // FlagOffset(round) of the peer's block), complete when it returns.
  using Signal = std::function<Status(int peer, size_t round, uint64_t epoch)>;
  // Ok, or kPeerFailed naming a dead peer; the error starts with `api`.
  // `wait`: how long to wait for news of a death (0: ask only).
  using Probe = std::function<Status(const char* api, std::chrono::milliseconds wait)>;
  // Whether `peer`'s Signal wakes a futex sleeper on our flag word.
  using Wakes = std::function<bool(int peer)>;

  // flags: this rank's block (kBlockBytes, zeroed, 64-byte aligned), which
  // peers' Signal writes.  It must outlive this object.
  DisseminationBarrier(const Options& options, uint64_t* flags, Signal signal, Probe probe, Wakes wakes);

  // One barrier.  Collective over the world; calls from several threads of
  // one rank are serialised (each is one barrier).  Errors start "hixl_barrier".
  // `before_signal`, when given, runs in each round before this rank
  // signals its partner `to` (after the previous round's wait): what it
  // puts to `to` is there when `to` sees the signal (a dissemination
  // allgather); its error ends the barrier.
  using BeforeSignal = std::function<Status(size_t round, int to)>;
  Status Run(const BeforeSignal& before_signal = nullptr);

  // Another collective's flag in the same block (its sender stores into it
  // as SignalMapped does, or through a transport's put with signal): waits
  // until this rank's flag of `line` reaches `epoch`, set by `from`,
  // spinning and sleeping as a barrier round does, bounded by the timeout
  // and ended by a dead peer.  Errors start with `api`.
  Status Await(const char* api, size_t line, int from, uint64_t epoch);

  static size_t Rounds(int n);
  static constexpr uint64_t FlagOffset(size_t round) { return round * kLine; }
  // The word of round's line that is non-zero while its waiter sleeps.
  static constexpr uint64_t SleepOffset(size_t round) { return round * kLine + sizeof(uint64_t); }
  // A Signal for a peer whose block is mapped here at `peer_block`: stores
  // epoch into round's flag, then wakes the peer's waiter only if it sleeps.
  // Everything this thread wrote before is seen by whoever sees the epoch.
  static void SignalMapped(uint64_t* peer_block, size_t round, uint64_t epoch);
  // The spin the next wait starts with, in microseconds (for tests).
  int64_t spin_us() const { return spin_us_; }

 private:
  using Clock = std::chrono::steady_clock;
  // api: nullptr for a barrier round (its messages name the round).
  Status Wait(size_t round, int from, uint64_t epoch, Clock::time_point deadline, const char* api = nullptr);
  // The probe, its errors starting with api (the barrier's name when null).
  Status ProbeFor(const char* api, std::chrono::milliseconds wait = {}) const {
    return probe_(api != nullptr ? api : "hixl_barrier", wait);
  }
  // After a wait of `waited` (that slept or not; that outlasted the pause
  // part of the spin or not): the next spin.
  void Adapt(Clock::duration waited, bool slept, bool past_pause);
  static constexpr int kPauseRetry = 64;

  const Options opt_;
  uint64_t* const flags_;
  const Signal signal_;
  const Probe probe_;
  const Wakes wakes_;
  std::mutex mu_;  // one barrier at a time
  uint64_t epoch_ = 0;
  int64_t spin_us_;
  int64_t pause_us_ = kPauseUs;
  int waits_without_pause_ = 0;
};

}  // namespace hixl::world

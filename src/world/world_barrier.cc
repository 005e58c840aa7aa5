// The world's barriers: the data-plane one that hixl_barrier runs
// (world/barrier.h: flags in the first symmetric block, set by the
// transports' remote atomics), and the one through rank 0's store that init
// and finalize run.
#include <sched.h>

#include <thread>

#include "world/world.h"

namespace hixl::world {

Status WorldImpl::AllocBarrierBlock() {
  auto block = Alloc(kBarrierBlockBytes);
  if (!block.ok()) {
    return Err(block.status().code(), "cannot allocate the barrier's flag block and the collectives' scratch: {}",
               block.status().message());
  }
  barrier_block_ = block.value();
  return Status::Ok();
}

void WorldImpl::StartBarrier() {
  // Every transport built in has remote atomics (a rank signalling over
  // one without would fail the barrier with kUnsupported, naming it).
  if (size() == 1) return;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const bool have_mask = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0;
  int ncpu = have_mask ? CPU_COUNT(&cpus) : 0;
  if (ncpu <= 0) ncpu = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (have_mask && host_ranks_ > 1 && host_ranks_ <= ncpu) Spread(cpus);
  DisseminationBarrier::Options o;
  // A wait that outlasted its `pause` spin or slept: where the peer's
  // wake-up (or ours) put this thread on another rank's CPU, back home.
  if (home_cpu_ >= 0) o.waited_long = [this] { ReturnHome(); };
  o.rank = rank();
  o.size = size();
  o.spin_ceiling_us = cfg_.barrier_spin_us;
  o.yield = host_ranks_ > ncpu;
  o.timeout_ms = cfg_.timeout_ms;
  o.death_news = DeathNews();
  o.poll = [this] { (void)session_->PollTransports(); };
  barrier_ = std::make_unique<DisseminationBarrier>(
      o, static_cast<uint64_t*>(barrier_block_),
      [this](int to, size_t round, uint64_t epoch) { return SignalBarrier(to, round, epoch); },
      [this](const char* api, std::chrono::milliseconds wait) { return DeadPeer(api, wait); },
      [this](int from) { return peer(from).transport().caps().wakes_waiters; });
}

void WorldImpl::Spread(const cpu_set_t& allowed) {
  // No more ranks here than CPUs we may use: this thread moves to a CPU of
  // its own (the host_index_-th allowed one), then gets its whole mask back,
  // so nothing stays bound.  Ranks that start on one CPU (a launcher's
  // children start where it runs) and wait for each other in futexes stay
  // there for the first milliseconds: the load balancer leaves a pair that
  // looks cache-hot alone, and every barrier is then a switch between them
  // (4 us against 0.2 us at 2 ranks; docs/scale.md).  A rank pinned to
  // fewer CPUs than there are ranks (its own choice) is left alone above.
  //
  // The rank stays apart only while nothing moves it: a futex wake puts
  // the woken rank on its waker's CPU where the kernel thinks the woken
  // one's is busy (on a virtual machine an idle virtual CPU looks busy), so
  // the first barrier after init could bring the pair together again.
  // Each barrier wait that outlasts its `pause` spin or sleeps therefore
  // comes back here (ReturnHome).
  int k = host_index_;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || k-- > 0) continue;
    home_cpu_ = cpu;
    ReturnHome();
    return;
  }
}

void WorldImpl::ReturnHome() const {
  if (home_cpu_ < 0 || ::sched_getcpu() == home_cpu_) return;
  // The mask as it is now (the program may have changed it since init),
  // given back after the move; a home outside it is left alone.
  cpu_set_t now;
  CPU_ZERO(&now);
  if (::sched_getaffinity(0, sizeof now, &now) != 0 || !CPU_ISSET(home_cpu_, &now)) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(home_cpu_, &one);
  if (::sched_setaffinity(0, sizeof one, &one) == 0) (void)::sched_setaffinity(0, sizeof now, &now);
}

Result<const PeerTable::Entry*> WorldImpl::PeerBlock(const char* api, int to, PeerTable::Pin* pin, char** mapped) {
  const auto block = reinterpret_cast<uint64_t>(barrier_block_);
  HIXL_ASSIGN_OR_RETURN(const PeerTable::Entry* e, Lookup(api, to, block, kBarrierBlockBytes, pin));
  *mapped = static_cast<char*>(e->key->Direct(block));
  return e;
}

Status WorldImpl::SignalBarrier(int to, size_t round, uint64_t epoch) {
  const uint64_t addr = reinterpret_cast<uint64_t>(barrier_block_) + DisseminationBarrier::FlagOffset(round);
  PeerTable::Pin pin;
  char* mapped = nullptr;
  HIXL_ASSIGN_OR_RETURN(const PeerTable::Entry* e, PeerBlock("hixl_barrier", to, &pin, &mapped));
  // Where the peer's block is mapped here (the shm transport's heap), the
  // store is ours, and so is the choice to skip the futex wake when no one
  // sleeps.  Every put to the peer before it is done: the fence before the
  // barrier completed them all, and the allgather's (before_signal) went
  // into the same mapping.
  if (mapped) {
    DisseminationBarrier::SignalMapped(reinterpret_cast<uint64_t*>(mapped), round, epoch);
    return Status::Ok();
  }
  uint64_t old = 0;
  // Ordered after every put this rank issued to the peer (and the fence
  // before the barrier completed them all).
  return peer(to).transport().Atomic(to, *e->key, transport::AtomicOp::kSet, addr, epoch, 0, &old);
}

Status WorldImpl::Barrier() {
  if (!barrier_) return StoreBarrier();
  HIXL_RETURN_IF_ERROR(Fence());
  return barrier_->Run();
}

Status WorldImpl::StoreBarrier() {
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

}  // namespace hixl::world

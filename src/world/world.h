// The world: this process's rank, its store connection, its symmetric heap,
// and its session (core/session.h: its side of the process's node, whose
// transports and control thread it shares with the process's engines; its
// memory, control listener, one PeerSession per rank, rank r being the
// transports' peer id r).  There is at most
// one per process (see Current()); the public C and C++ APIs are thin layers
// over it.
#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "bootstrap/env.h"
#include "bootstrap/store.h"
#include "core/notify_queue.h"
#include "core/registry.h"
#include "core/session.h"
#include "transport/transport.h"
#include "world/barrier.h"
#include "world/heap.h"

namespace hixl::world {

// The core's session layer, which the world is a front door over.
using core::NotifyQueue;
using core::PeerSession;
using core::Session;

class WorldImpl final : private Session::Delegate {
 public:
  // Joins the world the environment describes.  Collective.
  static Result<std::unique_ptr<WorldImpl>> Create(const bootstrap::Config& config);
  ~WorldImpl() override;

  int rank() const { return cfg_.rank; }
  int size() const { return cfg_.world_size; }
  int64_t timeout_ms() const { return cfg_.timeout_ms; }

  Result<void*> Alloc(size_t size);
  Status Free(void* ptr);
  Status Register(void* addr, size_t size);
  Status Deregister(void* addr);

  // On `lane` (transport.h; 0: the default lane, hixl_put's): the
  // OpenSHMEM door gives each context a lane of its own (OpenLane), so that
  // a context's quiet (FenceLane) completes its transfers and not others'.
  Status Put(int dst_rank, const void* src, uint64_t dst_addr, size_t size, int lane = 0);
  Status Get(int src_rank, uint64_t src_addr, void* dst, size_t size, int lane = 0);
  int OpenLane() { return session_->AllocateLane(); }
  // Completes the lane's transfers (bounded; errors dropped: FenceLane
  // first to see them) and frees it.
  void CloseLane(int lane) { session_->FreeLane(lane); }
  Status Fence();
  // Completes this process's transfers to or from `rank` only, on every
  // lane (those to other ranks may stay in flight); errors name the rank.
  Status Fence(int rank);
  // The same for the transfers of one lane to or from `rank`.
  Status FenceLane(int rank, int lane);
  // Completes this process's transfers over the transport that serves
  // `rank`, to every peer it serves (cheaper than Fence(rank) for a
  // transport whose transfers complete in the call, shm, where only relayed
  // puts and peers' liveness are left to check).
  Status FenceTransport(int rank);
  // Where rank's registered bytes [addr, addr+size) are mapped in this
  // process (null where they are not, such as another host's); an error
  // when rank has no region holding them.  Valid until rank frees or
  // deregisters the region.
  Result<void*> Direct(int rank, uint64_t addr, size_t size);
  // On the data plane (world_barrier.cc, world/barrier.h); implies Fence.
  Status Barrier();
  // Small collectives (world_collectives.cc): on the data plane, through the
  // scratch area after the barrier's flags, once the barrier runs there.
  Status Allgather(const void* send, void* recv, size_t bytes_per_rank);
  Status Broadcast(int root, void* buf, size_t bytes);

  // Signals, atomics, notifications (world_signal.cc).
  Status PutSignal(int dst_rank, const void* src, uint64_t dst_addr, size_t size, uint64_t sig_addr, uint64_t value,
                   int op, int lane = 0);
  Status WaitUntil(const uint64_t* sig, int cmp, uint64_t value, int64_t timeout_ms) const;
  Status Atomic(const char* api, int rank, uint64_t addr, transport::AtomicOp op, uint64_t operand, uint64_t compare,
                uint64_t* old);
  Status Notify(int dst_rank, const void* bytes, size_t len);
  // Takes up to max queued notifications (or waits up to timeout_ms for one
  // when wait is set and the queue is empty).
  Status TakeNotifications(size_t max, bool wait, int64_t timeout_ms, std::vector<Notification>* out);
  // kPeerFailed naming the rank when the store knows a rank has died (as
  // barrier learns it), else Ok; one store round trip.  Waits for a peer's
  // signal or notification ask it between slices of their sleep.  With a
  // `wait`, it waits that long for the store to hear of a death (returning
  // as soon as it has): for a call that failed because its peer is gone.
  Status DeadPeer(const char* api, std::chrono::milliseconds wait = {}) const;
  // How long a call that failed because its peer is gone waits for the
  // store to name a rank that died (it may have heard after our transport).
  std::chrono::milliseconds DeathNews() const;

  // Collective; leaves the world.  The object is unusable afterwards.
  Status Finalize();

  // Which transport serves a peer ("shm", "ucx"), for tests and tools.
  std::string_view TransportFor(int peer) const;

 private:
  explicit WorldImpl(const bootstrap::Config& config);
  Status Start();
  Status PlaceHeap();
  Status ConnectPeers();
  // Rank r's table board, if it published one on this host (core/table_board.h).
  void AttachBoard(int r, const core::PublishedAddresses& addresses);
  Result<std::unique_ptr<bootstrap::TcpStoreServer>> HostStore();
  // The barrier (world_barrier.cc): its flag block, the first symmetric
  // block of every rank; the barrier through rank 0's store, for init and
  // finalize; one signal of the data-plane barrier.
  Status AllocBarrierBlock();
  void StartBarrier();
  // Picks this rank's CPU among `allowed` (home_cpu_, by host_index_) and
  // moves this thread there, giving it back its whole mask (ReturnHome):
  // see world_barrier.cc.
  void Spread(const cpu_set_t& allowed);
  void ReturnHome() const;
  Status StoreBarrier();
  Status SignalBarrier(int to, size_t round, uint64_t epoch);
  // Rank `to`'s whole barrier block (flags, scratch, ring), held by *pin;
  // *mapped: where it is mapped here, else nullptr.
  Result<const PeerTable::Entry*> PeerBlock(const char* api, int to, PeerTable::Pin* pin, char** mapped);
  // The collectives' scratch (world_collectives.cc): two halves after the
  // barrier's flags, used in turn, one per round.
  static constexpr size_t kScratchHalf = size_t{64} << 10;
  char* ScratchHalf(uint64_t round) const;
  // The broadcast's ring (world_collectives.cc), after the scratch: a line
  // whose first word counts the chunks this rank has taken, then
  // DisseminationBarrier::kRingSlots slots of kRingSlotBytes, each flagged
  // by its own line of the barrier's block.
  static constexpr size_t kRingSlotBytes = size_t{16} << 10;
  static constexpr size_t kRingBytes = DisseminationBarrier::kLine + DisseminationBarrier::kRingSlots * kRingSlotBytes;
  char* Ring() const;
  // The first symmetric block: the barrier's flags, the scratch, the ring.
  static constexpr size_t kBarrierBlockBytes = DisseminationBarrier::kBlockBytes + 2 * kScratchHalf + kRingBytes;
  // How much of the heap after the barrier's block (the first blocks from
  // hixl_alloc) has its page tables made for every peer of this host at
  // init: 16 pages, about 10 us per peer (docs/scale.md, "First touch").
  static constexpr size_t kWarmBlockBytes = size_t{64} << 10;
  // Waits until `to` has taken chunk `seq` - kRingSlots (its slot is free
  // again), asking it only when what it said last is not enough.
  Status AwaitRingRoom(int to, uint64_t seq);
  // Puts the n bytes of our `slot` into the same slot of rank `to` and sets
  // its flag of ring line `line` to epoch, after the bytes; true when that
  // was a copy into its mapped block (nothing left for a fence to do).
  Result<bool> RingSend(int to, const char* slot, size_t n, size_t line, uint64_t epoch);
  // The word at `addr` of rank `r`: a load where its memory is mapped here,
  // else the transport's atomic fetch.
  Result<uint64_t> FetchWord(const char* api, int r, uint64_t addr);
  // Allgather through rank 0's store: during init, and for data too large
  // for the scratch.
  Status StoreAllgather(const void* send, void* recv, size_t bytes_per_rank);

  Status CheckRemote(const char* op, int peer, uint64_t addr, const void* local, size_t size) const;
  // CheckRemote's tests in one, for the hot path (CheckRemote says which
  // failed).
  bool RemoteOk(int peer, uint64_t addr, const void* local, size_t size) const {
    const auto l = reinterpret_cast<uintptr_t>(local);
    return peer >= 0 && peer < cfg_.world_size && local != nullptr && addr != 0 && addr + size >= addr && l + size >= l;
  }
  // The entry holding the range, held by *pin until the caller's transport
  // call has returned (a deregistration waits for it).
  Result<const PeerTable::Entry*> Lookup(const char* op, int peer, uint64_t addr, size_t size, PeerTable::Pin* pin);
  Status NotRegistered(const char* op, int peer, uint64_t addr, size_t size) const;
  PeerSession& peer(int r) const { return *peers_[static_cast<size_t>(r)]; }
  // What the fences to `rank` complete: one lane's transfers, every
  // lane's (kAllLanes), or the whole transport's (kWholeTransport).
  static constexpr int kAllLanes = -1;
  static constexpr int kWholeTransport = -2;
  Status FenceOf(int rank, int lanes);

  // Session::Delegate: control requests from rank `from`.
  Result<Session::Subscriber> SubscriberFor(int64_t from) override;
  Result<std::shared_ptr<PeerSession>> PeerFor(int64_t from) override;
  Status Notified(int64_t from, std::string_view payload) override;
  Result<std::string> Other(int64_t from, uint8_t type, std::string_view payload) override;
  Status CheckFrom(int64_t from) const;

  bootstrap::Config cfg_;
  std::unique_ptr<bootstrap::TcpStoreServer> store_server_;
  std::unique_ptr<bootstrap::Store> store_;
  bootstrap::TcpStoreClient* tcp_store_ = nullptr;  // store_, when it is one
  std::unique_ptr<SymmetricHeap> heap_;
  std::unique_ptr<Session> session_;
  std::vector<std::shared_ptr<PeerSession>> peers_;  // by rank; after session_: keys go before transports

  // Notifications received, oldest first.
  Status EnqueueNotification(int from, std::string data);
  NotifyQueue<Notification> notifications_;

  // DisseminationBarrier::kBlockBytes at the heap's start, then the
  // collectives' scratch (2 * kScratchHalf), then the broadcast's ring
  // (kRingBytes).
  void* barrier_block_ = nullptr;
  std::unique_ptr<DisseminationBarrier> barrier_;
  int host_ranks_ = 1;  // ranks on this host (same address towards rank 0's store), this one included
  int host_index_ = 0;  // ranks of this host with a lower rank
  int home_cpu_ = -1;   // this rank's CPU when the host has no more ranks than CPUs (Spread), else -1
  std::atomic<uint64_t> barrier_epoch_{0};    // of the store barrier
  std::atomic<uint64_t> allgather_epoch_{0};  // of the store allgather
  std::mutex collective_mu_;                  // one data-plane collective at a time
  uint64_t collective_round_ = 0;             // data-plane rounds so far, under collective_mu_
  uint64_t ring_seq_ = 0;                     // broadcast chunks so far, under collective_mu_
  std::vector<uint64_t> ring_taken_;          // per rank: chunks it was last seen to have taken; the same
  bool finalized_ = false;
};

// How often a wait for a peer (its signal, notification or broadcast ring
// slot) asks the store whether a peer has died.
inline constexpr std::chrono::milliseconds kProbeEvery{50};
// The most a call that failed because its peer is gone waits for the store
// to hear of a death (WorldImpl::DeathNews, capped by HIXL_TIMEOUT_MS).
inline constexpr std::chrono::milliseconds kDeathNews{1000};
inline constexpr std::chrono::milliseconds kNoWait{0};

// Signal words: validation and a test without waiting.
Status CheckCmp(int cmp);
Result<bool> TestSignal(const uint64_t* sig, int cmp, uint64_t value);

// The process's world, or nullptr outside init..finalize.
WorldImpl* Current();
// Init/finalize of the process's world; `api` names the caller in messages.
Status InitCurrent();
Status FinalizeCurrent();
// kNotInitialized explaining whether init has not happened yet or finalize has.
Status NotInitialized(const char* api);

}  // namespace hixl::world

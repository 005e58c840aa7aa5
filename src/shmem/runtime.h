#pragma once

// The OpenSHMEM front door's runtime (include/hixl/shmem/shmem.h): the
// process's one State on hixl's world, the translation of symmetric
// addresses (the symmetric heap is at the same address on every PE; global
// and static variables are at the same offset in the program's writable
// data, which ASLR places differently on each PE), the failure path every
// call shares, and the bounded local wait.  The calls themselves live in
// setup.cc, rma.cc, atomics.cc, p2p.cc, teams.cc and collectives.cc.
#include <hixl/shmem/shmem.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "transport/transport.h"
#include "world/world.h"

// A team: the world PEs it holds, in team order.  Handles are pointers to
// these (shmem_team_t).
struct hixl_shmem_team {
  std::vector<int> pes;
  int me = -1;        // this PE's index in pes
  uint32_t slot = 0;  // its barrier words in the runtime's block (0: the world's own barrier)
  shmem_team_config_t config{};
  bool world = false;  // every PE, in world order
  // Per member (team index): the parts of this team's broadcasts,
  // fcollects and alltoalls this PE has taken from it, so far.
  std::vector<uint64_t> taken;
  uint64_t reductions = 0;  // small reductions on this team so far (the world team's)
};

// A context: its team (PE numbers), and the world PEs it may still have
// transfers on their way to (its _nbi operations where the transport
// completes them later, UCX; on one host, puts the relay has yet to land),
// which its quiet and fence complete, and only those (hixl::shmem::Quiet).
struct hixl_shmem_ctx {
  shmem_team_t team = nullptr;
  long options = 0;
  // Its transfers' lane (WorldImpl::OpenLane; 0: the default context's):
  // over UCX an endpoint of its own to each PE, so that its quiet waits
  // for its own transfers only, also to a PE other contexts use.
  int lane = 0;
  // Transfers to PEs on this host (shm), all completed by one flush of
  // that transport: a flag, no list.
  std::atomic<bool> same_host_pending{false};
  std::mutex mu;  // held to add to or take pending_pes
  // Per world PE (elsewhere: UCX): whether it is in pending_pes (set under
  // mu; read without).
  std::unique_ptr<std::atomic<uint8_t>[]> pending;
  std::vector<int> pending_pes;          // guarded by mu
  std::atomic<bool> any_pending{false};  // pending_pes is not empty (set and cleared under mu)
};

namespace hixl::shmem {

// Words of the runtime's own symmetric block (allocated at init, the first
// allocation of the heap, so at the same address on every PE).
inline constexpr uint32_t kTeamSlots = 256;  // team barrier words: one row per team slot
inline constexpr uint32_t kRounds = 32;      // a dissemination barrier's rounds (2^32 PEs)
// A reduction of at most this many bytes on the world team pushes each
// PE's source to every PE (one round, no barrier; see collectives.cc).
inline constexpr size_t kSmallReduceBytes = 64;
struct Block {
  uint64_t team_sync[kTeamSlots][kRounds];
  uint64_t collect_count;  // what this PE contributes to the running collect (bytes)
  uint64_t team_slot;      // the next team slot this PE offers to a split
  uint64_t pad[6];
};

struct State {
  world::WorldImpl* w = nullptr;
  bool owns_world = false;  // shmem_init started the world (else hixl_init did)
  int me = -1;
  int npes = 0;
  int init_count = 0;
  bool finalized = false;
  // The program's writable data (.data and .bss) on this PE, registered
  // with the world; data_base[pe]: where it starts on pe.
  uint64_t data_lo = 0;
  uint64_t data_hi = 0;
  std::vector<uint64_t> data_base;
  // Per PE: the world's put and get to it are done with the source, and
  // the get's data here, when they return (the shm transport: a copy into
  // mapped memory, by cross-memory attach, or into a relay slot); else a
  // blocking call fences (UCX may still read the source).
  std::vector<uint8_t> synchronous;
  int same_host_pe = -1;  // a PE served by shm (the first), or -1
  Block* block = nullptr;
  // Per team slot, npes words: word i of a team's row counts the parts its
  // member i has delivered here (kTeamSlots x npes words, allocated at
  // init after the block; a row is zeroed when its slot is taken).
  uint64_t* arrivals = nullptr;
  // The world team's small reductions: 2 (alternate calls) x npes slots of
  // kSmallReduceBytes, slot i for world PE i's source (allocated at init).
  unsigned char* small_reduce = nullptr;
  uint32_t next_slot = 1;
  // Allocations of shmem_malloc and friends: user pointer -> (base, size).
  struct Allocation {
    void* base;
    size_t size;
  };
  std::mutex mu;
  std::map<void*, Allocation> allocations;
};

// The process's one State, never destroyed (the exit hook may run after
// static destructors).  The helpers below are inline: every put, get and
// atomic goes through them.
inline State& S() {
  static State* const s = new State;
  return *s;
}

// The failures of W, CheckPe and CtxPe (runtime.cc).
[[noreturn]] void NotInitialised(const char* api);
[[noreturn]] void BadPe(const char* api, int pe);
[[noreturn]] void BadCtxPe(shmem_ctx_t ctx, int pe);

// The world, or the not-initialised failure for api.
inline world::WorldImpl* W(const char* api) {
  const State& s = S();
  if (s.w == nullptr || s.finalized) NotInitialised(api);
  return s.w;
}
// Prints "hixl shmem: PE p: api: what" on stderr and ends the job as
// shmem_global_exit(1) does.
[[noreturn]] void Fail(const char* api, const std::string& what);
// Fail with s's message; where s says a peer has died (kPeerFailed), this
// PE first gives the launcher a moment to stop it (FailAfterPeer), so the
// job ends with the status of the PE that ended first (shmem_global_exit's).
[[noreturn]] void FailAfterPeer(const char* api, const std::string& what);
[[noreturn]] void Failed(const char* api, const Status& s);
inline void Check(const char* api, const Status& s) {
  if (!s.ok()) Failed(api, s);
}
[[noreturn]] void Exit(int status);
inline void CheckPe(const char* api, int pe) {
  if (pe < 0 || pe >= S().npes) BadPe(api, pe);
}
// The world PE of a context's PE number (a team's context numbers its PEs
// as the team does).
inline int CtxPe(shmem_ctx_t ctx, int pe) {
  if (ctx == SHMEM_CTX_INVALID) BadCtxPe(ctx, pe);
  const hixl_shmem_team* t = ctx->team;
  if (t == nullptr || t->world) return pe;
  if (pe < 0 || pe >= static_cast<int>(t->pes.size())) BadCtxPe(ctx, pe);
  return t->pes[static_cast<size_t>(pe)];
}
// A new context of team (the world's PEs known: init has run).
shmem_ctx_t NewCtx(shmem_team_t team, long options);
// Notes that ctx may have a transfer to world PE pe still on its way: on
// this host (shm) a flag, elsewhere the PE in ctx's list (NotePending).
void NotePending(shmem_ctx_t ctx, int pe);
inline void Pending(shmem_ctx_t ctx, int pe) {
  if (S().synchronous[static_cast<size_t>(pe)]) {
    if (!ctx->same_host_pending.load(std::memory_order_relaxed)) {
      ctx->same_host_pending.store(true, std::memory_order_seq_cst);
    }
    return;
  }
  NotePending(ctx, pe);
}
// Completes ctx's transfers (what Pending noted), and not other contexts'
// where they go to other PEs: shmem_ctx_quiet, shmem_ctx_fence and
// shmem_ctx_destroy.
void Quiet(const char* api, shmem_ctx_t ctx);
// Where pe holds the symmetric object this PE holds at addr.
inline uint64_t Remote(const void* addr, int pe) {
  const State& s = S();
  const auto a = reinterpret_cast<uint64_t>(addr);
  if (a >= s.data_lo && a < s.data_hi) return s.data_base[static_cast<size_t>(pe)] + (a - s.data_lo);
  return a;
}
bool Symmetric(const void* addr);

// Blocks until done() holds: spins briefly, then yields; asks the world
// whether a peer died every few hundred milliseconds; fails after
// HIXL_TIMEOUT_MS.  what names the wait in the failure.
template <typename Done>
void WaitFor(const char* api, const char* what, Done done);
void WaitSlice(const char* api, const char* what, uint64_t* spins, int64_t* start_ms, int64_t* last_check_ms);

template <typename Done>
void WaitFor(const char* api, const char* what, Done done) {
  uint64_t spins = 0;
  int64_t start = -1, last = -1;
  while (!done()) WaitSlice(api, what, &spins, &start, &last);
}

// Where pe's symmetric object at this PE's addr (bytes long) is mapped in
// this process, or null (another host's memory, or memory not mapped
// here); fails when pe holds no such object.
void* Direct(const char* api, const void* addr, size_t bytes, int pe);

// The world's atomics on pe's 64-bit word at remote address addr.
uint64_t Atomic64(const char* api, int pe, uint64_t addr, transport::AtomicOp op, uint64_t operand,
                  uint64_t compare = 0);

// Init and finalize, shared by shmem_init, start_pes and the exit hook.
void Init(const char* api);
void Finalize(const char* api);
// SHMEM_TEAM_WORLD and SHMEM_TEAM_SHARED for this world (teams.cc).
void InitTeams();

}  // namespace hixl::shmem

#include "shmem/runtime.h"

#include <link.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <algorithm>

#include <fmt/format.h>

#include "transport/shm/proc_maps.h"

namespace hixl::shmem {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The main program's writable data: its writable PT_LOAD segment from the
// end of the part the loader makes read-only after relocation (RELRO) to
// the end of .bss, in whole pages.
struct Range {
  uint64_t lo = 0, hi = 0;
};
int FindData(struct dl_phdr_info* info, size_t, void* out) {
  auto* r = static_cast<Range*>(out);
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t lo = 0, hi = 0, relro_end = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uint64_t start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_W) && ph.p_memsz > 0 && lo == 0) {
      lo = start;
      hi = start + ph.p_memsz;
    } else if (ph.p_type == PT_GNU_RELRO) {
      relro_end = start + ph.p_memsz;
    }
  }
  if (lo != 0) {
    lo &= ~(page - 1);
    if (relro_end > lo && relro_end < hi) lo = relro_end & ~(page - 1);
    r->lo = lo;
    r->hi = (hi + page - 1) & ~(page - 1);
  }
  return 1;  // the first object is the main program: stop there
}

// .data is a private mapping of the program's file, .bss anonymous memory
// (the page they share belongs to the former).  The world promotes only
// anonymous memory to shared memory, so that peers on this host reach it
// at memory speed, and one region must hold every byte of a transfer: the
// file-backed pages are made anonymous (same bytes, same address) so that
// the whole of the program's writable data is one promotable region.  Done
// at shmem_init, before the program's threads use the globals as
// OpenSHMEM objects.
//
// The pages hold the program's globals and, in a sanitizer build, the
// redzones around them: they are copied word by word, out of the
// sanitizers' view (their memcpy would report every redzone).
__attribute__((no_sanitize_address, no_sanitize_thread)) void CopyPages(void* to, const void* from, size_t n) {
  auto* d = static_cast<volatile uint64_t*>(to);
  const auto* s = static_cast<const volatile uint64_t*>(from);
  for (size_t i = 0; i < n / sizeof(uint64_t); ++i) d[i] = s[i];
}

void AnonymiseData(const char* api, uint64_t lo, uint64_t hi) {
  for (const transport::shm::MapsEntry& m : transport::shm::ReadSelfMaps(lo, hi)) {
    if (m.path.empty() || m.path[0] == '[' || m.shared || !m.read || !m.write) continue;
    const uint64_t a = std::max(m.start, lo), b = std::min(m.end, hi);
    if (a >= b) continue;
    // The copy is made elsewhere and moved over the old pages in one step
    // (mremap), so a thread that reads a global meanwhile (the sanitizers'
    // runtimes live in the program too) never sees a missing or zeroed page.
    const size_t n = b - a;
    void* fresh = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fresh == MAP_FAILED) Fail(api, fmt::format("cannot map {} bytes: {}", n, std::strerror(errno)));
    CopyPages(fresh, reinterpret_cast<const void*>(a), n);
    // The system call itself: UCX's mremap hook (libucm) drops the fifth
    // argument, and would move the pages to wherever a register held.
    const long at = ::syscall(SYS_mremap, fresh, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, a);
    if (at != static_cast<long>(a)) {
      const int e = errno;
      ::munmap(fresh, n);
      Fail(api, fmt::format("cannot move the program's data at {:#x} to anonymous memory: {}", a, std::strerror(e)));
    }
  }
}

void FinalizeAtExit() {
  State& s = S();
  if (s.init_count > 0 && !s.finalized) Finalize("exit");
}

}  // namespace

void Exit(int status) {
  std::fflush(nullptr);
  ::_exit(status);
}

namespace {

// "hixl shmem: PE p: api: what" on stderr, flushed.
void Report(const char* api, const std::string& what) {
  std::fprintf(stderr, "hixl shmem: PE %d: %s: %s\n", S().me, api, what.c_str());
  std::fflush(nullptr);
}

}  // namespace

void Fail(const char* api, const std::string& what) {
  Report(api, what);
  Exit(1);
}

void Failed(const char* api, const Status& st) {
  const State& s = S();
  // The error may say only that a connection broke: ask whether a peer died.
  if (st.code() == Errc::kPeerFailed || (s.w != nullptr && !s.finalized && !s.w->DeadPeer(api).ok())) {
    FailAfterPeer(api, st.message());
  }
  Fail(api, st.message());
}

void FailAfterPeer(const char* api, const std::string& what) {
  Report(api, what);
  // hixlrun (or mpirun) sees the dead PE's status, then stops this one; a
  // PE that exited at once could be reaped first and its status taken for
  // the job's.  Alone, it exits after the pause.
  ::usleep(1'000'000);
  Exit(1);
}

void NotInitialised(const char* api) {
  Fail(api, S().finalized ? "called after shmem_finalize" : "called before shmem_init (or start_pes)");
}

void BadPe(const char* api, int pe) { Fail(api, fmt::format("PE {} is outside the world of {} PEs", pe, S().npes)); }

void BadCtxPe(shmem_ctx_t ctx, int pe) {
  if (ctx == SHMEM_CTX_INVALID) Fail("shmem_ctx", "an operation on SHMEM_CTX_INVALID");
  Fail("shmem_ctx", fmt::format("PE {} is outside the context's team of {} PEs", pe, ctx->team->pes.size()));
}

shmem_ctx_t NewCtx(shmem_team_t team, long options) {
  auto* c = new hixl_shmem_ctx;
  c->team = team;
  c->options = options;
  c->pending = std::make_unique<std::atomic<uint8_t>[]>(static_cast<size_t>(S().npes));
  c->lane = S().w->OpenLane();
  return c;
}

void NotePending(shmem_ctx_t ctx, int pe) {
  std::atomic<uint8_t>& noted = ctx->pending[static_cast<size_t>(pe)];
  // Noted already: a quiet that takes it after this check flushes after the
  // transfer this notes was started.
  if (noted.load(std::memory_order_acquire) != 0) return;
  std::lock_guard lock(ctx->mu);
  if (noted.load(std::memory_order_relaxed) != 0) return;
  noted.store(1, std::memory_order_release);
  ctx->pending_pes.push_back(pe);
  ctx->any_pending.store(true, std::memory_order_release);
}

void Quiet(const char* api, shmem_ctx_t ctx) {
  world::WorldImpl* w = W(api);
  // On one host (shm) the transport's whole flush is a few flags (relayed
  // puts, peers' liveness), once for all its PEs.  A transfer noted after
  // the flag is taken is after this quiet: completed by the next.
  if (ctx->same_host_pending.load(std::memory_order_relaxed) && ctx->same_host_pending.exchange(false)) {
    Check(api, w->FenceTransport(S().same_host_pe));
  }
  // Elsewhere (UCX) each noted PE's own.  This thread's list is kept
  // between calls: the swap trades it (emptied, its capacity kept) for the
  // context's, so that neither allocates once both have grown.
  if (!ctx->any_pending.load(std::memory_order_acquire)) return;
  thread_local std::vector<int> pes;
  pes.clear();
  {
    std::lock_guard lock(ctx->mu);
    if (ctx->pending_pes.empty()) return;
    pes.swap(ctx->pending_pes);
    ctx->any_pending.store(false, std::memory_order_relaxed);
    for (int pe : pes) ctx->pending[static_cast<size_t>(pe)].store(0, std::memory_order_release);
  }
  for (int pe : pes) Check(api, w->FenceLane(pe, ctx->lane));
}

bool Symmetric(const void* addr) {
  State& s = S();
  const auto a = reinterpret_cast<uint64_t>(addr);
  if (a >= s.data_lo && a < s.data_hi) return true;
  std::lock_guard lock(s.mu);
  auto it = s.allocations.upper_bound(const_cast<void*>(addr));
  if (it == s.allocations.begin()) return false;
  --it;
  const auto user = reinterpret_cast<uint64_t>(it->first);
  return a >= user && a < user + it->second.size;
}

void WaitSlice(const char* api, const char* what, uint64_t* spins, int64_t* start_ms, int64_t* last_check_ms) {
  // Spin a little (a peer on another core may be about to write), then
  // yield the core: with more ranks than cores, the writer may be waiting
  // for this one.
  ++*spins;
  if (*spins < 128) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    return;
  }
  if (*spins % 64 != 0) {
    ::sched_yield();
    return;
  }
  const int64_t now = NowMs();
  if (*start_ms < 0) {
    *start_ms = *last_check_ms = now;
    return;
  }
  world::WorldImpl* w = W(api);
  if (now - *last_check_ms >= 250) {
    *last_check_ms = now;
    Check(api, w->DeadPeer(api));
  }
  if (w->timeout_ms() > 0 && now - *start_ms > w->timeout_ms()) {
    Fail(api, fmt::format("{} did not happen within {} ms (HIXL_TIMEOUT_MS)", what, w->timeout_ms()));
  }
  // After a second of waiting the writer is clearly not about to write:
  // sleep between looks rather than spin on yields.
  if (now - *start_ms > 1000) ::usleep(200);
}

uint64_t Atomic64(const char* api, int pe, uint64_t addr, transport::AtomicOp op, uint64_t operand, uint64_t compare) {
  CheckPe(api, pe);
  uint64_t old = 0;
  Check(api, W(api)->Atomic(api, pe, addr, op, operand, compare, &old));
  return old;
}

void* Direct(const char* api, const void* addr, size_t bytes, int pe) {
  State& s = S();
  CheckPe(api, pe);
  if (!s.synchronous[static_cast<size_t>(pe)]) return nullptr;
  auto r = W(api)->Direct(pe, Remote(addr, pe), bytes);
  if (!r.ok()) Fail(api, r.status().message());
  return r.value();
}

void Init(const char* api) {
  State& s = S();
  if (s.finalized) Fail(api, "OpenSHMEM cannot be started again after shmem_finalize");
  if (s.init_count++ > 0) return;
  s.w = world::Current();
  if (s.w == nullptr) {
    Status st = world::InitCurrent();
    if (!st.ok()) {
      std::fprintf(stderr, "hixl shmem: %s: %s\n", api, st.message().c_str());
      Exit(1);
    }
    s.w = world::Current();
    s.owns_world = true;
  }
  s.me = s.w->rank();
  s.npes = s.w->size();

  // The runtime's block: the first allocation of every PE, so symmetric.
  auto b = s.w->Alloc(sizeof(Block));
  if (!b.ok()) Fail(api, "cannot allocate the runtime's symmetric block: " + b.status().message());
  s.block = static_cast<Block*>(b.value());
  std::memset(s.block, 0, sizeof(Block));
  // The collectives' delivery counts, the second allocation (symmetric
  // too); the world's and the shared team's rows (slots 0 and 1) zeroed
  // here, a split's in AgreeSlots.
  const size_t row = static_cast<size_t>(s.npes);
  auto a = s.w->Alloc(kTeamSlots * row * sizeof(uint64_t));
  if (!a.ok()) Fail(api, "cannot allocate the collectives' delivery counts: " + a.status().message());
  s.arrivals = static_cast<uint64_t*>(a.value());
  std::memset(s.arrivals, 0, 2 * row * sizeof(uint64_t));
  auto r = s.w->Alloc(2 * row * kSmallReduceBytes);
  if (!r.ok()) Fail(api, "cannot allocate the small reductions' slots: " + r.status().message());
  s.small_reduce = static_cast<unsigned char*>(r.value());

  // Global and static variables: register the program's writable data and
  // learn where every PE has it.
  Range data;
  ::dl_iterate_phdr(FindData, &data);
  if (data.hi > data.lo) {
    AnonymiseData(api, data.lo, data.hi);
    Check(api, s.w->Register(reinterpret_cast<void*>(data.lo), data.hi - data.lo));
    s.data_lo = data.lo;
    s.data_hi = data.hi;
  }
  struct Published {
    uint64_t data_lo, data_size, block;
  };
  const Published mine{s.data_lo, s.data_hi - s.data_lo, reinterpret_cast<uint64_t>(s.block)};
  std::vector<Published> all(static_cast<size_t>(s.npes));
  Check(api, s.w->Allgather(&mine, all.data(), sizeof(Published)));
  s.data_base.resize(all.size());
  for (size_t pe = 0; pe < all.size(); ++pe) {
    if (all[pe].data_size != mine.data_size || all[pe].block != mine.block) {
      Fail(api, fmt::format("PE {} is not running the same program: its writable data is {} bytes (here {}), its "
                            "runtime block at {:#x} (here {:#x}); OpenSHMEM needs every PE to run one program",
                            pe, all[pe].data_size, mine.data_size, all[pe].block, mine.block));
    }
    s.data_base[pe] = all[pe].data_lo;
  }
  s.synchronous.assign(static_cast<size_t>(s.npes), 0);
  for (int pe = 0; pe < s.npes; ++pe) s.synchronous[static_cast<size_t>(pe)] = s.w->TransportFor(pe) == "shm";
  s.same_host_pe = -1;
  for (int pe = 0; pe < s.npes && s.same_host_pe < 0; ++pe) {
    if (s.synchronous[static_cast<size_t>(pe)]) s.same_host_pe = pe;
  }
  InitTeams();
  static std::once_flag hook;
  std::call_once(hook, [] { std::atexit(FinalizeAtExit); });
  Check(api, s.w->Barrier());
}

void Finalize(const char* api) {
  State& s = S();
  if (s.init_count == 0 || s.finalized) return;
  world::WorldImpl* w = s.w;
  Check(api, w->Barrier());
  // Private pages go back over the program's data in one step
  // (promotion.h), so its other threads (and the sanitizers' runtimes,
  // linked into the program) read their globals throughout.
  if (s.data_hi > s.data_lo) Check(api, w->Deregister(reinterpret_cast<void*>(s.data_lo)));
  s.finalized = true;
  if (s.owns_world) {
    Status st = world::FinalizeCurrent();
    if (!st.ok()) std::fprintf(stderr, "hixl shmem: PE %d: %s: %s\n", s.me, api, st.message().c_str());
  }
  s.w = nullptr;
}

}  // namespace hixl::shmem

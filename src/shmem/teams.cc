// OpenSHMEM teams, contexts and barriers (shmem.h).  A team is a list of
// world PEs; its barrier is the world's own (the world team) or a
// dissemination barrier counted in words of the runtime's symmetric block
// (one row of kRounds words per team slot; teams that share a PE never
// share a slot).  The legacy active sets count in their pSync.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "shmem/group.h"

namespace {

hixl_shmem_team world_team;
hixl_shmem_team shared_team;
hixl_shmem_ctx default_ctx;

}  // namespace

extern "C" {
shmem_team_t SHMEM_TEAM_WORLD = &world_team;
shmem_team_t SHMEM_TEAM_SHARED = &shared_team;
shmem_ctx_t SHMEM_CTX_DEFAULT = &default_ctx;
}

namespace hixl::shmem {

void InitTeams() {
  State& s = S();
  world_team.pes.clear();
  shared_team.pes.clear();
  for (int pe = 0; pe < s.npes; ++pe) {
    world_team.pes.push_back(pe);
    if (pe == s.me || s.w->TransportFor(pe) == "shm") shared_team.pes.push_back(pe);
  }
  world_team.me = s.me;
  world_team.world = true;
  world_team.config.num_contexts = 0;
  for (size_t i = 0; i < shared_team.pes.size(); ++i) {
    if (shared_team.pes[i] == s.me) shared_team.me = static_cast<int>(i);
  }
  shared_team.world = shared_team.pes.size() == world_team.pes.size();
  shared_team.slot = 1;  // every PE's shared team: disjoint across hosts
  world_team.taken.assign(world_team.pes.size(), 0);
  world_team.reductions = 0;
  shared_team.taken.assign(shared_team.pes.size(), 0);
  s.next_slot = 2;
  default_ctx.team = &world_team;
  default_ctx.pending = std::make_unique<std::atomic<uint8_t>[]>(static_cast<size_t>(s.npes));
  default_ctx.pending_pes.clear();
}

namespace {

// g counts its deliveries as team's calls, and takes small reductions as
// the world team's when team is it.
void CountAs(hixl_shmem_team* team, Group* g) {
  g->arrivals = S().arrivals + static_cast<size_t>(team->slot) * static_cast<size_t>(S().npes);
  g->taken = &team->taken;
  if (team == &world_team) {
    g->small_reduce = S().small_reduce;
    g->reductions = &team->reductions;
  }
}

}  // namespace

bool FromTeam(const char* api, shmem_team_t team, Group* g) {
  (void)W(api);
  if (team == SHMEM_TEAM_INVALID) return false;
  if (team->me < 0) Fail(api, "this PE is not a member of the team");
  g->api = api;
  g->pes = team->pes;
  g->me = team->me;
  g->sync = team->world ? nullptr : S().block->team_sync[team->slot];
  CountAs(team, g);
  return true;
}

Group FromActiveSet(const char* api, int start, int log_stride, int size, long* pSync) {
  State& s = S();
  (void)W(api);
  if (size < 1 || start < 0 || log_stride < 0 || log_stride > 30 ||
      start + (static_cast<int64_t>(size) - 1) * (int64_t{1} << log_stride) >= s.npes) {
    Fail(api, fmt::format("the active set (PE_start {}, logPE_stride {}, PE_size {}) does not fit the {} PEs", start,
                          log_stride, size, s.npes));
  }
  Group g;
  g.api = api;
  for (int i = 0; i < size; ++i) {
    const int pe = start + (i << log_stride);
    if (pe == s.me) g.me = i;
    g.pes.push_back(pe);
  }
  if (g.me < 0) Fail(api, fmt::format("PE {} is not in the active set it was called with", s.me));
  const bool world = start == 0 && log_stride == 0 && size == s.npes;
  if (pSync == nullptr) Fail(api, "pSync is NULL");
  g.sync = world ? nullptr : reinterpret_cast<uint64_t*>(pSync);
  // The barrier counts in the first log2(size) words, deliveries in the last.
  g.flag = reinterpret_cast<uint64_t*>(pSync) + (SHMEM_SYNC_SIZE - 1);
  // Every PE: counted as the world team's calls (every PE makes the same
  // calls in the same order, whichever form), which need no pSync.
  if (world) CountAs(&world_team, &g);
  return g;
}

void Sync(const Group& g, bool quiet) {
  world::WorldImpl* w = W(g.api);
  if (g.sync == nullptr) {
    Check(g.api, w->Barrier());  // implies the fence
    return;
  }
  if (quiet) Check(g.api, w->Fence());
  // Dissemination: in round k, add one to the round's word of the PE 2^k
  // ahead and wait for the one 2^k behind to add one to ours, then take it
  // back: the words count, so a peer already in the next barrier on the
  // same words is counted, not lost, and every word is back at zero once
  // everyone has left.
  const int n = g.size();
  for (int k = 0, dist = 1; dist < n; ++k, dist <<= 1) {
    const int to = g.pes[static_cast<size_t>((g.me + dist) % n)];
    uint64_t* word = &g.sync[k];
    Atomic64(g.api, to, Remote(word, to), transport::AtomicOp::kAdd, 1);
    WaitFor(g.api, "a barrier partner's arrival", [word] { return __atomic_load_n(word, __ATOMIC_ACQUIRE) > 0; });
    __atomic_fetch_sub(word, 1, __ATOMIC_ACQ_REL);
  }
}

uint32_t AgreeSlots(const Group& g, uint32_t count) {
  State& s = S();
  world::WorldImpl* w = W(g.api);
  s.block->team_slot = s.next_slot;
  Sync(g, false);
  std::vector<uint64_t> offered(g.pes.size());
  for (size_t i = 0; i < g.pes.size(); ++i) {
    Check(g.api, w->Get(g.pes[i], reinterpret_cast<uint64_t>(&s.block->team_slot), &offered[i], sizeof(uint64_t)));
  }
  Check(g.api, w->Fence());  // every get has landed (over UCX they complete here)
  const uint64_t slot = *std::max_element(offered.begin(), offered.end());
  // The new teams' delivery counts start at zero before any member can
  // deliver (after the barrier); no team of this PE has these slots yet.
  if (slot + count <= kTeamSlots) {
    std::memset(s.arrivals + slot * static_cast<size_t>(s.npes), 0,
                count * static_cast<size_t>(s.npes) * sizeof(uint64_t));
  }
  Sync(g, false);
  if (slot + count > kTeamSlots) {
    Fail(g.api, fmt::format("no team slot is left ({} teams have been made; at most {})", slot, kTeamSlots - 2));
  }
  s.next_slot = static_cast<uint32_t>(slot + count);
  return static_cast<uint32_t>(slot);
}

namespace {

// A team of parent's members start, start + stride, ... (size of them);
// null when this PE is not one of them.
shmem_team_t MakeTeam(const Group& parent, int start, int stride, int size, uint32_t slot,
                      const shmem_team_config_t* config, long mask) {
  auto* t = new hixl_shmem_team;
  for (int i = 0; i < size; ++i) {
    const int index = start + i * stride;
    if (index == parent.me) t->me = i;
    t->pes.push_back(parent.pes[static_cast<size_t>(index)]);
  }
  if (t->me < 0) {
    delete t;
    return SHMEM_TEAM_INVALID;
  }
  t->slot = slot;
  t->taken.assign(t->pes.size(), 0);
  if (config && (mask & SHMEM_TEAM_NUM_CONTEXTS)) t->config.num_contexts = config->num_contexts;
  t->world = static_cast<int>(t->pes.size()) == S().npes;
  for (size_t i = 0; t->world && i < t->pes.size(); ++i) t->world = t->pes[i] == static_cast<int>(i);
  return t;
}

}  // namespace
}  // namespace hixl::shmem

using hixl::shmem::Group;
using hixl::shmem::W;

extern "C" {

int shmem_team_my_pe(shmem_team_t team) { return team == SHMEM_TEAM_INVALID ? -1 : team->me; }
int shmem_team_n_pes(shmem_team_t team) { return team == SHMEM_TEAM_INVALID ? -1 : static_cast<int>(team->pes.size()); }

int shmem_team_get_config(shmem_team_t team, long config_mask, shmem_team_config_t* config) {
  if (team == SHMEM_TEAM_INVALID || config == nullptr) return -1;
  if (config_mask & SHMEM_TEAM_NUM_CONTEXTS) config->num_contexts = team->config.num_contexts;
  return 0;
}

int shmem_team_translate_pe(shmem_team_t src_team, int src_pe, shmem_team_t dest_team) {
  if (src_team == SHMEM_TEAM_INVALID || dest_team == SHMEM_TEAM_INVALID) return -1;
  if (src_pe < 0 || src_pe >= static_cast<int>(src_team->pes.size())) return -1;
  const int pe = src_team->pes[static_cast<size_t>(src_pe)];
  for (size_t i = 0; i < dest_team->pes.size(); ++i) {
    if (dest_team->pes[i] == pe) return static_cast<int>(i);
  }
  return -1;
}

int shmem_team_split_strided(shmem_team_t parent_team, int start, int stride, int size,
                             const shmem_team_config_t* config, long config_mask, shmem_team_t* new_team) {
  const char* api = "shmem_team_split_strided";
  if (new_team) *new_team = SHMEM_TEAM_INVALID;
  Group parent;
  if (!hixl::shmem::FromTeam(api, parent_team, &parent) || new_team == nullptr) return -1;
  const int n = parent.size();
  const int64_t last = start + (static_cast<int64_t>(size) - 1) * stride;
  if (size < 1 || start < 0 || start >= n || (size > 1 && stride < 1) || last >= n) return -1;
  const uint32_t slot = hixl::shmem::AgreeSlots(parent, 1);
  *new_team = hixl::shmem::MakeTeam(parent, start, size > 1 ? stride : 1, size, slot, config, config_mask);
  return 0;
}

int shmem_team_split_2d(shmem_team_t parent_team, int xrange, const shmem_team_config_t* xaxis_config, long xaxis_mask,
                        shmem_team_t* xaxis_team, const shmem_team_config_t* yaxis_config, long yaxis_mask,
                        shmem_team_t* yaxis_team) {
  const char* api = "shmem_team_split_2d";
  if (xaxis_team) *xaxis_team = SHMEM_TEAM_INVALID;
  if (yaxis_team) *yaxis_team = SHMEM_TEAM_INVALID;
  Group parent;
  if (!hixl::shmem::FromTeam(api, parent_team, &parent) || xaxis_team == nullptr || yaxis_team == nullptr) return -1;
  if (xrange < 1) return -1;
  const int n = parent.size();
  if (xrange > n) xrange = n;
  const uint32_t slot = hixl::shmem::AgreeSlots(parent, 2);
  const int x0 = (parent.me / xrange) * xrange;
  *xaxis_team = hixl::shmem::MakeTeam(parent, x0, 1, std::min(xrange, n - x0), slot, xaxis_config, xaxis_mask);
  const int y0 = parent.me % xrange;
  *yaxis_team =
      hixl::shmem::MakeTeam(parent, y0, xrange, (n - 1 - y0) / xrange + 1, slot + 1, yaxis_config, yaxis_mask);
  return 0;
}

void shmem_team_destroy(shmem_team_t team) {
  if (team == SHMEM_TEAM_INVALID) return;
  if (team == SHMEM_TEAM_WORLD || team == SHMEM_TEAM_SHARED) {
    hixl::shmem::Fail("shmem_team_destroy", "SHMEM_TEAM_WORLD and SHMEM_TEAM_SHARED cannot be destroyed");
  }
  delete team;  // its slot is not used again
}

int shmem_team_sync(shmem_team_t team) {
  Group g;
  if (!hixl::shmem::FromTeam("shmem_team_sync", team, &g)) return -1;
  hixl::shmem::Sync(g, false);
  return 0;
}

void shmem_barrier_all(void) { hixl::shmem::Check("shmem_barrier_all", W("shmem_barrier_all")->Barrier()); }
void shmem_sync_all(void) { hixl::shmem::Check("shmem_sync_all", W("shmem_sync_all")->Barrier()); }

void shmem_barrier(int PE_start, int logPE_stride, int PE_size, long* pSync) {
  hixl::shmem::Sync(hixl::shmem::FromActiveSet("shmem_barrier", PE_start, logPE_stride, PE_size, pSync), true);
}
void shmem_sync(int PE_start, int logPE_stride, int PE_size, long* pSync) {
  hixl::shmem::Sync(hixl::shmem::FromActiveSet("shmem_sync", PE_start, logPE_stride, PE_size, pSync), false);
}

int shmem_ctx_create(long options, shmem_ctx_t* ctx) {
  (void)W("shmem_ctx_create");
  if (ctx == nullptr) return -1;
  *ctx = hixl::shmem::NewCtx(SHMEM_TEAM_WORLD, options);
  return 0;
}

int shmem_team_create_ctx(shmem_team_t team, long options, shmem_ctx_t* ctx) {
  (void)W("shmem_team_create_ctx");
  if (ctx == nullptr) return -1;
  *ctx = SHMEM_CTX_INVALID;
  if (team == SHMEM_TEAM_INVALID) return -1;
  *ctx = hixl::shmem::NewCtx(team, options);
  return 0;
}

void shmem_ctx_destroy(shmem_ctx_t ctx) {
  if (ctx == SHMEM_CTX_INVALID) return;
  if (ctx == SHMEM_CTX_DEFAULT) hixl::shmem::Fail("shmem_ctx_destroy", "SHMEM_CTX_DEFAULT cannot be destroyed");
  // Its operations complete first, as the standard asks.
  hixl::shmem::Quiet("shmem_ctx_destroy", ctx);
  W("shmem_ctx_destroy")->CloseLane(ctx->lane);
  delete ctx;
}

int shmem_ctx_get_team(shmem_ctx_t ctx, shmem_team_t* team) {
  if (team == nullptr) return -1;
  if (ctx == SHMEM_CTX_INVALID) {
    *team = SHMEM_TEAM_INVALID;
    return -1;
  }
  *team = ctx->team;
  return 0;
}

}  // extern "C"

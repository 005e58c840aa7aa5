#pragma once

// The PEs of one collective call: a team's, or a legacy active set's
// (PE_start, 2^logPE_stride, PE_size), and the words its barrier counts in.
#include <cstdint>
#include <vector>

#include "shmem/runtime.h"

namespace hixl::shmem {

struct Group {
  const char* api = "";
  std::vector<int> pes;      // world PEs, in the group's order
  int me = -1;               // this PE's index in pes
  uint64_t* sync = nullptr;  // kRounds barrier words (this PE's address), or null: the world's own barrier
  // Where peers count the parts they deliver (broadcast, fcollect,
  // alltoall).  A team: arrivals[i] counts member i's parts, and taken[i]
  // those this PE has waited for (a PE already in a later call counts
  // there, never in place of a slower one's part).  A legacy active set
  // (arrivals null): one word of its pSync, flag, counts every member's
  // (the standard has a pSync reused only after a barrier).
  uint64_t* arrivals = nullptr;
  std::vector<uint64_t>* taken = nullptr;
  uint64_t* flag = nullptr;
  // The world team's: where small reductions gather every source, and its
  // count of them (null elsewhere: reductions read the sources instead).
  unsigned char* small_reduce = nullptr;
  uint64_t* reductions = nullptr;

  int size() const { return static_cast<int>(pes.size()); }
};

// False (and nothing set) when team is SHMEM_TEAM_INVALID; fails when this
// PE is not a member.
bool FromTeam(const char* api, shmem_team_t team, Group* g);
Group FromActiveSet(const char* api, int start, int log_stride, int size, long* pSync);

// Blocks until every PE of g has called it.  quiet: this PE's puts and gets
// complete first, and what every PE put before it is visible after it
// (shmem_barrier); else only the meeting (shmem_sync).
void Sync(const Group& g, bool quiet);

// A team slot that no live team of any PE in g uses, and count - 1 after
// it: every PE of g calls it together.
uint32_t AgreeSlots(const Group& g, uint32_t count);

}  // namespace hixl::shmem

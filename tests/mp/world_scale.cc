// A world as large as this machine holds (the CI runs 256 ranks): every rank
// joins, agrees on the heap, allgathers, barriers, touches a few peers near
// and far, checks what they wrote, and leaves; nothing is refused and nothing
// is lost.  Exit status 0 only when every check held on this rank.
//
//   hixlrun -n 256 --timeout 600 world_scale
#include <hixl/hixl.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

int Fail(const char* what) {
  std::fprintf(stderr, "rank %d: FAILED: %s (last error: %s)\n", hixl_rank(), what, hixl_last_error());
  return 1;
}

constexpr uint64_t Stamp(int from, int to) { return (uint64_t{0x5ca1e} << 40) | (uint64_t(from) << 20) | uint64_t(to); }

}  // namespace

int main() {
  if (hixl_init() != 0) return Fail("hixl_init");
  const int me = hixl_rank(), n = hixl_world_size();

  // Everyone's rank, in order, from one allgather.
  std::vector<int32_t> ranks(static_cast<size_t>(n), -1);
  const int32_t mine = me;
  if (hixl_allgather(&mine, ranks.data(), sizeof(mine)) != 0) return Fail("hixl_allgather");
  for (int r = 0; r < n; ++r) {
    if (ranks[static_cast<size_t>(r)] != r) return Fail("hixl_allgather put a rank's value in another's place");
  }

  // The peers this rank writes to: neighbours and far ones (distinct).
  std::vector<int> to;
  for (int d : {1, n - 1, 16, n / 2}) {
    const int p = (me + d) % n;
    bool seen = p == me;
    for (int q : to) seen = seen || q == p;
    if (!seen) to.push_back(p);
  }
  auto* slots = static_cast<uint64_t*>(hixl_alloc(sizeof(uint64_t) * static_cast<size_t>(n)));
  if (!slots) return Fail("hixl_alloc");
  for (int r = 0; r < n; ++r) slots[r] = 0;
  for (int i = 0; i < 3; ++i) {
    if (hixl_barrier() != 0) return Fail("hixl_barrier");
  }
  std::vector<uint64_t> out(to.size());
  for (size_t i = 0; i < to.size(); ++i) {
    out[i] = Stamp(me, to[i]);
    if (hixl_put(to[i], &out[i], reinterpret_cast<uint64_t>(slots + me), sizeof(uint64_t)) != 0) {
      return Fail("hixl_put");
    }
  }
  if (hixl_fence() != 0) return Fail("hixl_fence");
  if (hixl_barrier() != 0) return Fail("hixl_barrier after the puts");
  // Rank r wrote into our slot r exactly when we are one of its targets.
  for (int r = 0; r < n; ++r) {
    bool expected = false;
    for (int d : {1, n - 1, 16, n / 2}) expected = expected || (r + d) % n == me;
    expected = expected && r != me;
    const uint64_t want = expected ? Stamp(r, me) : 0;
    if (slots[r] != want) {
      std::fprintf(stderr, "rank %d: slot %d holds %#llx, expected %#llx\n", me, r,
                   static_cast<unsigned long long>(slots[r]), static_cast<unsigned long long>(want));
      return 1;
    }
  }
  if (hixl_free(slots) != 0) return Fail("hixl_free");
  if (hixl_finalize() != 0) return Fail("hixl_finalize");
  return 0;
}

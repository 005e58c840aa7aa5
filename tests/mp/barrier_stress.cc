// barrier_stress: hixl_barrier orders memory and ends in time when a rank dies.
//
//   barrier_stress stress      HIXL_TEST_BARRIERS barriers (default 1000); before
//                              barrier i every rank puts a word naming (i, itself)
//                              into every rank's slot for it, in symmetric memory
//                              (mapped by shm peers) and in registered memory (cross-
//                              memory attach or the relay); after it every rank checks
//                              every slot.  Two buffers alternate, so the writes for
//                              barrier i+1 cannot overtake the checks after barrier i
//                              unless the barrier is broken.  Then the same number of
//                              bare barriers, and a barrier after uneven delays.
//   barrier_stress peer-dies   the last rank leaves without finalize after a first
//                              barrier; every other rank's next barrier must fail with
//                              HIXL_ERR_PEER_FAILED (rank 0's naming the dead rank)
//                              within 5 s, long before HIXL_TIMEOUT_MS.
//
// Both modes also check that hixl_init left this process's CPU mask as it
// found it (it may move the thread to a CPU of its own, never binds it),
// and stress that the barriers did too (they move it back there).
//
// Exit status 0 when every check passed.
#include <sched.h>
#include <unistd.h>

#include <hixl/hixl.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int g_rank = -1;

int Fail(const std::string& what) {
  std::fprintf(stderr, "rank %d: FAILED: %s (%s)\n", g_rank, what.c_str(), hixl_last_error());
  return 1;
}

uint64_t Word(uint64_t iter, int from, int buffer) {
  return (iter << 20) ^ (static_cast<uint64_t>(from) << 4) ^ static_cast<uint64_t>(buffer) ^ 0x5a5a000000000000ull;
}

int Stress(int me, int n) {
  const char* b = std::getenv("HIXL_TEST_BARRIERS");
  const uint64_t iters = b ? std::strtoull(b, nullptr, 10) : 1000;
  const auto slots = static_cast<size_t>(n);
  // Symmetric: two buffers of one word per rank.
  auto* sym = static_cast<uint64_t*>(hixl_alloc(2 * slots * sizeof(uint64_t)));
  if (!sym) return Fail("hixl_alloc");
  std::memset(sym, 0, 2 * slots * sizeof(uint64_t));
  // Registered (not symmetric): the same, its address told by allgather.
  std::vector<uint64_t> reg(2 * slots, 0);
  if (hixl_register_memory(reg.data(), reg.size() * sizeof(uint64_t)) != HIXL_SUCCESS) return Fail("register");
  const auto mine = reinterpret_cast<uint64_t>(reg.data());
  std::vector<uint64_t> regs(slots);
  if (hixl_allgather(&mine, regs.data(), sizeof mine) != HIXL_SUCCESS) return Fail("allgather");
  if (hixl_barrier() != HIXL_SUCCESS) return Fail("first barrier");

  const auto start = Clock::now();
  for (uint64_t i = 1; i <= iters; ++i) {
    const int buf = static_cast<int>(i % 2);
    const uint64_t w = Word(i, me, buf);
    for (int r = 0; r < n; ++r) {
      const uint64_t off = (static_cast<uint64_t>(buf) * slots + static_cast<size_t>(me)) * sizeof(uint64_t);
      if (hixl_put(r, &w, reinterpret_cast<uint64_t>(sym) + off, sizeof w) != HIXL_SUCCESS) return Fail("put (heap)");
      if (hixl_put(r, &w, regs[static_cast<size_t>(r)] + off, sizeof w) != HIXL_SUCCESS)
        return Fail("put (registered)");
    }
    // The puts' source is w: complete before it changes (the barrier fences).
    if (hixl_barrier() != HIXL_SUCCESS) return Fail("barrier " + std::to_string(i));
    for (int r = 0; r < n; ++r) {
      const size_t at = static_cast<size_t>(buf) * slots + static_cast<size_t>(r);
      const uint64_t want = Word(i, r, buf);
      const uint64_t got_sym = __atomic_load_n(&sym[at], __ATOMIC_RELAXED);
      const uint64_t got_reg = __atomic_load_n(&reg[at], __ATOMIC_RELAXED);
      if (got_sym != want || got_reg != want) {
        char msg[256];
        std::snprintf(msg, sizeof msg,
                      "after barrier %" PRIu64 ", rank %d's word is %#" PRIx64 " (heap) / %#" PRIx64
                      " (registered), not %#" PRIx64,
                      i, r, got_sym, got_reg, want);
        return Fail(msg);
      }
    }
  }
  const double with_puts = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;

  // Bare barriers, back to back.
  const auto bare_start = Clock::now();
  for (uint64_t i = 0; i < iters; ++i) {
    if (hixl_barrier() != HIXL_SUCCESS) return Fail("bare barrier " + std::to_string(i));
  }
  const double bare = std::chrono::duration<double, std::micro>(Clock::now() - bare_start).count() / iters;

  // Uneven arrival: each rank in turn comes late (it works while the others
  // sleep in the barrier); the word it writes first must be seen after it.
  for (int late = 0; late < n; ++late) {
    uint64_t w = Word(iters + 1 + static_cast<uint64_t>(late), late, 0);
    if (me == late) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // work, not synchronisation
      for (int r = 0; r < n; ++r) {
        if (hixl_put(r, &w, reinterpret_cast<uint64_t>(sym), sizeof w) != HIXL_SUCCESS) return Fail("late put");
      }
    }
    if (hixl_barrier() != HIXL_SUCCESS) return Fail("barrier with rank " + std::to_string(late) + " late");
    if (__atomic_load_n(&sym[0], __ATOMIC_RELAXED) != w) return Fail("the late rank's word is not there");
    if (hixl_barrier() != HIXL_SUCCESS) return Fail("barrier after the late round");
  }

  if (hixl_deregister_memory(reg.data()) != HIXL_SUCCESS) return Fail("deregister");
  if (hixl_free(sym) != HIXL_SUCCESS) return Fail("free");
  if (hixl_finalize() != HIXL_SUCCESS) return Fail("finalize");
  std::printf("rank %d: %" PRIu64 " barriers with puts (%.1f us each) and %" PRIu64
              " bare ones (%.1f us each) of %d ranks: all checks passed\n",
              me, iters, with_puts, iters, bare, n);
  return 0;
}

int PeerDies(int me, int n) {
  if (n < 2) return Fail("peer-dies needs at least 2 ranks");
  if (hixl_barrier() != HIXL_SUCCESS) return Fail("first barrier");
  const int dead = n - 1;
  if (me == dead) _exit(0);  // gone, without finalize
  const auto start = Clock::now();
  const int rc = hixl_barrier();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  if (rc != HIXL_ERR_PEER_FAILED) return Fail(std::string("the barrier returned ") + hixl_strerror(rc));
  // Rank 0 hosts the store and sees the dead rank go (the store names every
  // rank that left, as another survivor that learnt of the death first may
  // have left as well, and be seen going first); another survivor may
  // instead see rank 0 leave first (it returns as soon as it has checked).
  const std::string name = "rank " + std::to_string(dead);
  if (me == 0 && !std::strstr(hixl_last_error(), name.c_str())) return Fail("the error does not name " + name);
  if (ms > 5000) return Fail("the barrier failed only after " + std::to_string(ms) + " ms");
  std::printf("rank %d: the barrier failed after %lld ms, as it should: %s\n", me, static_cast<long long>(ms),
              hixl_last_error());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "stress" && mode != "peer-dies") {
    std::fprintf(stderr, "usage: barrier_stress stress|peer-dies\n");
    return 2;
  }
  cpu_set_t before, after;
  CPU_ZERO(&before);
  CPU_ZERO(&after);
  if (sched_getaffinity(0, sizeof before, &before) != 0) return Fail("sched_getaffinity before hixl_init");
  if (hixl_init() != HIXL_SUCCESS) {
    std::fprintf(stderr, "barrier_stress: hixl_init failed: %s\n", hixl_last_error());
    return 1;
  }
  g_rank = hixl_rank();
  if (sched_getaffinity(0, sizeof after, &after) != 0) return Fail("sched_getaffinity after hixl_init");
  if (!CPU_EQUAL(&before, &after)) {
    return Fail("hixl_init changed the CPU mask: " + std::to_string(CPU_COUNT(&before)) + " CPUs before, " +
                std::to_string(CPU_COUNT(&after)) + " after");
  }
  if (mode == "stress") {
    const int rc = Stress(g_rank, hixl_world_size());
    // The barriers move a rank back to its own CPU after a long wait, and
    // give the mask back as they found it.
    if (rc == 0 && (sched_getaffinity(0, sizeof after, &after) != 0 || !CPU_EQUAL(&before, &after))) {
      return Fail("the barriers changed the CPU mask");
    }
    return rc;
  }
  // The world cannot be finalized with a rank dead: it is abandoned, and the
  // process leaves without running destructors under the transports'
  // threads (or reporting the abandoned world as leaked).
  const int rc = PeerDies(g_rank, hixl_world_size());
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(rc);
}

// scale_hixl: what a world costs as it grows, the hixl side of
// bench/scale_vs_mpi (bench/scale_mpi.cc is the MPI side, same protocol).
//
//   hixlrun -n 64 build/bench/scale_hixl --barriers 20
//
// Every rank: times hixl_init; runs --barriers barriers, timing each; puts
// 8 bytes into every other rank's symmetric block (the first touch of every
// peer), fences and barriers, timing that; verifies what it received; the
// same all-to-all again (every peer touched); as many 8-byte allgathers as
// barriers, timing each; times hixl_free of the block (every peer is told)
// and hixl_finalize.  Rank 0 prints one JSON line: the slowest rank's init,
// first and second all-to-all, free and (rank 0's) finalize, the median
// barrier and allgather over all ranks, and the
// median rank's resident memory and descriptors added per peer by the first
// touch.
#include <dirent.h>
#include <hixl/hixl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "scale_hixl: %s: %s\n", what, hixl_last_error());
  std::exit(1);
}

// This process's resident memory in KiB and its open descriptors (for the
// peer-state figures of docs/scale.md).
long RssKib() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib;
}

long OpenFds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  long n = 0;
  while (readdir(d)) ++n;
  closedir(d);
  return n - 3;  // ".", ".." and the directory's own descriptor
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int barriers = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--barriers") == 0 && i + 1 < argc) {
      barriers = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: hixlrun -n N scale_hixl [--barriers K]\n");
      return 2;
    }
  }
  if (barriers < 1 || barriers > 100000) {
    std::fprintf(stderr, "scale_hixl: --barriers must be 1..100000\n");
    return 2;
  }
  const auto t0 = Clock::now();
  if (hixl_init() != 0) Fail("hixl_init");
  const double init_s = Since(t0);
  const int me = hixl_rank(), n = hixl_world_size();

  auto* block = static_cast<uint64_t*>(hixl_alloc(sizeof(uint64_t) * static_cast<size_t>(n)));
  if (!block) Fail("hixl_alloc");
  std::fill(block, block + n, ~uint64_t{0});
  if (hixl_barrier() != 0) Fail("hixl_barrier");

  std::vector<double> times;
  for (int i = 0; i < barriers; ++i) {
    const auto t = Clock::now();
    if (hixl_barrier() != 0) Fail("hixl_barrier");
    times.push_back(Since(t));
  }
  const double barrier_s = Median(times);

  // The first touch of every peer: each rank's 8 bytes land in slot `me` of
  // every other rank's block.
  const uint64_t mine = 0x5ca1e00000000000ULL + static_cast<uint64_t>(me);
  // Puts to every peer, fence, barrier: its seconds.
  auto alltoall = [&] {
    const auto t = Clock::now();
    for (int k = 1; k < n; ++k) {
      const int peer = (me + k) % n;
      if (hixl_put(peer, &mine, reinterpret_cast<uint64_t>(block + me), sizeof(mine)) != 0) Fail("hixl_put");
    }
    if (hixl_fence() != 0) Fail("hixl_fence");
    if (hixl_barrier() != 0) Fail("hixl_barrier");
    return Since(t);
  };
  // The peer-state figures are read outside the timed all-to-all, with a
  // barrier between: reading /proc/self/fd costs a rank with hundreds of
  // descriptors milliseconds of CPU, which the ranks still in the all-to-all
  // would otherwise lose to it on an oversubscribed host.
  const long rss0 = RssKib(), fds0 = OpenFds();
  if (hixl_barrier() != 0) Fail("hixl_barrier");
  const double alltoall_s = alltoall();
  if (hixl_barrier() != 0) Fail("hixl_barrier");
  const double peer_kib = n > 1 ? static_cast<double>(RssKib() - rss0) / (n - 1) : 0;
  const double peer_fds = n > 1 ? static_cast<double>(OpenFds() - fds0) / (n - 1) : 0;
  if (hixl_barrier() != 0) Fail("hixl_barrier");
  for (int r = 0; r < n; ++r) {
    if (r != me && block[r] != 0x5ca1e00000000000ULL + static_cast<uint64_t>(r)) {
      std::fprintf(stderr, "scale_hixl: rank %d: slot %d holds %#llx\n", me, r,
                   static_cast<unsigned long long>(block[r]));
      return 1;
    }
  }

  // The same again, every peer touched: what the first touch added.
  const double again_s = alltoall();

  // 8-byte allgathers, as many as the barriers, every peer touched already.
  std::vector<uint64_t> gathered(static_cast<size_t>(n));
  times.clear();
  for (int i = 0; i < barriers; ++i) {
    const auto t = Clock::now();
    if (hixl_allgather(&mine, gathered.data(), sizeof(mine)) != 0) Fail("hixl_allgather");
    times.push_back(Since(t));
  }
  const double allgather_s = Median(times);
  for (int r = 0; r < n; ++r) {
    if (gathered[static_cast<size_t>(r)] != 0x5ca1e00000000000ULL + static_cast<uint64_t>(r)) Fail("allgather data");
  }

  // Freeing the block every peer touched: each hears of it, and answers.
  const auto t4 = Clock::now();
  if (hixl_free(block) != 0) Fail("hixl_free");
  const double free_s = Since(t4);

  double mine_stats[8] = {init_s, barrier_s, alltoall_s, peer_kib, peer_fds, allgather_s, again_s, free_s};
  constexpr size_t kStats = 8;
  std::vector<double> all(static_cast<size_t>(n) * kStats);
  if (hixl_allgather(mine_stats, all.data(), sizeof(mine_stats)) != 0) Fail("hixl_allgather");
  const auto t2 = Clock::now();
  if (hixl_finalize() != 0) Fail("hixl_finalize");
  const double finalize_s = Since(t2);
  if (me == 0) {
    double init_max = 0, alltoall_max = 0, again_max = 0, free_max = 0;
    std::vector<double> bars, kib, fds, gathers;
    for (int r = 0; r < n; ++r) {
      const double* st = &all[static_cast<size_t>(r) * kStats];
      init_max = std::max(init_max, st[0]);
      bars.push_back(st[1]);
      alltoall_max = std::max(alltoall_max, st[2]);
      kib.push_back(st[3]);
      fds.push_back(st[4]);
      gathers.push_back(st[5]);
      again_max = std::max(again_max, st[6]);
      free_max = std::max(free_max, st[7]);
    }
    std::printf(
        "{\"lib\": \"hixl\", \"ranks\": %d, \"init_s\": %.6f, \"barrier_us\": %.3f, \"first_alltoall_ms\": %.4f, "
        "\"finalize_rank0_s\": %.6f, \"peer_state_kib\": %.1f, \"peer_fds\": %.2f, \"allgather_us\": %.3f, "
        "\"second_alltoall_ms\": %.4f, \"free_ms\": %.4f}\n",
        n, init_max, Median(bars) * 1e6, alltoall_max * 1e3, finalize_s, Median(kib), Median(fds),
        Median(gathers) * 1e6, again_max * 1e3, free_max * 1e3);
  }
  return 0;
}

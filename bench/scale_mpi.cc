// scale_mpi: the MPI side of bench/scale_vs_mpi, the same protocol as
// bench/scale_hixl.cc: MPI_Init; --barriers MPI_Barriers, each timed; every
// rank puts 8 bytes into every other rank's window (MPI_Win_allocate,
// MPI_Win_lock_all, MPI_Put, MPI_Win_unlock_all) and barriers, timed;
// verification; MPI_Finalize.
//
//   mpirun --allow-run-as-root --oversubscribe -np 64 build/bench/scale_mpi --barriers 20
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const auto t0 = Clock::now();
  MPI_Init(&argc, &argv);
  const double init_s = Since(t0);
  int me = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int barriers = 20;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--barriers") == 0 && i + 1 < argc) barriers = std::atoi(argv[++i]);
  }
  if (barriers < 1 || barriers > 100000) MPI_Abort(MPI_COMM_WORLD, 2);

  uint64_t* block = nullptr;
  MPI_Win win;
  MPI_Win_allocate(static_cast<MPI_Aint>(sizeof(uint64_t)) * n, sizeof(uint64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &block,
                   &win);
  std::fill(block, block + n, ~uint64_t{0});
  MPI_Barrier(MPI_COMM_WORLD);

  std::vector<double> times;
  for (int i = 0; i < barriers; ++i) {
    const auto t = Clock::now();
    MPI_Barrier(MPI_COMM_WORLD);
    times.push_back(Since(t));
  }
  const double barrier_s = Median(times);

  const uint64_t mine = 0x5ca1e00000000000ULL + static_cast<uint64_t>(me);
  const auto t1 = Clock::now();
  MPI_Win_lock_all(0, win);
  for (int k = 1; k < n; ++k) {
    const int peer = (me + k) % n;
    MPI_Put(&mine, 1, MPI_UINT64_T, peer, me, 1, MPI_UINT64_T, win);
  }
  MPI_Win_unlock_all(win);
  MPI_Barrier(MPI_COMM_WORLD);
  const double alltoall_s = Since(t1);
  MPI_Win_lock(MPI_LOCK_SHARED, me, 0, win);  // see the others' puts in our own window
  int bad = -1;
  for (int r = 0; r < n; ++r) {
    if (r != me && block[r] != 0x5ca1e00000000000ULL + static_cast<uint64_t>(r)) bad = r;
  }
  MPI_Win_unlock(me, win);
  if (bad >= 0) {
    std::fprintf(stderr, "scale_mpi: rank %d: slot %d is wrong\n", me, bad);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  std::vector<uint64_t> gathered(static_cast<size_t>(n));
  times.clear();
  for (int i = 0; i < barriers; ++i) {
    const auto t = Clock::now();
    MPI_Allgather(&mine, 1, MPI_UINT64_T, gathered.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    times.push_back(Since(t));
  }
  const double allgather_s = Median(times);

  constexpr int kStats = 4;
  double mine_stats[kStats] = {init_s, barrier_s, alltoall_s, allgather_s};
  std::vector<double> all(static_cast<size_t>(n) * kStats);
  MPI_Gather(mine_stats, kStats, MPI_DOUBLE, all.data(), kStats, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Win_free(&win);
  const auto t2 = Clock::now();
  MPI_Finalize();
  const double finalize_s = Since(t2);
  if (me == 0) {
    double init_max = 0, alltoall_max = 0;
    std::vector<double> bars, gathers;
    for (int r = 0; r < n; ++r) {
      const double* st = &all[static_cast<size_t>(r) * kStats];
      init_max = std::max(init_max, st[0]);
      bars.push_back(st[1]);
      alltoall_max = std::max(alltoall_max, st[2]);
      gathers.push_back(st[3]);
    }
    std::printf(
        "{\"lib\": \"mpi\", \"ranks\": %d, \"init_s\": %.6f, \"barrier_us\": %.3f, \"first_alltoall_ms\": %.4f, "
        "\"finalize_rank0_s\": %.6f, \"allgather_us\": %.3f}\n",
        n, init_max, Median(bars) * 1e6, alltoall_max * 1e3, finalize_s, Median(gathers) * 1e6);
  }
  return 0;
}

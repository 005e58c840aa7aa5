// hixl_collectives: the time of hixl_barrier, back to back.
//
//   hixlrun -n 4 build/bench/hixl_collectives --iters 1000 --reps 3
//
// Every rank runs --reps repetitions of --iters barriers (after one of
// warm-up); rank 0 prints the median time per barrier (bench/barrier_timing.h).
// Its MPI reference is mpi_barrier; bench/barrier_vs_mpi runs both in turn.
#include <hixl/hixl.h>

#include "barrier_timing.h"

int main(int argc, char** argv) {
  hixl_bench::BarrierOptions o;
  if (!hixl_bench::ParseBarrierOptions(argc, argv, "hixl_collectives", &o)) return 2;
  if (hixl_init() != HIXL_SUCCESS) {
    std::fprintf(stderr, "hixl_collectives: hixl_init failed: %s\n", hixl_last_error());
    return 1;
  }
  const std::vector<double> per = hixl_bench::TimeBarriers(o, [] { return hixl_barrier() == HIXL_SUCCESS; });
  if (per.empty()) {
    std::fprintf(stderr, "hixl_collectives: rank %d: hixl_barrier failed: %s\n", hixl_rank(), hixl_last_error());
    return 1;
  }
  if (hixl_rank() == 0) hixl_bench::PrintBarrierLine("hixl_barrier", hixl_world_size(), o, per);
  if (hixl_finalize() != HIXL_SUCCESS) {
    std::fprintf(stderr, "hixl_collectives: hixl_finalize failed: %s\n", hixl_last_error());
    return 1;
  }
  return 0;
}

// mpi_barrier: the MPI reference for hixl_collectives: MPI_Barrier, timed
// the same way (bench/barrier_timing.h).
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/mpi_barrier --iters 1000 --reps 3
#include <mpi.h>

#include "barrier_timing.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  hixl_bench::BarrierOptions o;
  if (!hixl_bench::ParseBarrierOptions(argc, argv, "mpi_barrier", &o)) {
    MPI_Finalize();
    return 2;
  }
  const std::vector<double> per =
      hixl_bench::TimeBarriers(o, [] { return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS; });
  if (rank == 0 && !per.empty()) hixl_bench::PrintBarrierLine("MPI_Barrier", size, o, per);
  MPI_Finalize();
  return per.empty() ? 1 : 0;
}

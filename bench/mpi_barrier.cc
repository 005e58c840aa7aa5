// mpi_barrier: the MPI reference for hixl_collectives: MPI_Barrier (or
// MPI_Allgather, MPI_Bcast with --op), timed the same way
// (bench/barrier_timing.h).
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/mpi_barrier --iters 1000 --reps 3
#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

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
  const int bytes = static_cast<int>(o.bytes);
  std::vector<char> send(static_cast<size_t>(bytes), static_cast<char>(rank));
  std::vector<char> recv(static_cast<size_t>(bytes) * static_cast<size_t>(size));
  std::function<bool()> op = [] { return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS; };
  std::string name = "MPI_Barrier";
  if (o.op == "allgather") {
    name = "MPI_Allgather";
    op = [&] {
      return MPI_Allgather(send.data(), bytes, MPI_BYTE, recv.data(), bytes, MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS;
    };
  } else if (o.op == "broadcast") {
    name = "MPI_Bcast";
    op = [&] { return MPI_Bcast(send.data(), bytes, MPI_BYTE, 0, MPI_COMM_WORLD) == MPI_SUCCESS; };
  }
  const std::vector<double> per = hixl_bench::TimeBarriers(o, op);
  if (rank == 0 && !per.empty()) hixl_bench::PrintBarrierLine(name.c_str(), size, o, per);
  MPI_Finalize();
  return per.empty() ? 1 : 0;
}

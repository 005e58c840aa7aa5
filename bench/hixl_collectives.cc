// hixl_collectives: the time of hixl_barrier (or hixl_allgather, or
// hixl_broadcast from rank 0, of --bytes), back to back.
//
//   hixlrun -n 4 build/bench/hixl_collectives --iters 1000 --reps 3 [--op allgather --bytes 8]
//
// Every rank runs --reps repetitions of --iters calls (after one of
// warm-up); rank 0 prints the median time per call (bench/barrier_timing.h).
// Its MPI reference is mpi_barrier; bench/barrier_vs_mpi runs both in turn.
#include <hixl/hixl.h>

#include <functional>
#include <string>
#include <vector>

#include "barrier_timing.h"

int main(int argc, char** argv) {
  hixl_bench::BarrierOptions o;
  if (!hixl_bench::ParseBarrierOptions(argc, argv, "hixl_collectives", &o)) return 2;
  if (hixl_init() != HIXL_SUCCESS) {
    std::fprintf(stderr, "hixl_collectives: hixl_init failed: %s\n", hixl_last_error());
    return 1;
  }
  const size_t bytes = static_cast<size_t>(o.bytes);
  std::vector<char> send(bytes, static_cast<char>(hixl_rank()));
  std::vector<char> recv(bytes * static_cast<size_t>(hixl_world_size()));
  std::function<bool()> op = [] { return hixl_barrier() == HIXL_SUCCESS; };
  if (o.op == "allgather") {
    op = [&] { return hixl_allgather(send.data(), recv.data(), bytes) == HIXL_SUCCESS; };
  } else if (o.op == "broadcast") {
    op = [&] { return hixl_broadcast(0, send.data(), bytes) == HIXL_SUCCESS; };
  }
  const std::string name = "hixl_" + o.op;
  const std::vector<double> per = hixl_bench::TimeBarriers(o, op);
  if (per.empty()) {
    std::fprintf(stderr, "hixl_collectives: rank %d: %s failed: %s\n", hixl_rank(), name.c_str(), hixl_last_error());
    return 1;
  }
  if (o.op == "allgather") {
    for (int r = 0; r < hixl_world_size(); ++r) {
      if (recv[static_cast<size_t>(r) * bytes] != static_cast<char>(r)) {
        std::fprintf(stderr, "hixl_collectives: allgather: wrong data from rank %d\n", r);
        return 1;
      }
    }
  }
  if (hixl_rank() == 0) hixl_bench::PrintBarrierLine(name.c_str(), hixl_world_size(), o, per);
  if (hixl_finalize() != HIXL_SUCCESS) {
    std::fprintf(stderr, "hixl_collectives: hixl_finalize failed: %s\n", hixl_last_error());
    return 1;
  }
  return 0;
}

// put_get_bw: the bandwidth of one large put and one large get between
// ranks 0 and 1, for docs/ucx.md and tests/mp/ucx_perf.sh.
//
//   hixlrun -n 2 put_get_bw [BYTES (default 64 MiB)] [REPS (default 20)]
//
// Rank 0 times REPS rounds of `put(1, BYTES); fence` and REPS rounds of
// `get(1, BYTES); fence` on memory rank 1 registered, checks the data of the
// last round of each, and prints the median and best rate of each as
//   put <bytes> B: median <x> GB/s, best <y> GB/s (... <t> us per put + fence)
//   get <bytes> B: median <x> GB/s, best <y> GB/s (... <t> us per get + fence)
// (GB = 1e9 bytes), and the median time of one op + fence.  Exit status 0 on
// success, 1 on any failure.
#include <sys/mman.h>

#include <hixl/hixl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mp_util.h"

namespace {

using Clock = std::chrono::steady_clock;

// Ends this rank at once: no collective clean-up with a peer that may be
// waiting elsewhere (hixlrun stops the other rank).
int Fail(const char* what, const hixl::Status& s) {
  std::fprintf(stderr, "put_get_bw: %s: %s\n", what, s.ToString().c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

void* MapBytes(size_t n) {
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : size_t{64} << 20;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  if (bytes == 0 || reps <= 0) {
    std::fprintf(stderr, "usage: put_get_bw [BYTES] [REPS]\n");
    return 2;
  }
  auto world = hixl::World::Init();
  if (!world.ok()) return Fail("init", world.status());
  if (world->size() < 2) {
    std::fprintf(stderr, "put_get_bw: run with 2 ranks\n");
    return 2;
  }
  const int me = world->rank();
  auto* mem = static_cast<uint8_t*>(MapBytes(bytes));
  auto* local = static_cast<uint8_t*>(MapBytes(bytes));
  auto* got = static_cast<uint8_t*>(MapBytes(bytes));
  if (!mem || !local || !got) return Fail("mmap", hixl::Status(hixl::Errc::kNoMemory, "no memory"));
  hixl::test::Fill(mem, bytes, 1000 + me);
  hixl::test::Fill(local, bytes, 2000 + me);
  if (auto s = world->RegisterMemory(mem, bytes); !s.ok()) return Fail("register", s);
  auto bases = world->Allgather(reinterpret_cast<uint64_t>(mem));
  if (!bases.ok()) return Fail("allgather", bases.status());
  const uint64_t remote = (*bases)[1];
  int rc = 0;
  if (me == 0) {
    for (const char* op : {"put", "get"}) {
      const bool put = op[0] == 'p';
      std::vector<double> rates;
      for (int i = -1; i < reps; ++i) {  // round -1 warms up (connection, keys)
        if (!put && i == reps - 1) std::memset(got, 0, bytes);
        auto t0 = Clock::now();
        hixl::Status s = put ? world->Put(1, local, remote, bytes) : world->Get(1, remote, got, bytes);
        if (s.ok()) s = world->Fence();
        auto t1 = Clock::now();
        if (!s.ok()) return Fail(op, s);
        if (i >= 0) rates.push_back(static_cast<double>(bytes) / std::chrono::duration<double>(t1 - t0).count() / 1e9);
      }
      const double median = Median(rates);
      std::printf("%s %zu B: median %.2f GB/s, best %.2f GB/s (%d rounds; median %.1f us per %s + fence)\n", op, bytes,
                  median, *std::max_element(rates.begin(), rates.end()), reps,
                  static_cast<double>(bytes) / median / 1e3, op);
      std::fflush(stdout);
      // Rank 1's memory holds what the puts wrote.
      if (!put && hixl::test::FirstMismatch(got, bytes, 2000 + 0) != -1) {
        return Fail("get", hixl::Status(hixl::Errc::kInternal, "the data of the get is wrong"));
      }
    }
  }
  if (auto s = world->Barrier(); !s.ok()) return Fail("barrier", s);
  if (me == 1 && hixl::test::FirstMismatch(mem, bytes, 2000 + 0) != -1) {
    std::fprintf(stderr, "put_get_bw: the data of the put is wrong\n");
    rc = 1;
  }
  if (auto s = world->Barrier(); !s.ok()) return Fail("barrier", s);
  if (auto s = world->DeregisterMemory(mem); !s.ok()) return Fail("deregister", s);
  if (auto s = world->Finalize(); !s.ok()) return Fail("finalize", s);
  return rc;
}

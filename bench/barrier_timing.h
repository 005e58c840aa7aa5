// What hixl_collectives and its MPI reference (mpi_barrier) share: the
// options and the timing of back-to-back barriers, so both measure the same
// thing the same way.  Header-only; no hixl or MPI names here.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace hixl_bench {

struct BarrierOptions {
  long iters = 1000;  // barriers per repetition
  long reps = 3;      // timed repetitions (after one of warm-up)
  // What is timed: barrier, allgather (bytes from every rank) or broadcast
  // (bytes from rank 0).
  std::string op = "barrier";
  long bytes = 8;
};

// --iters N --reps N --op barrier|allgather|broadcast --bytes N; false (and
// a message) on anything else.
inline bool ParseBarrierOptions(int argc, char** argv, const char* prog, BarrierOptions* o) {
  for (int i = 1; i < argc; i += 2) {  // each option takes one value
    const std::string a = argv[i];
    bool ok = i + 1 < argc;
    if (ok && a == "--op") {
      o->op = argv[i + 1];
      ok = o->op == "barrier" || o->op == "allgather" || o->op == "broadcast";
    } else {
      long* into = a == "--iters" ? &o->iters : a == "--reps" ? &o->reps : a == "--bytes" ? &o->bytes : nullptr;
      char* end = nullptr;
      ok = ok && into && (*into = std::strtol(argv[i + 1], &end, 10)) > 0 && *end == '\0';
    }
    if (!ok) {
      std::fprintf(stderr,
                   "usage: %s [--iters N (1000)] [--reps N (3)] [--op barrier|allgather|broadcast] "
                   "[--bytes N (8)]\n",
                   prog);
      return false;
    }
  }
  return true;
}

// Times o.reps repetitions of o.iters barriers (after one repetition of
// warm-up), each started by one extra barrier; returns the time per
// barrier of each repetition, in microseconds.  `barrier` returns false on
// failure, which ends the run (empty result).
inline std::vector<double> TimeBarriers(const BarrierOptions& o, const std::function<bool()>& barrier) {
  std::vector<double> per;
  for (long r = 0; r <= o.reps; ++r) {
    if (!barrier()) return {};
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < o.iters; ++i) {
      if (!barrier()) return {};
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) per.push_back(us / static_cast<double>(o.iters));
  }
  return per;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The line bench/barrier_vs_mpi reads:
// "<what> ranks=N bytes=B iters=I reps=R median_us=X reps_us=a,b,c".
inline void PrintBarrierLine(const char* what, int ranks, const BarrierOptions& o, const std::vector<double>& per) {
  std::string all;
  for (double v : per) {
    char one[32];
    std::snprintf(one, sizeof one, "%s%.3f", all.empty() ? "" : ",", v);
    all += one;
  }
  std::printf("%s ranks=%d bytes=%ld iters=%ld reps=%ld median_us=%.3f reps_us=%s\n", what, ranks,
              o.op == "barrier" ? 0 : o.bytes, o.iters, o.reps, Median(per), all.c_str());
  std::fflush(stdout);
}

}  // namespace hixl_bench

// hixl_perf: latency, bandwidth and message rate of hixl put and get; the
// latency of put-with-signal; the latency and rate of remote atomics.
//
//   hixlrun -n 2 build/bench/hixl_perf [--min 8] [--max 1G] [--output r.json]
//
// For every (pattern, memory kind, operation, size) it measures:
//   * latency: a timed batch of `op; fence` pairs, per pair;
//   * bandwidth: a timed batch of back-to-back ops and one fence at the end;
//   * message rate (sizes up to --rate-max): the bandwidth batch's ops/s.
// put_signal (sizes up to --signal-max, one-to-one): a ping-pong between
// ranks 0 and 1.  Each side puts SIZE bytes with a signal (SET to the round
// number) into the other's memory, and the other waits for the signal with
// hixl_wait_until, checks that the data is there and answers the same way;
// the figure is half the round trip, i.e. the time from starting a put with
// signal until the target has seen the signal (as osu_latency's for MPI).
// fetch_add: ranks 1..N-1 add 1 to one 64-bit word of rank 0 with
// hixl_atomic_fetch_add; latency is rank 1's time per call alone (the call
// returns the old value, so it is complete when it returns); the rate is
// every worker's calls together, back to back, aggregated.
// Each figure is the median over --reps batches, with min/max and p10/p90,
// after a warm-up that also picks the batch length (--batch-ms).  After every
// timed batch the data is verified byte by byte on the rank that received
// it; any mismatch ends the run with exit status 1.
//
// Patterns: one-to-one (rank 0 works on rank 1's memory) and many-to-one
// (every rank but 0 works on rank 0's memory: the parameter-server pattern;
// each worker puts into a slot of its own, gets read the same block).  For
// many-to-one, bandwidth and message rate are the aggregate (all bytes over
// the slowest worker's time) and latency is the slowest worker's.
//
// References: a single-core memcpy of the same sizes is measured in the same
// run (rank 0, the same protocol); two-sided send/recv figures (MPI, gloo)
// are read from the JSON files that bench/mpi_pingpong and bench/gloo_ref.py
// write (--ref FILE), and every hixl figure is printed with its ratio to each.
// bench/run_all runs all of them and merges the results.
//
// Exit status: 0 on success; 1 on a failure or a verification mismatch;
// 2 on a usage error; 77 when the selected transport is not built in.
//
// This file holds the command line and main(); perf_bench.h lists the rest.
#include <hixl/hixl.hpp>

#include <cstdio>
#include <cstdlib>

#include "bench_common.h"
#include "engine_batch.h"
#include "perf_bench.h"

using namespace hixl_perf;  // NOLINT(build/namespaces): the benchmark's own types

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{
      "hixl_perf: latency, bandwidth and message rate of hixl put/get, put-with-signal latency and remote "
      "atomic (fetch_add) latency and rate, with a memcpy reference measured in the same run and two-sided "
      "references (MPI, gloo) read with --ref.\n"
      "Run it with hixlrun:  hixlrun -n 2 hixl_perf --max 1G --output r.json"};
  opt.sizes.AddTo(app);
  app.add_option("--ops", opt.ops,
                 "Operations: put, get; put_signal (one-to-one ping-pong: rank 0 puts with a signal, rank 1 waits "
                 "for it with hixl_wait_until and answers the same way; latency = half the round trip, sizes up to "
                 "--signal-max); fetch_add (ranks 1..N-1 on one word of rank 0: latency of one call by rank 1 "
                 "alone, and the aggregate rate of all of them at once)")
      ->delimiter(',')
      ->check(CLI::IsMember({"put", "get", "put_signal", "fetch_add"}))
      ->capture_default_str();
  app.add_option("--mem", opt.mems, "Memory kinds: sym (hixl_alloc), reg (hixl_register_memory)")
      ->delimiter(',')
      ->check(CLI::IsMember({"sym", "reg"}))
      ->capture_default_str();
  app.add_option("--pattern", opt.patterns,
                 "one (rank 0 -> rank 1), many (ranks 1..N-1 -> rank 0), auto (one, and many when N > 2)")
      ->delimiter(',')
      ->check(CLI::IsMember({"one", "many", "auto"}))
      ->capture_default_str();
  app.add_option("--measure", opt.measures, "lat (op + fence each), bw (ops, then one fence)")
      ->delimiter(',')
      ->check(CLI::IsMember({"lat", "bw"}))
      ->capture_default_str();
  app.add_option("--many-max", opt.many_max, "Largest size for many-to-one (default: the largest size)");
  app.add_option("--reps", opt.reps, "Timed batches per figure")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--warmup", opt.warmup, "Warm-up operations before each figure")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--batch-ms", opt.batch_ms, "Target length of one timed batch")
      ->check(CLI::Range(0.01, 100000.0))
      ->capture_default_str();
  app.add_option("--max-iters", opt.max_iters, "Most operations in one batch")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--rate-max", opt.rate_max, "Report the message rate up to this size")->capture_default_str();
  app.add_option("--signal-max", opt.signal_max, "Measure put_signal up to this size")->capture_default_str();
  app.add_flag("--thp", opt.thp,
               "Back the benchmark's own buffers (local, registered, memcpy) with transparent "
               "huge pages (madvise)");
  app.add_flag("--no-memcpy", opt.no_memcpy, "Skip the memcpy reference");
  app.add_flag("--touch-after-register", opt.touch_after_register,
               "Write registered memory only after registering it (by default it is written before, as an "
               "application that registers a buffer already in use, e.g. a tensor, does: its pages exist, and "
               "hixl's huge-page advice, HIXL_SHM_THP, cannot change them)");
  bool touch_before = false;  // the default now; still accepted
  app.add_flag("--touch-before-register", touch_before, "The default (kept for old command lines)")->group("");
  app.add_option("--copy-threads", opt.copy_threads,
                 "Set HIXL_COPY_THREADS for this run: threads that copy one large same-host transfer (auto, "
                 "or 1 to 64)");
  app.add_option("--output,-o", opt.output, "Write the results to FILE: JSON, or CSV when FILE ends in .csv");
  app.add_option("--ref", opt.refs, "A reference's JSON from bench/mpi_pingpong or bench/gloo_ref.py (repeatable)");
  app.add_flag("--corrupt-for-test", opt.corrupt, "Testing: damage received data so that verification must fail")
      ->group("");
  bool engine_mode = false;
  std::vector<std::string> engine_blocks{"4K", "32K", "256K", "2M"};
  std::string engine_batch = "64M";
  app.add_flag("--engine", engine_mode,
               "Instead: batch bandwidth of the engine API (hixl::Engine): rank 1's engine writes and reads batches "
               "of scattered blocks into rank 0's, against the same blocks as world puts/gets and memcpy "
               "(transport: HIXL_TRANSPORT)")
      ->group("Engine");
  app.add_option("--engine-blocks", engine_blocks, "With --engine: block sizes")
      ->delimiter(',')
      ->group("Engine")
      ->capture_default_str();
  app.add_option("--engine-batch", engine_batch, "With --engine: bytes per batch")
      ->group("Engine")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (touch_before && opt.touch_after_register) {
    std::fprintf(stderr, "hixl_perf: --touch-before-register and --touch-after-register contradict each other\n");
    return kExitUsage;
  }
  // Before hixl_init: the shm transport reads it when it starts.
  if (!opt.copy_threads.empty()) ::setenv("HIXL_COPY_THREADS", opt.copy_threads.c_str(), 1);
  auto world = hixl::World::Init();
  if (!world.ok()) {
    std::fprintf(stderr, "hixl_perf: hixl_init failed: %s\n", world.status().ToString().c_str());
    return world.status().code() == hixl::Errc::kUnsupported ? kExitUnsupported : kExitFailure;
  }
  int rc = 0;
  if (engine_mode) {
    EngineBatchOptions eo;
    for (const std::string& b : engine_blocks) {
      auto v = ParseSize(b);
      if (!v || *v == 0) {
        std::fprintf(stderr, "hixl_perf: --engine-blocks: '%s' is not a size\n", b.c_str());
        return kExitUsage;
      }
      eo.block_sizes.push_back(*v);
    }
    auto batch = ParseSize(engine_batch);
    if (!batch || *batch == 0) {
      std::fprintf(stderr, "hixl_perf: --engine-batch: '%s' is not a size\n", engine_batch.c_str());
      return kExitUsage;
    }
    eo.batch_bytes = *batch;
    eo.reps = opt.reps;
    if (const char* t = std::getenv("HIXL_TRANSPORT"); t && *t) eo.transport = t;
    bool ok = true;
    json rows = RunEngineBatch(world.value(), eo, &ok);
    if (world->rank() == 1 && !opt.output.empty() &&
        !WriteJson(opt.output, json{{"machine", Machine()}, {"date", NowIso()}, {"engine_batch", rows}})) {
      ok = false;
    }
    rc = ok ? 0 : kExitFailure;
  } else {
    rc = Bench(world.value(), std::move(opt)).Run();
  }
  if (hixl::Status s = world->Finalize(); !s.ok()) {
    std::fprintf(stderr, "hixl_perf: hixl_finalize failed: %s\n", s.ToString().c_str());
    if (rc == 0) rc = kExitFailure;
  }
  return rc;
}

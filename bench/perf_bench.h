// hixl_perf: what its parts share: the options, the enums of what is
// measured, a result row, and the Bench class, whose methods live in
// perf_run.cc (options, memory, the run), perf_transfer.cc (put/get latency,
// bandwidth and rate; the memcpy reference), perf_signal_atomic.cc
// (put_signal and fetch_add) and perf_report.cc (tables and JSON/CSV).
#pragma once

#include <hixl/hixl.hpp>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.h"

namespace hixl_perf {

using namespace hixl_bench;  // NOLINT(build/namespaces): the benchmark's own helpers

constexpr int kExitFailure = 1;
constexpr int kExitUnsupported = 77;
constexpr int kExitUsage = 2;

// A two-sided reference (bench/mpi_pingpong, bench/gloo_ref.py): its
// bandwidth and latency medians by size.
struct Reference {
  std::string name, label, file;
  std::map<uint64_t, double> bw, lat;
};

struct Options {
  SizeOptions sizes;
  std::string many_max;
  std::vector<std::string> ops{"put", "get", "put_signal", "fetch_add"}, mems{"sym", "reg"}, patterns{"auto"},
      measures{"lat", "bw"};
  int reps = 5;
  int warmup = 2;
  double batch_ms = 10;
  uint64_t max_iters = 1000000;
  std::string rate_max = "4K";
  std::string signal_max = "64K";
  bool thp = false;
  bool touch_after_register = false;  // the old default: registered memory first written after registration
  std::string copy_threads;           // --copy-threads: HIXL_COPY_THREADS for the run ("": as set)
  bool no_memcpy = false;
  std::string output;
  std::vector<std::string> refs;
  bool corrupt = false;  // testing only: damage received data so the check must fail
};

enum class Op { kPut, kGet, kPutSignal, kFetchAdd };
enum class Mem { kSym, kReg };
enum class Pattern { kOneToOne, kManyToOne };

inline const char* Name(Op o) {
  switch (o) {
    case Op::kPut: return "put";
    case Op::kGet: return "get";
    case Op::kPutSignal: return "put_signal";
    case Op::kFetchAdd: return "fetch_add";
  }
  return "?";
}
inline Op ParseOp(const std::string& s) {
  if (s == "put") return Op::kPut;
  if (s == "get") return Op::kGet;
  if (s == "put_signal") return Op::kPutSignal;
  return Op::kFetchAdd;
}
inline const char* Name(Mem m) { return m == Mem::kSym ? "sym" : "reg"; }
inline const char* Name(Pattern p) { return p == Pattern::kOneToOne ? "one_to_one" : "many_to_one"; }
inline const char* Title(Mem m) {
  return m == Mem::kSym ? "symmetric memory (hixl_alloc)" : "registered memory (malloc + hixl_register_memory)";
}

// What every rank reports after a timed batch.
struct BatchReport {
  double seconds = 0;  // the batch's time on this rank (0 when not a worker)
  uint64_t iters = 0;  // operations this rank issued
  int32_t ok = 1;      // 0: an operation failed or received data was wrong
  int32_t worker = 0;  // 1 when this rank issued operations
};
static_assert(sizeof(BatchReport) == 24);

// One line of results: latency, bandwidth and message rate of one size.
struct Row {
  Stats lat_us, bw_GBps, rate_Mops;
  bool has_rate = false;
  uint64_t iters_lat = 0, iters_bw = 0;
  // The memcpy run on rank 0 right after each bandwidth batch (same size and
  // volume), and the per-batch ratios hixl / memcpy.
  Stats paired_memcpy_GBps, paired_ratio;
  bool has_paired = false;
};

// The pattern of the paired memcpy's source.
constexpr uint64_t kPairedSeed = 0x5eed;

// Words of the signal page: put_signal's signal and, a cache line further,
// the fetch_add counter.
constexpr size_t kSignalWord = 0, kCounterWord = 8;

class Bench {
 public:
  Bench(hixl::World& world, Options opt) : w_(world), opt_(std::move(opt)), me_(world.rank()), n_(world.size()) {}
  int Run();

 private:
  using Batch = std::function<void(uint64_t)>;

  [[noreturn]] void Fatal(const std::string& what, const hixl::Status& s) {
    std::fprintf(stderr, "hixl_perf: rank %d: %s: %s\n", me_, what.c_str(), s.ToString().c_str());
    std::fflush(nullptr);
    std::_Exit(kExitFailure);  // the peers fail at their next barrier; hixlrun ends the job
  }
  void Must(const hixl::Status& s, const char* what) {
    if (!s.ok()) Fatal(what, s);
  }
  template <typename T>
  std::vector<T> Gather(const T& v, const char* what) {
    auto r = w_.Allgather(v);
    if (!r.ok()) Fatal(what, r.status());
    return std::move(r).value();
  }
  // Rank 0 prints.
  void Say(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    if (me_ != 0) return;
    va_list ap;
    va_start(ap, fmt);
    std::vprintf(fmt, ap);
    va_end(ap);
    std::fflush(stdout);
  }

  bool ParseOptions();
  void PrintHeader();
  void PrintGroupHeader(const std::string& title);
  void PrintRow(uint64_t size, const Row& r, const Row* memcpy_row);
  json RowJson(uint64_t size, const Row& r, const Row* memcpy_row);
  json Document(const json& memcpy_rows, const json& results, double elapsed, const std::string& started);
  bool WriteOutput(const json& doc);

  Row MeasureMemcpy(uint64_t size);
  Row MeasureHixl(Pattern pattern, Op op, uint64_t size);
  Row MeasurePutSignal(uint64_t size);
  Row MeasureFetchAdd();
  uint64_t AgreedIters(const Batch& batch, bool worker);
  uint64_t LockstepIters(const Batch& batch);
  void PrintSignalHeader(Mem mem);
  void PrintSignalRow(Mem mem, uint64_t size, const Row& r);
  void PrintAtomicHeader(Mem mem);
  void PrintAtomicRow(const Row& r);
  void ReportFailure(const std::string& what);
  // The slowest worker's time (at least 1 ns) and all workers' operations of
  // one batch; false (and all_verified_ cleared) when any report failed.
  bool Aggregate(const std::vector<BatchReport>& reports, double* slowest, uint64_t* ops) {
    for (const BatchReport& x : reports) {
      if (!x.ok) all_verified_ = false;
      if (x.worker) {
        *slowest = std::max(*slowest, x.seconds);
        *ops += x.iters;
      }
    }
    *slowest = std::max(*slowest, 1e-9);
    return all_verified_;
  }
  std::vector<BatchReport> TimedBatch(Pattern pattern, Op op, uint64_t size, const Batch& batch, uint64_t iters,
                                      bool worker);
  void SetUpMemory(Pattern pattern, Mem mem);
  void TearDownMemory();

  std::vector<int> Workers(Pattern p) const {
    std::vector<int> v;
    if (p == Pattern::kOneToOne) {
      v.push_back(0);
    } else {
      for (int r = 1; r < n_; ++r) v.push_back(r);
    }
    return v;
  }
  int Target(Pattern p) const { return p == Pattern::kOneToOne ? 1 : 0; }
  // Where in the target's block a worker's data goes: puts of many-to-one
  // get a slot per worker; everything else uses the start of the block.
  uint64_t Slot(Pattern p, Op op, int worker) const {
    return p == Pattern::kManyToOne && op == Op::kPut ? static_cast<uint64_t>(worker - 1) * stride_ : 0;
  }

  hixl::World& w_;
  Options opt_;
  const int me_, n_;
  std::vector<uint64_t> sizes_;
  uint64_t many_max_ = 0, rate_max_ = 0, signal_max_ = 0;
  std::vector<Op> ops_;
  std::vector<Mem> mems_;
  std::vector<Pattern> patterns_;
  bool do_lat_ = true, do_bw_ = true;
  std::vector<Reference> refs_;
  std::string transport_;
  uint64_t batch_no_ = 0;  // the same sequence on every rank: it gives the seeds
  bool all_verified_ = true;
  bool op_failed_ = false;                              // an operation of the current batch failed (reported once)
  std::map<std::pair<Mem, uint64_t>, double> put_lat_;  // put + fence latency by (memory, size), for comparison
  std::vector<double> load_at_start_ = LoadAverage();

  // Memory of the current (pattern, memory kind) phase.
  Mem mem_ = Mem::kSym;
  uint64_t stride_ = 0;         // bytes per slot
  Buffer local_;                // this rank's source (put) or destination (get)
  uint8_t* exposed_ = nullptr;  // this rank's remotely accessible block
  Buffer exposed_storage_;      // its storage, for registered memory
  std::optional<hixl::Registration> registration_;
  std::vector<uint64_t> exposed_addr_;  // every rank's block, by rank
  // Signal words (put_signal) and the fetch_add counter, in the same kind of
  // memory as the block: word kSignalWord and word kCounterWord of a page.
  uint64_t* sig_ = nullptr;
  Buffer sig_storage_;
  std::optional<hixl::Registration> sig_registration_;
  std::vector<uint64_t> sig_addr_;  // every rank's signal page, by rank
  uint64_t round_ = 0;              // put_signal rounds so far: the same on every rank
  Buffer paired_src_, paired_dst_;  // rank 0's buffers for the paired memcpy
};

}  // namespace hixl_perf

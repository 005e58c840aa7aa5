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
#include <hixl/hixl.hpp>

#include <atomic>
#include <cstdarg>
#include <set>

#include "bench_common.h"
#include "engine_batch.h"
#include "core/world.h"  // WorldImpl::TransportFor: which transport serves a peer

namespace {

using namespace hixl_bench;  // NOLINT(build/namespaces): the benchmark's own helpers

constexpr int kExitFailure = 1;
constexpr int kExitUnsupported = 77;
constexpr int kExitUsage = 2;

// glibc's memcpy, called as the library calls it (never inlined or elided).
void* (*volatile g_memcpy)(void*, const void*, size_t) = std::memcpy;

// Seconds for k copies of n bytes from src to dst (at least 1 ns).
double TimeMemcpy(uint8_t* dst, const uint8_t* src, uint64_t n, uint64_t k) {
  auto t0 = Clock::now();
  for (uint64_t i = 0; i < k; ++i) {
    g_memcpy(dst, src, n);
    asm volatile("" ::: "memory");
  }
  return std::max(Seconds(t0), 1e-9);
}

bool Sanitized() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#else
  return false;
#endif
}

// ------------------------------------------------------------ references

// A two-sided reference (bench/mpi_pingpong, bench/gloo_ref.py): its
// bandwidth and latency medians by size.
struct Reference {
  std::string name, label, file;
  std::map<uint64_t, double> bw, lat;
};

std::optional<Reference> LoadReference(const std::string& path, std::string* error) {
  std::ifstream f(path);
  if (!f) {
    *error = "cannot open " + path;
    return std::nullopt;
  }
  try {
    json j = json::parse(f);
    Reference r;
    r.file = path;
    r.name = j.at("reference").get<std::string>();
    r.label = j.value("label", r.name);
    for (const auto& e : j.at("results")) {
      const auto size = e.at("size").get<uint64_t>();
      r.bw[size] = e.at("bw_GBps").at("median").get<double>();
      if (e.contains("lat_us")) r.lat[size] = e.at("lat_us").at("median").get<double>();
    }
    return r;
  } catch (const std::exception& e) {
    *error = path + ": " + e.what();
    return std::nullopt;
  }
}

// ---------------------------------------------------------------- options

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
  bool touch_before_register = false;
  bool no_memcpy = false;
  std::string output;
  std::vector<std::string> refs;
  bool corrupt = false;  // testing only: damage received data so the check must fail
};

enum class Op { kPut, kGet, kPutSignal, kFetchAdd };
enum class Mem { kSym, kReg };
enum class Pattern { kOneToOne, kManyToOne };

const char* Name(Op o) {
  switch (o) {
    case Op::kPut: return "put";
    case Op::kGet: return "get";
    case Op::kPutSignal: return "put_signal";
    case Op::kFetchAdd: return "fetch_add";
  }
  return "?";
}
Op ParseOp(const std::string& s) {
  if (s == "put") return Op::kPut;
  if (s == "get") return Op::kGet;
  if (s == "put_signal") return Op::kPutSignal;
  return Op::kFetchAdd;
}
const char* Name(Mem m) { return m == Mem::kSym ? "sym" : "reg"; }
const char* Name(Pattern p) { return p == Pattern::kOneToOne ? "one_to_one" : "many_to_one"; }
const char* Title(Mem m) {
  return m == Mem::kSym ? "symmetric memory (hixl_alloc)" : "registered memory (malloc + hixl_register_memory)";
}

// ---------------------------------------------------------------- the run

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
  bool op_failed_ = false;  // an operation of the current batch failed (reported once)
  std::map<std::pair<Mem, uint64_t>, double> put_lat_;  // put + fence latency by (memory, size), for comparison
  std::vector<double> load_at_start_ = LoadAverage();

  // Memory of the current (pattern, memory kind) phase.
  Mem mem_ = Mem::kSym;
  uint64_t stride_ = 0;                 // bytes per slot
  Buffer local_;                        // this rank's source (put) or destination (get)
  uint8_t* exposed_ = nullptr;          // this rank's remotely accessible block
  Buffer exposed_storage_;              // its storage, for registered memory
  std::optional<hixl::Registration> registration_;
  std::vector<uint64_t> exposed_addr_;  // every rank's block, by rank
  // Signal words (put_signal) and the fetch_add counter, in the same kind of
  // memory as the block: word kSignalWord and word kCounterWord of a page.
  uint64_t* sig_ = nullptr;
  Buffer sig_storage_;
  std::optional<hixl::Registration> sig_registration_;
  std::vector<uint64_t> sig_addr_;  // every rank's signal page, by rank
  uint64_t round_ = 0;              // put_signal rounds so far: the same on every rank
  Buffer paired_src_, paired_dst_;      // rank 0's buffers for the paired memcpy
};

bool Bench::ParseOptions() {
  std::string err;
  auto fail = [&](const std::string& what) {
    if (me_ == 0) std::fprintf(stderr, "hixl_perf: %s\n", what.c_str());
    return false;
  };
  auto sizes = opt_.sizes.Resolve(&err);
  if (!sizes) return fail(err);
  sizes_ = std::move(*sizes);
  auto rm = ParseSize(opt_.rate_max);
  if (!rm) return fail("bad --rate-max " + opt_.rate_max);
  rate_max_ = *rm;
  many_max_ = sizes_.back();
  if (!opt_.many_max.empty()) {
    auto m = ParseSize(opt_.many_max);
    if (!m) return fail("bad --many-max " + opt_.many_max);
    many_max_ = std::min(*m, many_max_);
  }
  for (const auto& o : opt_.ops) {
    if (std::find(ops_.begin(), ops_.end(), ParseOp(o)) == ops_.end()) ops_.push_back(ParseOp(o));
  }
  auto sm = ParseSize(opt_.signal_max);
  if (!sm) return fail("bad --signal-max " + opt_.signal_max);
  signal_max_ = *sm;
  for (const auto& m : opt_.mems) mems_.push_back(m == "sym" ? Mem::kSym : Mem::kReg);
  for (const auto& p : opt_.patterns) {
    if (p == "one" || p == "auto") patterns_.push_back(Pattern::kOneToOne);
    if (p == "many" || (p == "auto" && n_ > 2)) patterns_.push_back(Pattern::kManyToOne);
  }
  std::sort(patterns_.begin(), patterns_.end());
  patterns_.erase(std::unique(patterns_.begin(), patterns_.end()), patterns_.end());
  auto has = [&](const char* m) { return std::find(opt_.measures.begin(), opt_.measures.end(), m) != opt_.measures.end(); };
  do_lat_ = has("lat");
  do_bw_ = has("bw");
  if (me_ == 0) {  // only rank 0 prints ratios; the files need not exist elsewhere
    for (const auto& f : opt_.refs) {
      auto r = LoadReference(f, &err);
      if (!r) return fail("--ref: " + err);
      refs_.push_back(std::move(*r));
    }
  }
  return true;
}

// The batch length for a figure: every worker calibrates, all ranks agree on
// the largest count.
uint64_t Bench::AgreedIters(const Batch& batch, bool worker) {
  const uint64_t mine = worker ? Calibrate(batch, opt_.warmup, opt_.batch_ms / 1000, opt_.max_iters) : 0;
  auto all = Gather(mine, "agreeing on the batch length");
  return *std::max_element(all.begin(), all.end());
}

// One timed, verified batch.  The owner of the source fills it with this
// batch's pattern; the workers run the batch between two barriers; the
// receiver of the data checks every byte; every rank reports to every rank.
std::vector<BatchReport> Bench::TimedBatch(Pattern pattern, Op op, uint64_t size, const Batch& batch, uint64_t iters,
                                           bool worker) {
  const uint64_t b = batch_no_++;
  const int target = Target(pattern);
  BatchReport rep;
  rep.worker = worker ? 1 : 0;
  op_failed_ = false;
  if (op == Op::kPut && worker) Fill(local_.get(), size, Seed(b, me_));
  if (op == Op::kGet && me_ == target) Fill(exposed_, size, Seed(b, target));
  Must(w_.Barrier(), "barrier before a batch");
  if (worker) {
    auto t0 = Clock::now();
    batch(iters);
    rep.seconds = Seconds(t0);
    rep.iters = iters;
  }
  Must(w_.Barrier(), "barrier after a batch");  // every put of the batch is visible now
  if (op_failed_) rep.ok = 0;
  auto verify = [&](uint8_t* p, uint64_t seed, int from) {
    if (opt_.corrupt) p[size / 2] ^= 0x5a;
    if (auto bad = Check(p, size, seed)) {
      std::fprintf(stderr, "hixl_perf: rank %d: VERIFICATION FAILED: %s of %s with rank %d: wrong byte at offset %llu\n",
                   me_, Name(op), SizeName(size).c_str(), from, static_cast<unsigned long long>(*bad));
      rep.ok = 0;
    }
  };
  if (op == Op::kPut && me_ == target) {
    for (int wkr : Workers(pattern)) verify(exposed_ + Slot(pattern, op, wkr), Seed(b, wkr), wkr);
  }
  if (op == Op::kGet && worker) verify(local_.get(), Seed(b, target), target);
  return Gather(rep, "gathering batch results");
}

void Bench::SetUpMemory(Pattern pattern, Mem mem) {
  mem_ = mem;
  stride_ = RoundUp(pattern == Pattern::kManyToOne ? many_max_ : sizes_.back(), kPage);
  const uint64_t slots = pattern == Pattern::kManyToOne ? static_cast<uint64_t>(std::max(1, n_ - 1)) : 1;
  const uint64_t bytes = slots * stride_;
  local_ = AllocBuffer(stride_, opt_.thp);
  if (me_ == 0 && do_bw_ && !opt_.no_memcpy) {
    paired_src_ = AllocBuffer(stride_, opt_.thp);
    paired_dst_ = AllocBuffer(stride_, opt_.thp);
    std::memset(paired_src_.get(), 0, stride_);  // no page faults in the timed copies
    std::memset(paired_dst_.get(), 0, stride_);
  }
  if (mem == Mem::kSym) {
    auto p = w_.Alloc(bytes);  // every rank, the same size: the same address everywhere
    if (!p.ok()) Fatal("hixl_alloc of " + SizeName(bytes), p.status());
    exposed_ = static_cast<uint8_t*>(p.value());
    exposed_addr_ = Gather(reinterpret_cast<uint64_t>(exposed_), "exchanging symmetric addresses");
    if (std::count(exposed_addr_.begin(), exposed_addr_.end(), exposed_addr_[0]) != n_) {
      Fatal("hixl_alloc", hixl::Status(hixl::Errc::kInternal, "symmetric allocations got different addresses"));
    }
  } else {
    exposed_storage_ = AllocBuffer(bytes, opt_.thp);
    exposed_ = exposed_storage_.get();
    // Memory that an application filled before registering it (a tensor
    // already in use) has its pages already: hixl's huge-page advice
    // (HIXL_SHM_THP) then changes nothing for them.
    if (opt_.touch_before_register) std::memset(exposed_, 0, bytes);
    auto reg = hixl::Registration::Make(exposed_, bytes);
    if (!reg.ok()) Fatal("hixl_register_memory of " + SizeName(bytes), reg.status());
    registration_.emplace(std::move(reg).value());
    exposed_addr_ = Gather(reinterpret_cast<uint64_t>(exposed_), "exchanging registered addresses");
  }
  // The signal page, of the same kind.  Zeroed here: a symmetric allocation
  // may reuse heap memory that an earlier phase wrote.
  if (mem == Mem::kSym) {
    auto p = w_.Alloc(kPage);
    if (!p.ok()) Fatal("hixl_alloc of the signal page", p.status());
    sig_ = static_cast<uint64_t*>(p.value());
    std::memset(sig_, 0, kPage);
  } else {
    sig_storage_ = AllocBuffer(kPage);
    sig_ = reinterpret_cast<uint64_t*>(sig_storage_.get());
    std::memset(sig_, 0, kPage);
    auto reg = hixl::Registration::Make(sig_, kPage);
    if (!reg.ok()) Fatal("hixl_register_memory of the signal page", reg.status());
    sig_registration_.emplace(std::move(reg).value());
  }
  sig_addr_ = Gather(reinterpret_cast<uint64_t>(sig_), "exchanging signal addresses");
  Must(w_.Barrier(), "barrier after memory set-up");
}

void Bench::TearDownMemory() {
  Must(w_.Barrier(), "barrier before memory release");
  if (mem_ == Mem::kSym) {
    Must(w_.Free(exposed_), "hixl_free");
    Must(w_.Free(sig_), "hixl_free of the signal page");
  } else {
    registration_.reset();
    exposed_storage_.reset();
    sig_registration_.reset();
    sig_storage_.reset();
  }
  exposed_ = nullptr;
  sig_ = nullptr;
  local_.reset();
  paired_src_.reset();
  paired_dst_.reset();
}

Row Bench::MeasureHixl(Pattern pattern, Op op, uint64_t size) {
  const std::vector<int> workers = Workers(pattern);
  const bool worker = std::find(workers.begin(), workers.end(), me_) != workers.end();
  const int target = Target(pattern);
  const uint64_t remote = exposed_addr_[static_cast<size_t>(target)] + (worker ? Slot(pattern, op, me_) : 0);
  uint8_t* local = local_.get();
  auto check = [&](const hixl::Status& s, const char* what) {
    if (!s.ok() && !op_failed_) {
      std::fprintf(stderr, "hixl_perf: rank %d: %s of %s: %s\n", me_, what, SizeName(size).c_str(),
                   s.ToString().c_str());
      op_failed_ = true;
    }
    return s.ok();
  };
  auto issue = [&] {
    return check(op == Op::kPut ? w_.Put(target, local, remote, size) : w_.Get(target, remote, local, size), Name(op));
  };
  auto fence = [&] { return check(w_.Fence(), "fence"); };
  const Batch lat_batch = [&](uint64_t k) {
    for (uint64_t i = 0; i < k; ++i) {
      if (!issue() || !fence()) return;
    }
  };
  const Batch bw_batch = [&](uint64_t k) {
    for (uint64_t i = 0; i < k; ++i) {
      if (!issue()) return;
    }
    fence();
  };

  // Per batch: the slowest worker's time and all workers' operations.
  Row row;
  std::vector<double> lat, bw, rate, paired_bw, paired_ratio;
  const bool pairing = do_bw_ && !opt_.no_memcpy;  // the same on every rank
  const bool paired = static_cast<bool>(paired_src_);  // rank 0: it runs the memcpy
  uint64_t paired_seed = kPairedSeed;
  auto measure = [&](const Batch& batch, uint64_t* iters_out, bool latency) {
    const uint64_t iters = AgreedIters(batch, worker);
    *iters_out = iters;
    for (int r = 0; r < opt_.reps; ++r) {
      double slowest = 0;
      uint64_t ops = 0;
      if (!Aggregate(TimedBatch(pattern, op, size, batch, iters, worker), &slowest, &ops)) return false;
      if (latency) {
        lat.push_back(slowest / static_cast<double>(iters) * 1e6);
      } else {
        bw.push_back(static_cast<double>(ops) * static_cast<double>(size) / slowest / 1e9);
        rate.push_back(static_cast<double>(ops) / slowest / 1e6);
        if (pairing) {
          // The same size and volume with one core's memcpy, right now: the
          // ratio holds up when other work on the machine comes and goes.
          // Its source is written just before, as the batch's source was;
          // the other ranks wait in a barrier meanwhile, as they did for the
          // batch, so that nothing of ours competes for memory.
          if (paired) {
            paired_seed = kPairedSeed + static_cast<uint64_t>(r);
            Fill(paired_src_.get(), size, paired_seed);
            const double t = TimeMemcpy(paired_dst_.get(), paired_src_.get(), size, ops);
            paired_bw.push_back(static_cast<double>(ops) * static_cast<double>(size) / t / 1e9);
            paired_ratio.push_back(bw.back() / paired_bw.back());
          }
          Must(w_.Barrier(), "barrier after the paired memcpy");
        }
      }
    }
    return true;
  };
  if (do_lat_ && !measure(lat_batch, &row.iters_lat, true)) return row;
  if (do_bw_ && !measure(bw_batch, &row.iters_bw, false)) return row;
  row.lat_us = Summarize(lat);
  row.bw_GBps = Summarize(bw);
  row.rate_Mops = Summarize(rate);
  row.has_rate = do_bw_ && size <= rate_max_;
  int32_t paired_ok = 1;
  if (paired && !paired_bw.empty() && Check(paired_dst_.get(), size, paired_seed)) {
    std::fprintf(stderr, "hixl_perf: VERIFICATION FAILED: paired memcpy of %s\n", SizeName(size).c_str());
    paired_ok = 0;
  }
  if (pairing) {  // every rank learns what rank 0 found
    auto oks = Gather(paired_ok, "gathering the memcpy check");
    if (std::count(oks.begin(), oks.end(), 0) > 0) all_verified_ = false;
  }
  if (paired && !paired_bw.empty()) {
    row.has_paired = true;
    row.paired_memcpy_GBps = Summarize(paired_bw);
    row.paired_ratio = Summarize(paired_ratio);
  }
  return row;
}

// The batch length of a batch that ranks run in lockstep (a ping-pong):
// every rank runs the same probes, and all decide on the slowest rank's time.
uint64_t Bench::LockstepIters(const Batch& batch) {
  for (int i = 0; i < opt_.warmup; ++i) batch(1);
  const double target = opt_.batch_ms / 1000;
  for (uint64_t k = 1;; k *= 2) {
    auto t0 = Clock::now();
    batch(k);
    const double mine = Seconds(t0);
    auto all = Gather(mine, "calibrating a ping-pong");
    const double t = *std::max_element(all.begin(), all.end());
    if (t >= target / 8 || k >= opt_.max_iters) {
      const double per_op = std::max(t, 1e-9) / static_cast<double>(k);
      return std::clamp<uint64_t>(static_cast<uint64_t>(std::ceil(target / per_op)), 1, opt_.max_iters);
    }
  }
}

void Bench::ReportFailure(const std::string& what) {
  if (op_failed_) return;
  std::fprintf(stderr, "hixl_perf: rank %d: %s\n", me_, what.c_str());
  op_failed_ = true;
}

// put_signal ping-pong between ranks 0 and 1 (other ranks only take part in
// the barriers).  Round v: rank 0 puts SIZE bytes into rank 1's block with
// the signal SET to v; rank 1 waits until its signal word is v, checks that
// the data carries v in its first word (data visible with its signal), and
// answers the same way.  Latency: rank 0's time per round / 2.  After each
// batch both check the whole of the last message they received.
Row Bench::MeasurePutSignal(uint64_t size) {
  const bool active = me_ < 2;
  const int peer = 1 - me_;  // for the active ranks
  uint8_t* local = local_.get();
  const bool tagged = size >= 8;
  auto send = [&](uint64_t v) {
    if (tagged) std::memcpy(local, &v, 8);
    const hixl::Status s = w_.PutSignal(peer, local, exposed_addr_[static_cast<size_t>(peer)], size,
                                        sig_addr_[static_cast<size_t>(peer)] + kSignalWord * 8, v,
                                        hixl::SignalOp::kSet);
    if (!s.ok()) ReportFailure("put_signal of " + SizeName(size) + ": " + s.ToString());
    return s.ok();
  };
  auto receive = [&](uint64_t v) {
    const hixl::Status s = w_.WaitUntil(&sig_[kSignalWord], hixl::Cmp::kGe, v);
    if (!s.ok()) {
      ReportFailure("wait_until for round " + std::to_string(v) + ": " + s.ToString());
      return false;
    }
    const uint64_t seen = std::atomic_ref<uint64_t>(sig_[kSignalWord]).load(std::memory_order_acquire);
    uint64_t tag = v;
    if (tagged) std::memcpy(&tag, exposed_, 8);
    if (seen != v || tag != v) {
      ReportFailure("VERIFICATION FAILED: put_signal of " + SizeName(size) + ": round " + std::to_string(v) +
                    ": signal " + std::to_string(seen) + ", data of round " + std::to_string(tag));
      return false;
    }
    return true;
  };
  const Batch batch = [&](uint64_t k) {
    if (!active) return;
    for (uint64_t i = 0; i < k; ++i) {
      const uint64_t v = ++round_;
      const bool ok = me_ == 0 ? send(v) && receive(v) : receive(v) && send(v);
      if (!ok) return;
    }
  };

  Row row;
  op_failed_ = false;
  row.iters_lat = LockstepIters(batch);
  std::vector<double> lat;
  for (int r = 0; r < opt_.reps; ++r) {
    const uint64_t b = batch_no_++;
    if (active) Fill(local, size, Seed(b, me_));
    Must(w_.Barrier(), "barrier before a batch");
    BatchReport rep;
    rep.worker = active ? 1 : 0;
    if (active) {
      auto t0 = Clock::now();
      batch(row.iters_lat);
      rep.seconds = Seconds(t0);
      rep.iters = row.iters_lat;
    }
    Must(w_.Barrier(), "barrier after a batch");
    if (op_failed_) rep.ok = 0;
    if (active && rep.ok) {
      if (opt_.corrupt) exposed_[size - 1] ^= 0x5a;
      // The last message from the peer: its pattern after the round tag.
      const uint64_t skip = tagged ? 8 : 0;
      if (auto bad = Check(exposed_ + skip, size - skip, Seed(b, peer) + (tagged ? kStep : 0))) {
        std::fprintf(stderr, "hixl_perf: rank %d: VERIFICATION FAILED: put_signal of %s from rank %d: wrong byte at "
                     "offset %llu\n", me_, SizeName(size).c_str(), peer,
                     static_cast<unsigned long long>(*bad + skip));
        rep.ok = 0;
      }
    }
    const auto reports = Gather(rep, "gathering batch results");
    for (const BatchReport& x : reports) {
      if (!x.ok) all_verified_ = false;
    }
    if (!all_verified_) return row;
    lat.push_back(std::max(reports[0].seconds, 1e-9) / static_cast<double>(row.iters_lat) / 2 * 1e6);
  }
  row.lat_us = Summarize(lat);
  return row;
}

// fetch_add on one word of rank 0 (the signal page's counter).  Latency:
// rank 1 alone, time per call.  Rate: ranks 1..N-1 at once, all calls over
// the slowest worker's time (with 2 ranks the same batches give both).
// Verified: every worker's old values strictly increase, and after each
// batch the word has grown by exactly the number of calls.
Row Bench::MeasureFetchAdd() {
  const uint64_t addr = sig_addr_[0] + kCounterWord * 8;
  const int workers = n_ - 1;
  Row row;
  auto run = [&](bool everyone, uint64_t* iters_out, std::vector<double>* lat, std::vector<double>* rate) {
    const bool worker = everyone ? me_ >= 1 : me_ == 1;
    const uint64_t nworkers = everyone ? static_cast<uint64_t>(workers) : 1;
    const Batch batch = [&](uint64_t k) {
      uint64_t prev = 0;
      for (uint64_t i = 0; i < k; ++i) {
        auto r = w_.AtomicFetchAdd(0, addr, 1);
        if (!r.ok()) return ReportFailure("fetch_add: " + r.status().ToString());
        if (i > 0 && r.value() <= prev) {
          return ReportFailure("VERIFICATION FAILED: fetch_add returned " + std::to_string(r.value()) + " after " +
                               std::to_string(prev));
        }
        prev = r.value();
      }
    };
    op_failed_ = false;
    const uint64_t iters = AgreedIters(batch, worker);
    *iters_out = iters;
    for (int r = 0; r < opt_.reps; ++r) {
      ++batch_no_;
      const uint64_t before = me_ == 0 ? std::atomic_ref<uint64_t>(sig_[kCounterWord]).load() : 0;
      Must(w_.Barrier(), "barrier before a batch");
      BatchReport rep;
      rep.worker = worker ? 1 : 0;
      if (worker) {
        auto t0 = Clock::now();
        batch(iters);
        rep.seconds = Seconds(t0);
        rep.iters = iters;
      }
      Must(w_.Barrier(), "barrier after a batch");  // every call has returned: the word is final
      if (op_failed_) rep.ok = 0;
      if (me_ == 0) {
        const uint64_t now = std::atomic_ref<uint64_t>(sig_[kCounterWord]).load();
        const uint64_t want = before + iters * nworkers - (opt_.corrupt ? 1 : 0);
        if (now != want) {
          std::fprintf(stderr, "hixl_perf: VERIFICATION FAILED: fetch_add: the word is %llu, expected %llu\n",
                       static_cast<unsigned long long>(now), static_cast<unsigned long long>(want));
          rep.ok = 0;
        }
      }
      double slowest = 0;
      uint64_t ops = 0;
      if (!Aggregate(Gather(rep, "gathering batch results"), &slowest, &ops)) return false;
      if (lat) lat->push_back(slowest / static_cast<double>(iters) * 1e6);
      if (rate) rate->push_back(static_cast<double>(ops) / slowest / 1e6);
    }
    return true;
  };
  std::vector<double> lat, rate;
  if (workers == 1) {
    if ((do_lat_ || do_bw_) && !run(true, &row.iters_lat, &lat, &rate)) return row;
    row.iters_bw = row.iters_lat;
  } else {
    if (do_lat_ && !run(false, &row.iters_lat, &lat, nullptr)) return row;
    if (do_bw_ && !run(true, &row.iters_bw, nullptr, &rate)) return row;
  }
  if (do_lat_) row.lat_us = Summarize(lat);
  else row.iters_lat = 0;
  if (do_bw_) {
    row.rate_Mops = Summarize(rate);
    row.has_rate = true;
  } else {
    row.iters_bw = 0;
  }
  return row;
}

// The physical limit of a same-host put: one core copying between two
// private buffers, timed and verified like the hixl batches.  Rank 0 only.
Row Bench::MeasureMemcpy(uint64_t size) {
  Row row;
  if (me_ == 0) {
    Buffer src = AllocBuffer(size, opt_.thp), dst = AllocBuffer(size, opt_.thp);
    const Batch batch = [&](uint64_t k) { TimeMemcpy(dst.get(), src.get(), size, k); };
    Fill(src.get(), size, Seed(batch_no_, -1));
    const uint64_t iters = Calibrate(batch, opt_.warmup, opt_.batch_ms / 1000, opt_.max_iters);
    row.iters_lat = row.iters_bw = iters;
    std::vector<double> lat, bw;
    for (int r = 0; r < opt_.reps; ++r) {
      const uint64_t seed = Seed(batch_no_ + static_cast<uint64_t>(r), -1);
      Fill(src.get(), size, seed);
      const double s = TimeMemcpy(dst.get(), src.get(), size, iters);
      if (Check(dst.get(), size, seed)) {
        std::fprintf(stderr, "hixl_perf: VERIFICATION FAILED: memcpy of %s\n", SizeName(size).c_str());
        all_verified_ = false;
      }
      lat.push_back(s / static_cast<double>(iters) * 1e6);
      bw.push_back(static_cast<double>(iters) * static_cast<double>(size) / s / 1e9);
    }
    row.lat_us = Summarize(lat);
    row.bw_GBps = Summarize(bw);
  }
  batch_no_ += static_cast<uint64_t>(opt_.reps);  // every rank: the seeds stay in step
  Must(w_.Barrier(), "barrier after memcpy");
  return row;
}

// ---------------------------------------------------------------- output

void Bench::PrintHeader() {
  const char* env = std::getenv("HIXL_TRANSPORT");
  const char* cma = std::getenv("HIXL_SHM_CMA");
  const char* thp = std::getenv("HIXL_SHM_THP");
  Say("hixl_perf: %d ranks, transport %s (HIXL_TRANSPORT=%s%s%s%s%s)\n", n_, transport_.c_str(), env ? env : "auto",
      cma ? ", HIXL_SHM_CMA=" : "", cma ? cma : "", thp ? ", HIXL_SHM_THP=" : "", thp ? thp : "");
  Say("machine: %s, %ld CPUs online\n", CpuModel().c_str(), ::sysconf(_SC_NPROCESSORS_ONLN));
  Say("each figure: median [min - max] of %d batches of ~%g ms, after warm-up; GB/s = 1e9 B/s; every batch "
      "verified\n", opt_.reps, opt_.batch_ms);
  Say("lat = one op + fence; GB/s and Mmsg/s = back-to-back ops + one fence; x REF = GB/s over the reference's\n");
  Say("%% memcpy = median over the batches of GB/s over a memcpy of the same size and volume on rank 0 right "
      "after the batch\n");
  for (const auto& r : refs_) Say("reference %s: %s (%s)\n", r.name.c_str(), r.label.c_str(), r.file.c_str());
  if (opt_.thp) Say("benchmark-owned buffers use transparent huge pages (--thp)\n");
  if (opt_.touch_before_register) Say("registered memory is written before it is registered\n");
  if (Sanitized()) Say("WARNING: built with sanitizers: the numbers are not meaningful\n");
}

void Bench::PrintGroupHeader(const std::string& title) {
  Say("\n== %s\n", title.c_str());
  std::string h = "    size   lat us                     GB/s                        Mmsg/s   % memcpy";
  for (const auto& r : refs_) {
    char c[32];
    std::snprintf(c, sizeof c, "  x %-7s", r.name.substr(0, 7).c_str());
    h += c;
  }
  Say("%s\n", h.c_str());
}

void Bench::PrintRow(uint64_t size, const Row& r, const Row* m) {
  char pct[32] = "-";
  if (r.has_paired) {
    std::snprintf(pct, sizeof pct, "%.1f%%", 100 * r.paired_ratio.median);
  } else if (m && do_bw_ && m->bw_GBps.median > 0) {
    std::snprintf(pct, sizeof pct, "%.1f%%", 100 * r.bw_GBps.median / m->bw_GBps.median);
  }
  char line[512];
  std::snprintf(line, sizeof line, "%8s   %-26s %-27s %-8s %-9s", SizeName(size).c_str(),
                do_lat_ ? Spread(r.lat_us).c_str() : "-", do_bw_ ? Spread(r.bw_GBps).c_str() : "-",
                r.has_rate ? Fmt(r.rate_Mops.median).c_str() : "", pct);
  std::string s = line;
  for (const auto& ref : refs_) {
    auto it = ref.bw.find(size);
    char c[32];
    const bool have = it != ref.bw.end() && it->second > 0 && do_bw_;
    std::snprintf(c, sizeof c, "  %-9s", have ? Fmt(r.bw_GBps.median / it->second).c_str() : "-");
    s += c;
  }
  Say("%s\n", s.c_str());
}

void Bench::PrintSignalHeader(Mem mem) {
  Say("\n== put_signal, %s, ping-pong rank 0 <-> rank 1: half round trip (put with signal until the target sees "
      "the signal)\n", Title(mem));
  std::string h = "    size   lat us                     put+fence us";
  for (const auto& r : refs_) {
    char c[32];
    std::snprintf(c, sizeof c, "  %-7s us", r.name.substr(0, 7).c_str());
    h += c;
  }
  Say("%s\n", h.c_str());
}

void Bench::PrintSignalRow(Mem mem, uint64_t size, const Row& r) {
  auto it = put_lat_.find({mem, size});
  char line[256];
  std::snprintf(line, sizeof line, "%8s   %-26s %-12s", SizeName(size).c_str(), Spread(r.lat_us).c_str(),
                it != put_lat_.end() ? Fmt(it->second).c_str() : "-");
  std::string s = line;
  for (const auto& ref : refs_) {
    auto l = ref.lat.find(size);
    char c[32];
    std::snprintf(c, sizeof c, "  %-10s", l != ref.lat.end() ? Fmt(l->second).c_str() : "-");
    s += c;
  }
  Say("%s\n", s.c_str());
}

void Bench::PrintAtomicHeader(Mem mem) {
  Say("\n== fetch_add on one 64-bit word of rank 0, %s, from ranks 1..%d\n", Title(mem), n_ - 1);
  Say("          lat us (rank 1 alone)      Mops/s (%d worker%s at once)\n", n_ - 1, n_ > 2 ? "s" : "");
}

void Bench::PrintAtomicRow(const Row& r) {
  Say("          %-26s %s\n", r.iters_lat ? Spread(r.lat_us).c_str() : "-",
      r.has_rate ? Spread(r.rate_Mops).c_str() : "-");
}

json Bench::RowJson(uint64_t size, const Row& r, const Row* m) {
  json j;
  j["size"] = size;
  j["size_name"] = SizeName(size);
  j["iters_lat"] = r.iters_lat;
  j["iters_bw"] = r.iters_bw;
  if (r.iters_lat) j["lat_us"] = ToJson(r.lat_us);
  if (r.iters_bw) j["bw_GBps"] = ToJson(r.bw_GBps);
  if (r.has_rate) j["msg_rate_Mops"] = ToJson(r.rate_Mops);
  if (r.has_paired) {
    j["memcpy_paired_GBps"] = ToJson(r.paired_memcpy_GBps);
    j["memcpy_paired_ratio"] = ToJson(r.paired_ratio);
  }
  if (m && r.iters_bw) {
    json ratio = json::object();
    if (r.has_paired) {
      ratio["memcpy"] = r.paired_ratio.median;
    } else if (m->bw_GBps.median > 0) {
      ratio["memcpy"] = r.bw_GBps.median / m->bw_GBps.median;
    }
    for (const auto& ref : refs_) {
      auto it = ref.bw.find(size);
      if (it != ref.bw.end() && it->second > 0) ratio[ref.name] = r.bw_GBps.median / it->second;
    }
    j["bw_ratio"] = ratio;
  }
  return j;
}

json Bench::Document(const json& memcpy_rows, const json& results, double elapsed, const std::string& started) {
  json doc;
  doc["tool"] = "hixl_perf";
  doc["schema"] = 1;
  doc["hixl_version"] = HIXL_VERSION;
  doc["started"] = started;
  doc["elapsed_s"] = elapsed;
  doc["transport"] = transport_;
  const char* env = std::getenv("HIXL_TRANSPORT");
  doc["transport_env"] = env ? env : "auto";
  const char* cma = std::getenv("HIXL_SHM_CMA");
  doc["shm_cma_env"] = cma ? cma : "";
  doc["world_size"] = n_;
  doc["machine"] = Machine();
  doc["machine"]["loadavg_at_start"] = load_at_start_;
  doc["build"] = {{"type", HIXL_BUILD_TYPE}, {"sanitized", Sanitized()}};
  doc["config"] = {{"sizes", sizes_},        {"reps", opt_.reps},         {"warmup", opt_.warmup},
                   {"batch_ms", opt_.batch_ms}, {"max_iters", opt_.max_iters}, {"rate_max", rate_max_},
                   {"many_max", many_max_},  {"signal_max", signal_max_}, {"thp", opt_.thp},
                   {"touch_before_register", opt_.touch_before_register}};
  const char* thp = std::getenv("HIXL_SHM_THP");
  doc["shm_thp_env"] = thp ? thp : "";
  json refs = json::object();
  for (const auto& r : refs_) refs[r.name] = {{"label", r.label}, {"file", r.file}};
  doc["references"] = refs;
  doc["units"] = {{"lat_us", "microseconds per operation, including the fence; put_signal: half a ping-pong round "
                             "trip (put with signal until the target has seen the signal); fetch_add: one call "
                             "(complete on return), rank 1 alone"},
                  {"bw_GBps", "1e9 bytes per second (many_to_one: aggregate over workers)"},
                  {"msg_rate_Mops", "1e6 operations per second; fetch_add: every worker (ranks 1..N-1) at once, "
                                    "aggregate"},
                  {"bw_ratio", "hixl GB/s median / the reference's GB/s median at the same size; for memcpy, "
                               "the median of the per-batch ratios to the paired memcpy"},
                  {"memcpy_paired_GBps", "one core's memcpy of the same size and volume, run on rank 0 right "
                                         "after each bandwidth batch"}};
  doc["memcpy"] = memcpy_rows;
  doc["results"] = results;
  doc["verified"] = all_verified_;
  return doc;
}

bool Bench::WriteOutput(const json& doc) {
  const std::string& path = opt_.output;
  const bool csv = path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
  if (!csv) return WriteJson(path, doc);
  std::ofstream f(path);
  f << "kind,transport,world_size,pattern,mem,op,size,iters_lat,iters_bw";
  for (const char* k : {"lat_us", "bw_GBps", "msg_rate_Mops"}) {
    for (const char* s : {"median", "min", "max", "p10", "p90"}) f << ',' << k << '_' << s;
  }
  f << ",ratio_memcpy";
  for (const auto& r : refs_) f << ",ratio_" << r.name;
  f << '\n';
  auto line = [&](const json& e, const std::string& kind) {
    f << kind << ',' << transport_ << ',' << n_ << ',' << e.value("pattern", "") << ',' << e.value("mem", "") << ','
      << e.value("op", "memcpy") << ',' << e["size"] << ',' << e["iters_lat"] << ',' << e["iters_bw"];
    for (const char* k : {"lat_us", "bw_GBps", "msg_rate_Mops"}) {
      for (const char* s : {"median", "min", "max", "p10", "p90"}) {
        f << ',';
        if (e.contains(k)) f << e[k][s].get<double>();
      }
    }
    std::vector<std::string> names{"memcpy"};
    for (const auto& r : refs_) names.push_back(r.name);
    for (const auto& n : names) {
      f << ',';
      if (e.contains("bw_ratio") && e["bw_ratio"].contains(n)) f << e["bw_ratio"][n].get<double>();
    }
    f << '\n';
  };
  for (const auto& e : doc["memcpy"]) line(e, "memcpy");
  for (const auto& e : doc["results"]) line(e, "hixl");
  f.close();
  if (!f) std::fprintf(stderr, "hixl_perf: cannot write %s\n", path.c_str());
  return static_cast<bool>(f);
}

int Bench::Run() {
  // Every rank leaves together when any rank's options are bad.
  const int32_t parsed = ParseOptions() ? 1 : 0;
  auto all_parsed = Gather(parsed, "agreeing on the options");
  if (std::count(all_parsed.begin(), all_parsed.end(), 0) > 0) return 2;
  if (n_ < 2) {
    if (me_ == 0) std::fprintf(stderr, "hixl_perf: needs at least 2 ranks: hixlrun -n 2 hixl_perf ...\n");
    return 2;
  }
  const auto started = Clock::now();
  const std::string started_iso = NowIso();
  std::set<std::string> used;
  if (auto* impl = hixl::core::Current()) {
    for (int r = 0; r < n_; ++r) {
      if (r != me_) used.insert(std::string(impl->TransportFor(r)));
    }
  }
  for (const auto& t : used) transport_ += (transport_.empty() ? "" : "+") + t;
  PrintHeader();

  // The memcpy reference, once per size.
  std::map<uint64_t, Row> memcpy_rows;
  json memcpy_json = json::array();
  if (!opt_.no_memcpy) {
    PrintGroupHeader("memcpy, one core (the reference: the physical limit of a same-host put)");
    for (uint64_t s : sizes_) {
      const Row& r = memcpy_rows[s] = MeasureMemcpy(s);
      PrintRow(s, r, &r);
      memcpy_json.push_back(RowJson(s, r, nullptr));
    }
  }

  json results = json::array();
  for (Pattern p : patterns_) {
    for (Mem m : mems_) {
      SetUpMemory(p, m);
      for (Op op : ops_) {
        if (op == Op::kPutSignal) {
          if (p != Pattern::kOneToOne || !do_lat_) continue;  // a ping-pong: latency only
          PrintSignalHeader(m);
          for (uint64_t s : sizes_) {
            if (s > signal_max_) continue;
            Row r = MeasurePutSignal(s);
            if (!all_verified_) {
              Say("%8s   FAILED (see above)\n", SizeName(s).c_str());
              TearDownMemory();
              return kExitFailure;
            }
            PrintSignalRow(m, s, r);
            json j = {{"pattern", Name(p)}, {"mem", Name(m)}, {"op", Name(op)}, {"size", s},
                      {"size_name", SizeName(s)}, {"iters_lat", r.iters_lat}, {"iters_bw", 0},
                      {"lat_us", ToJson(r.lat_us)},
                      {"lat_kind", "half_round_trip"}};
            json refs = json::object();
            for (const auto& ref : refs_) {
              if (auto l = ref.lat.find(s); l != ref.lat.end()) refs[ref.name] = l->second;
            }
            if (!refs.empty()) j["ref_lat_us"] = refs;
            j["verified"] = true;
            results.push_back(std::move(j));
          }
          continue;
        }
        if (op == Op::kFetchAdd) {
          if (p != patterns_.front()) continue;  // its own pattern: ranks 1..N-1 -> rank 0
          PrintAtomicHeader(m);
          Row r = MeasureFetchAdd();
          if (!all_verified_) {
            Say("          FAILED (see above)\n");
            TearDownMemory();
            return kExitFailure;
          }
          PrintAtomicRow(r);
          json j = {{"pattern", n_ > 2 ? "many_to_one" : "one_to_one"}, {"mem", Name(m)}, {"op", Name(op)},
                    {"size", 8}, {"size_name", SizeName(8)}, {"workers", n_ - 1}, {"iters_lat", r.iters_lat},
                    {"iters_bw", r.iters_bw}};
          if (r.iters_lat) j["lat_us"] = ToJson(r.lat_us);
          if (r.has_rate) j["msg_rate_Mops"] = ToJson(r.rate_Mops);
          j["verified"] = true;
          results.push_back(std::move(j));
          continue;
        }
        PrintGroupHeader(std::string(Name(op)) + ", " + Title(m) + ", " +
                         (p == Pattern::kOneToOne
                              ? "one-to-one (rank 0 -> rank 1)"
                              : "many-to-one (ranks 1.." + std::to_string(n_ - 1) + " -> rank 0, aggregate)"));
        for (uint64_t s : sizes_) {
          if (p == Pattern::kManyToOne && s > many_max_) continue;
          Row r = MeasureHixl(p, op, s);
          if (!all_verified_) {
            Say("%8s   FAILED (see above)\n", SizeName(s).c_str());
            TearDownMemory();
            return kExitFailure;
          }
          const Row* mr = memcpy_rows.count(s) ? &memcpy_rows[s] : nullptr;
          PrintRow(s, r, mr);
          if (p == Pattern::kOneToOne && op == Op::kPut && r.iters_lat) put_lat_[{m, s}] = r.lat_us.median;
          json j = {{"pattern", Name(p)}, {"mem", Name(m)}, {"op", Name(op)}};
          j.update(RowJson(s, r, mr));
          j["verified"] = true;
          results.push_back(std::move(j));
        }
      }
      TearDownMemory();
    }
  }

  const double elapsed = Seconds(started);
  Say("\nall batches verified; %.1f s\n", elapsed);
  if (me_ == 0 && !opt_.output.empty()) {
    if (!WriteOutput(Document(memcpy_json, results, elapsed, started_iso))) return kExitFailure;
    Say("wrote %s\n", opt_.output.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"hixl_perf: latency, bandwidth and message rate of hixl put/get, put-with-signal latency and remote "
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
  app.add_flag("--thp", opt.thp, "Back the benchmark's own buffers (local, registered, memcpy) with transparent "
                                 "huge pages (madvise)");
  app.add_flag("--no-memcpy", opt.no_memcpy, "Skip the memcpy reference");
  app.add_flag("--touch-before-register", opt.touch_before_register,
               "Write registered memory before registering it, as an application that registers a buffer already "
               "in use does (its pages exist: hixl's huge-page advice, HIXL_SHM_THP, cannot change them)");
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
      ->delimiter(',')->group("Engine")->capture_default_str();
  app.add_option("--engine-batch", engine_batch, "With --engine: bytes per batch")->group("Engine")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

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

// hixl_perf: put and get: latency, bandwidth and message rate of timed,
// verified batches (with the paired memcpy), and the memcpy reference.
#include <algorithm>
#include <cstring>

#include "perf_bench.h"

namespace hixl_perf {
namespace {

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

}  // namespace

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
      std::fprintf(stderr,
                   "hixl_perf: rank %d: VERIFICATION FAILED: %s of %s with rank %d: wrong byte at offset %llu\n", me_,
                   Name(op), SizeName(size).c_str(), from, static_cast<unsigned long long>(*bad));
      rep.ok = 0;
    }
  };
  if (op == Op::kPut && me_ == target) {
    for (int wkr : Workers(pattern)) verify(exposed_ + Slot(pattern, op, wkr), Seed(b, wkr), wkr);
  }
  if (op == Op::kGet && worker) verify(local_.get(), Seed(b, target), target);
  return Gather(rep, "gathering batch results");
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
  const bool pairing = do_bw_ && !opt_.no_memcpy;      // the same on every rank
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

}  // namespace hixl_perf

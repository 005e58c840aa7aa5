// hixl_perf: put_signal (a ping-pong between ranks 0 and 1) and fetch_add
// (ranks 1..N-1 on one word of rank 0): latency, rate and their verification.
#include <algorithm>
#include <atomic>

#include "perf_bench.h"

namespace hixl_perf {

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
    const hixl::Status s =
        w_.PutSignal(peer, local, exposed_addr_[static_cast<size_t>(peer)], size,
                     sig_addr_[static_cast<size_t>(peer)] + kSignalWord * 8, v, hixl::SignalOp::kSet);
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
        std::fprintf(stderr,
                     "hixl_perf: rank %d: VERIFICATION FAILED: put_signal of %s from rank %d: wrong byte at "
                     "offset %llu\n",
                     me_, SizeName(size).c_str(), peer, static_cast<unsigned long long>(*bad + skip));
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
  if (do_lat_)
    row.lat_us = Summarize(lat);
  else
    row.iters_lat = 0;
  if (do_bw_) {
    row.rate_Mops = Summarize(rate);
    row.has_rate = true;
  } else {
    row.iters_bw = 0;
  }
  return row;
}

}  // namespace hixl_perf

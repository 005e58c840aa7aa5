// hixl_perf: the run: checking the options, loading the references, setting
// up the memory of each (pattern, memory kind) phase, and Bench::Run, which
// measures every figure in turn and collects the results.
#include <algorithm>
#include <fstream>
#include <set>

#include <hixl/hixl.h>

#include "perf_bench.h"

namespace hixl_perf {
namespace {

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

}  // namespace

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
  auto has = [&](const char* m) {
    return std::find(opt_.measures.begin(), opt_.measures.end(), m) != opt_.measures.end();
  };
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
    // Written before it is registered, as an application's buffer (a tensor
    // already in use) is: its pages exist, and hixl's huge-page advice
    // (HIXL_SHM_THP) changes nothing for them.  --touch-after-register: the
    // pages are first touched after registration (by the first batch).
    if (!opt_.touch_after_register) std::memset(exposed_, 0, bytes);
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
  for (int r = 0; r < n_; ++r) {
    if (r == me_) continue;
    const char* t = hixl_peer_transport(r);
    used.insert(t ? t : "unknown");
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
            json j = {{"pattern", Name(p)},
                      {"mem", Name(m)},
                      {"op", Name(op)},
                      {"size", s},
                      {"size_name", SizeName(s)},
                      {"iters_lat", r.iters_lat},
                      {"iters_bw", 0},
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
          json j = {{"pattern", n_ > 2 ? "many_to_one" : "one_to_one"},
                    {"mem", Name(m)},
                    {"op", Name(op)},
                    {"size", 8},
                    {"size_name", SizeName(8)},
                    {"workers", n_ - 1},
                    {"iters_lat", r.iters_lat},
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

}  // namespace hixl_perf

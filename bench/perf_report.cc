// hixl_perf: the report: the header and tables rank 0 prints (with ratios to
// the memcpy and two-sided references), and the JSON or CSV output file.
#include <fstream>

#include "perf_bench.h"

namespace hixl_perf {
namespace {

bool Sanitized() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#else
  return false;
#endif
}

}  // namespace

// ---------------------------------------------------------------- output

void Bench::PrintHeader() {
  const char* env = std::getenv("HIXL_TRANSPORT");
  const char* cma = std::getenv("HIXL_SHM_CMA");
  const char* thp = std::getenv("HIXL_SHM_THP");
  Say("hixl_perf: %d ranks, transport %s (HIXL_TRANSPORT=%s%s%s%s%s)\n", n_, transport_.c_str(), env ? env : "auto",
      cma ? ", HIXL_SHM_CMA=" : "", cma ? cma : "", thp ? ", HIXL_SHM_THP=" : "", thp ? thp : "");
  Say("machine: %s, %ld CPUs online\n", CpuModel().c_str(), ::sysconf(_SC_NPROCESSORS_ONLN));
  Say("each figure: median [min - max] of %d batches of ~%g ms, after warm-up; GB/s = 1e9 B/s; every batch "
      "verified\n",
      opt_.reps, opt_.batch_ms);
  Say("lat = one op + fence; GB/s and Mmsg/s = back-to-back ops + one fence; x REF = GB/s over the reference's\n");
  Say("%% memcpy = median over the batches of GB/s over a memcpy of the same size and volume on rank 0 right "
      "after the batch\n");
  for (const auto& r : refs_) Say("reference %s: %s (%s)\n", r.name.c_str(), r.label.c_str(), r.file.c_str());
  if (opt_.thp) Say("benchmark-owned buffers use transparent huge pages (--thp)\n");
  Say("registered memory is written %s it is registered%s\n", opt_.touch_after_register ? "after" : "before",
      opt_.touch_after_register ? " (--touch-after-register)" : "");
  const char* ct = std::getenv("HIXL_COPY_THREADS");
  Say("copy threads: HIXL_COPY_THREADS=%s\n", ct && *ct ? ct : "auto (unset)");
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
      "the signal)\n",
      Title(mem));
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
  doc["config"] = {{"sizes", sizes_},
                   {"reps", opt_.reps},
                   {"warmup", opt_.warmup},
                   {"batch_ms", opt_.batch_ms},
                   {"max_iters", opt_.max_iters},
                   {"rate_max", rate_max_},
                   {"many_max", many_max_},
                   {"signal_max", signal_max_},
                   {"thp", opt_.thp},
                   {"touch_before_register", !opt_.touch_after_register}};
  const char* ct = std::getenv("HIXL_COPY_THREADS");
  doc["copy_threads_env"] = ct ? ct : "";
  const char* thp = std::getenv("HIXL_SHM_THP");
  doc["shm_thp_env"] = thp ? thp : "";
  json refs = json::object();
  for (const auto& r : refs_) refs[r.name] = {{"label", r.label}, {"file", r.file}};
  doc["references"] = refs;
  doc["units"] = {{"lat_us",
                   "microseconds per operation, including the fence; put_signal: half a ping-pong round "
                   "trip (put with signal until the target has seen the signal); fetch_add: one call "
                   "(complete on return), rank 1 alone"},
                  {"bw_GBps", "1e9 bytes per second (many_to_one: aggregate over workers)"},
                  {"msg_rate_Mops",
                   "1e6 operations per second; fetch_add: every worker (ranks 1..N-1) at once, "
                   "aggregate"},
                  {"bw_ratio",
                   "hixl GB/s median / the reference's GB/s median at the same size; for memcpy, "
                   "the median of the per-batch ratios to the paired memcpy"},
                  {"memcpy_paired_GBps",
                   "one core's memcpy of the same size and volume, run on rank 0 right "
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

}  // namespace hixl_perf

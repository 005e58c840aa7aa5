// What hixl_perf and the MPI reference (mpi_pingpong) share, so that both
// take the same sizes, fill and verify data the same way and report the same
// statistics in the same JSON shape.
#pragma once

#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hixl_bench {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kPage = 4096;
constexpr uint64_t kKi = 1024, kMi = kKi * kKi, kGi = kMi * kKi;

inline double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }
inline uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// ------------------------------------------------------------------ sizes

// "8", "4K"/"4KiB" (4096), "1M"/"1MiB", "1G"/"1GiB" (binary); "100KB",
// "100MB", "1GB" (decimal).  Case-insensitive.
inline std::optional<uint64_t> ParseSize(const std::string& s) {
  std::string t;
  for (char c : s) {
    if (c != ' ' && c != '_') t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  size_t digits = 0;
  while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
  if (digits == 0 || digits > 15) return std::nullopt;
  const uint64_t n = std::stoull(t.substr(0, digits));
  static const std::map<std::string, uint64_t> kUnits = {{"", 1},
                                                         {"b", 1},
                                                         {"k", kKi},
                                                         {"ki", kKi},
                                                         {"kib", kKi},
                                                         {"m", kMi},
                                                         {"mi", kMi},
                                                         {"mib", kMi},
                                                         {"g", kGi},
                                                         {"gi", kGi},
                                                         {"gib", kGi},
                                                         {"kb", 1000},
                                                         {"mb", 1000 * 1000},
                                                         {"gb", 1000 * 1000 * 1000}};
  auto it = kUnits.find(t.substr(digits));
  if (it == kUnits.end() || n == 0) return std::nullopt;
  return n * it->second;
}

// "8 B", "4 KiB", "100 MB", "1 GiB", or plain bytes.
inline std::string SizeName(uint64_t n) {
  const std::pair<uint64_t, const char*> units[] = {
      {kGi, "GiB"}, {1000 * 1000 * 1000, "GB"}, {kMi, "MiB"}, {1000 * 1000, "MB"}, {kKi, "KiB"}, {1000, "KB"}};
  for (const auto& [u, name] : units) {
    if (n >= u && n % u == 0) return std::to_string(n / u) + " " + name;
  }
  return std::to_string(n) + " B";
}

// The size options every benchmark here takes.
struct SizeOptions {
  std::vector<std::string> list, add;
  std::string min = "8", max = "1G";

  void AddTo(CLI::App& app) {
    app.add_option("--sizes", list,
                   "Sizes to measure instead of powers of two (e.g. 8,4K,1MiB,100MB,1G; K/M/G and KiB/MiB/GiB are "
                   "binary, KB/MB/GB decimal)")
        ->delimiter(',');
    app.add_option("--min", min, "Smallest power-of-two size")->capture_default_str();
    app.add_option("--max", max, "Largest power-of-two size")->capture_default_str();
    app.add_option("--add-sizes", add, "Extra sizes to measure as well (e.g. 100MB,1GB)")->delimiter(',');
  }

  // The sorted, distinct sizes; nullopt (and *error) on a bad value.
  std::optional<std::vector<uint64_t>> Resolve(std::string* error) const {
    std::vector<uint64_t> out;
    auto parse = [&](const std::vector<std::string>& in) {
      for (const auto& s : in) {
        auto v = ParseSize(s);
        if (!v) {
          *error = "bad size '" + s + "' (e.g. 8, 4K, 1MiB, 100MB, 1G)";
          return false;
        }
        out.push_back(*v);
      }
      return true;
    };
    if (!list.empty()) {
      if (!parse(list)) return std::nullopt;
    } else {
      auto lo = ParseSize(min), hi = ParseSize(max);
      if (!lo || !hi || *lo > *hi) {
        *error = "bad --min/--max";
        return std::nullopt;
      }
      for (uint64_t s = 1; s <= *hi; s *= 2) {
        if (s >= *lo) out.push_back(s);
      }
    }
    if (!parse(add)) return std::nullopt;
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    if (out.empty()) {
      *error = "no sizes to measure";
      return std::nullopt;
    }
    return out;
  }
};

// ------------------------------------------------------------- statistics

struct Stats {
  double median = 0, min = 0, max = 0, p10 = 0, p90 = 0;
};

inline double Quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto i = static_cast<size_t>(pos);
  const double f = pos - static_cast<double>(i);
  return i + 1 < sorted.size() ? sorted[i] * (1 - f) + sorted[i + 1] * f : sorted[i];
}

inline Stats Summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.median = Quantile(v, 0.5);
  s.p10 = Quantile(v, 0.1);
  s.p90 = Quantile(v, 0.9);
  return s;
}

inline json ToJson(const Stats& s) {
  return json{{"median", s.median}, {"min", s.min}, {"max", s.max}, {"p10", s.p10}, {"p90", s.p90}};
}

// 3 significant-ish digits: "0.058", "45.66", "138.0", "7831".
inline std::string Fmt(double v) {
  char b[32];
  if (v >= 1000)
    std::snprintf(b, sizeof b, "%.0f", v);
  else if (v >= 100)
    std::snprintf(b, sizeof b, "%.1f", v);
  else if (v >= 10)
    std::snprintf(b, sizeof b, "%.2f", v);
  else
    std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}

// "median [min - max]"
inline std::string Spread(const Stats& s) { return Fmt(s.median) + " [" + Fmt(s.min) + " - " + Fmt(s.max) + "]"; }

// ------------------------------------------------------------ calibration

// How many operations make a batch of about `batch_s` seconds: after
// `warmup` single operations, doubles a probe until it takes an eighth of
// that, then scales; clamped to [1, max_iters].
inline uint64_t Calibrate(const std::function<void(uint64_t)>& batch, int warmup, double batch_s, uint64_t max_iters) {
  for (int i = 0; i < warmup; ++i) batch(1);
  for (uint64_t k = 1;; k *= 2) {
    auto t0 = Clock::now();
    batch(k);
    const double t = Seconds(t0);
    if (t >= batch_s / 8 || k >= max_iters) {
      const double per_op = std::max(t, 1e-9) / static_cast<double>(k);
      return std::clamp<uint64_t>(static_cast<uint64_t>(std::ceil(batch_s / per_op)), 1, max_iters);
    }
  }
}

// ---------------------------------------------------------------- buffers

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

// Page-aligned, not touched.  With `huge`, 2 MiB-aligned and advised to use
// transparent huge pages (MADV_HUGEPAGE).  Exits on failure.
inline Buffer AllocBuffer(uint64_t n, bool huge = false) {
  const uint64_t align = huge ? 2 * kMi : kPage;
  const uint64_t bytes = RoundUp(std::max<uint64_t>(n, 1), align);
  void* p = std::aligned_alloc(align, bytes);
  if (!p) {
    std::fprintf(stderr, "cannot allocate %s\n", SizeName(n).c_str());
    std::exit(1);
  }
  if (huge) (void)::madvise(p, bytes, MADV_HUGEPAGE);
  return Buffer(static_cast<uint8_t*>(p));
}

// The data pattern: 64-bit word i of a block holds seed + i * kStep, so data
// from another batch (seed) or another offset never passes the check.
// Blocks are 8-byte aligned.
constexpr uint64_t kStep = 0x9E3779B97F4A7C15ull;

inline void Fill(uint8_t* p, uint64_t n, uint64_t seed) {
  auto* w = reinterpret_cast<uint64_t*>(p);
  const uint64_t words = n / 8;
  uint64_t v = seed;
  for (uint64_t i = 0; i < words; ++i, v += kStep) w[i] = v;
  std::memcpy(p + words * 8, &v, n % 8);
}

// The offset of the first wrong byte, or nullopt.
inline std::optional<uint64_t> Check(const uint8_t* p, uint64_t n, uint64_t seed) {
  const auto* w = reinterpret_cast<const uint64_t*>(p);
  const uint64_t words = n / 8;
  constexpr uint64_t kBlock = 512;
  uint64_t v = seed;
  auto first_bad = [&](uint64_t at, uint64_t want_word, uint64_t bytes) -> std::optional<uint64_t> {
    uint8_t want[8];
    std::memcpy(want, &want_word, 8);
    for (uint64_t k = 0; k < bytes; ++k) {
      if (p[at + k] != want[k]) return at + k;
    }
    return std::nullopt;
  };
  for (uint64_t b = 0; b < words; b += kBlock) {
    const uint64_t e = std::min(words, b + kBlock);
    uint64_t diff = 0, x = v;
    for (uint64_t i = b; i < e; ++i, x += kStep) diff |= w[i] ^ x;  // vectorizes
    if (diff != 0) {
      for (uint64_t i = b; i < e; ++i, v += kStep) {
        if (auto bad = first_bad(i * 8, v, 8)) return bad;
      }
    }
    v = x;
  }
  return first_bad(words * 8, v, n % 8);
}

// Distinct, well-mixed seeds per (batch, rank).
inline uint64_t Seed(uint64_t batch, int rank) {
  uint64_t x = batch * 0x100000001B3ull + static_cast<uint64_t>(rank) * 0xC2B2AE3D27D4EB4Full + 0x165667B19E3779F9ull;
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  return x;
}

// ------------------------------------------------------------ the machine

inline std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto c = line.find(':');
      if (c != std::string::npos) {
        auto s = line.substr(c + 1);
        s.erase(0, s.find_first_not_of(" \t"));
        return s;
      }
    }
  }
  return "unknown";
}

// The 1-, 5- and 15-minute load averages (other work on the machine makes
// numbers noisy).
inline std::vector<double> LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::vector<double> v(3, -1.0);
  f >> v[0] >> v[1] >> v[2];
  return v;
}

inline json Machine() {
  utsname u{};
  ::uname(&u);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return json{{"cpu_model", CpuModel()},
              {"cpus_online", ::sysconf(_SC_NPROCESSORS_ONLN)},
              {"hostname", host},
              {"kernel", std::string(u.sysname) + " " + u.release},
              {"loadavg", LoadAverage()},
              {"memory_GiB", static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                                 static_cast<double>(::sysconf(_SC_PAGE_SIZE)) / static_cast<double>(kGi)}};
}

inline std::string NowIso() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// Writes a JSON document; false (with a message) on failure.
inline bool WriteJson(const std::string& path, const json& doc) {
  std::ofstream f(path);
  f << doc.dump(2) << '\n';
  f.close();
  if (!f) std::fprintf(stderr, "cannot write %s\n", path.c_str());
  return static_cast<bool>(f);
}

}  // namespace hixl_bench

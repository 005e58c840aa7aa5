// Large copies on several cores: a small process-wide pool of copy threads
// that one transfer is split across (HIXL_COPY_THREADS).
//
// A transfer of at least Plan::split_min bytes (4 MiB) is cut into parts of
// at least 1 MiB whose boundaries fall on page boundaries of a given
// address; the calling thread does parts itself and the pool's workers take
// the others.  Anything smaller, or a plan of one thread, runs on the
// calling thread with nothing added but one comparison.
//
// Thread-safe: any number of threads may run transfers at once (they share
// the workers; whoever is not helped does its parts itself).  The workers
// start on first need, spin briefly after a part, then sleep; they are
// joined at exit.  After fork() the child has no workers; they start again
// on its first large transfer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "base/status.h"

namespace hixl::copy {

inline constexpr int kMaxThreads = 64;
inline constexpr int kAutoMaxThreads = 4;  // what "auto" chooses at most
inline constexpr size_t kPage = 4096;
inline constexpr size_t kDefaultSplitMin = size_t{4} << 20;
inline constexpr size_t kDefaultMinPart = size_t{1} << 20;

// How transfers are split.  threads = 1: never (everything on the caller).
struct Plan {
  int threads = 1;
  size_t split_min = kDefaultSplitMin;  // smaller transfers stay whole
};

// The smallest part of a plan: 1 MiB, or a quarter of split_min (whole
// pages, at least one) where split_min is lower (a test setting).
size_t MinPart(const Plan& plan);

// Cuts n bytes into at most plan.threads parts of at least MinPart(plan)
// each, with every inner boundary on a page boundary of `addr + offset`
// (addr: where the bytes go, so no two threads share a page).  Writes the
// boundaries to bounds[0..parts] (bounds[0] = 0, bounds[parts] = n; room
// for kMaxThreads + 1) and returns parts (1 below split_min).
int Split(uint64_t addr, size_t n, const Plan& plan, size_t* bounds);

// The cores this process may run on (its affinity mask; at least 1).
int AvailableCores();

// The ranks on this host, as the launcher says (LOCAL_WORLD_SIZE of
// torchrun and hixlrun, Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's
// MPI_LOCALNRANKS); 1 when none says or what it says is not a positive number.
using EnvLookUp = std::function<std::optional<std::string>(const char*)>;
int LocalRanks(const EnvLookUp& env);
EnvLookUp ProcessEnvLookUp();

// "auto": the cores divided among the ranks of the host, but 2 wherever
// there are two cores, at most kAutoMaxThreads.  A second thread costs
// little where the other core is busy (the caller claims the parts its
// workers do not get to) and doubles a lone sender's copy where it is idle
// (docs/perf.md, "Copy threads").
int AutoThreads(int cores, int local_ranks);

// A HIXL_COPY_THREADS value: "auto" (auto_threads) or 1..kMaxThreads; else
// kInvalidArg naming `shown` (the variable or option as the user wrote it).
Result<int> ParseThreads(std::string_view shown, std::string_view text, int auto_threads);
// A HIXL_COPY_SPLIT_MIN value (testing): bytes, kPage to 1 TiB.
Result<size_t> ParseSplitMin(std::string_view shown, std::string_view text);

// A non-owning reference to `Status(size_t begin, size_t end)`: one part.
class PartFn {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, PartFn>>>
  PartFn(F& f)  // NOLINT(google-explicit-constructor): passed as a lambda
      : obj_(&f), call_([](void* o, size_t b, size_t e) { return (*static_cast<F*>(o))(b, e); }) {}
  Status operator()(size_t begin, size_t end) const { return call_(obj_, begin, end); }

 private:
  void* obj_;
  Status (*call_)(void*, size_t, size_t);
};

// Runs fn on every part [bounds[i], bounds[i+1]) of `parts`, the calling
// thread and the pool together; returns when every part has finished, with
// the first error a part returned (Ok when none did).
Status RunParts(const size_t* bounds, int parts, PartFn fn);

// memcpy, split by `plan` along dst's pages.
void CopySplit(void* dst, const void* src, size_t n, const Plan& plan);

// The hot path: one comparison, then memcpy or the split copy.
inline void Copy(void* dst, const void* src, size_t n, const Plan& plan) {
  if (n <= 16) {
    // Scalars and other small puts without a call into libc: the first
    // and the last bytes, each as one word (they overlap when n is not a
    // power of two).
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    auto two = [&](auto word) {
      decltype(word) a, b;
      std::memcpy(&a, s, sizeof a);
      std::memcpy(&b, s + n - sizeof b, sizeof b);
      std::memcpy(d, &a, sizeof a);
      std::memcpy(d + n - sizeof b, &b, sizeof b);
    };
    if (n >= 8) {
      two(uint64_t{});
    } else if (n >= 4) {
      two(uint32_t{});
    } else if (n >= 2) {
      two(uint16_t{});
    } else if (n == 1) {
      *d = *s;
    }
    return;
  }
  if (n < plan.split_min || plan.threads <= 1) {
    std::memcpy(dst, src, n);
    return;
  }
  CopySplit(dst, src, n, plan);
}

// Testing: workers started in this process (0 before the first split and
// in a forked child until it splits).
int WorkersForTesting();

}  // namespace hixl::copy

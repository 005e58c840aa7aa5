#include "bootstrap/env.h"

#include "bootstrap/pmix.h"

#include <charconv>
#include <cstdlib>

namespace hixl::bootstrap {

GetEnv ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

namespace {

Result<int64_t> ParseInt(const std::string& name, const std::string& text, int64_t lo, int64_t hi) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end || text.empty()) {
    return Err(Errc::kBootstrap, "{}='{}' is not an integer", name, text);
  }
  if (v < lo || v > hi) {
    return Err(Errc::kBootstrap, "{}={} is out of range [{}, {}]", name, v, lo, hi);
  }
  return v;
}

// An on/off variable: 0/false/no/off or 1/true/yes/on (empty: on); absent
// leaves *out as it is.
Status ParseSwitch(const GetEnv& env, const char* name, bool* out) {
  auto m = env(name);
  if (!m) return Status::Ok();
  if (*m == "0" || *m == "false" || *m == "no" || *m == "off") {
    *out = false;
  } else if (*m == "1" || *m == "true" || *m == "yes" || *m == "on" || m->empty()) {
    *out = true;
  } else {
    return Err(Errc::kBootstrap, "{}='{}' must be 0 or 1", name, *m);
  }
  return Status::Ok();
}

struct RankVars {
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* source;
};

// In order of preference.
constexpr RankVars kRankVars[] = {
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun (RANK/WORLD_SIZE)"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "PMI"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "Slurm"},
};

}  // namespace

Result<Config> ParseConfig(const GetEnv& env) {
  Config c;
  for (const RankVars& rv : kRankVars) {
    auto r = env(rv.rank);
    auto s = env(rv.size);
    if (!r && !s) continue;
    if (!r || !s) {
      return Err(Errc::kBootstrap, "{} is set but {} is not: set both or neither", r ? rv.rank : rv.size,
                 r ? rv.size : rv.rank);
    }
    HIXL_ASSIGN_OR_RETURN(int64_t size, ParseInt(rv.size, *s, 1, 1 << 20));
    HIXL_ASSIGN_OR_RETURN(int64_t rank, ParseInt(rv.rank, *r, 0, size - 1));
    c.rank = static_cast<int>(rank);
    c.world_size = static_cast<int>(size);
    c.rank_source = rv.source;
    if (auto lr = env(rv.local_rank)) {
      HIXL_ASSIGN_OR_RETURN(int64_t local, ParseInt(rv.local_rank, *lr, 0, size - 1));
      c.local_rank = static_cast<int>(local);
    } else {
      c.local_rank = c.rank;
    }
    break;
  }

  if (auto a = env("MASTER_ADDR")) {
    if (a->empty()) return Err(Errc::kBootstrap, "MASTER_ADDR is empty");
    c.master_addr = *a;
    c.master_addr_set = true;
  }
  if (auto p = env("MASTER_PORT")) {
    HIXL_ASSIGN_OR_RETURN(int64_t port, ParseInt("MASTER_PORT", *p, 1, 65535));
    c.master_port = static_cast<uint16_t>(port);
  } else if (c.world_size > 1 && UnderPmix(env) && PmixBuiltIn()) {
    c.pmix_rendezvous = true;
  } else if (c.world_size > 1) {
    if (UnderPmix(env)) {
      return Err(Errc::kBootstrap,
                 "world of {} ranks (from {}) started by a PMIx launcher, but this build of hixl has no PMIx "
                 "support (rebuild with Debian's libpmix-dev) and MASTER_PORT is not set: set MASTER_ADDR and "
                 "MASTER_PORT to where rank 0 should host the rendezvous store",
                 c.world_size, c.rank_source);
    }
    return Err(Errc::kBootstrap,
               "world of {} ranks (from {}) but MASTER_PORT is not set: set MASTER_ADDR and "
               "MASTER_PORT to where rank 0 should host the rendezvous store (hixlrun does this)",
               c.world_size, c.rank_source);
  }

  if (auto t = env("HIXL_TIMEOUT_MS")) {
    HIXL_ASSIGN_OR_RETURN(c.timeout_ms, ParseInt("HIXL_TIMEOUT_MS", *t, 1, int64_t{1} << 40));
  }
  if (auto t = env("HIXL_TRANSPORT")) {
    if (*t == "auto" || t->empty()) {
      c.transport = TransportChoice::kAuto;
    } else if (*t == "shm") {
      c.transport = TransportChoice::kShm;
    } else if (*t == "ucx") {
      c.transport = TransportChoice::kUcx;
    } else {
      return Err(Errc::kBootstrap, "HIXL_TRANSPORT='{}' is not one of auto, shm, ucx", *t);
    }
  }
  if (auto d = env("HIXL_NET_DEV")) c.net_dev = *d;
  if (auto q = env("HIXL_NOTIFY_QUEUE_DEPTH")) {
    HIXL_ASSIGN_OR_RETURN(c.notify_queue_depth, ParseInt("HIXL_NOTIFY_QUEUE_DEPTH", *q, 1, 1 << 24));
  }
  HIXL_RETURN_IF_ERROR(ParseSwitch(env, "HIXL_SHM_CMA", &c.shm_cma));
  HIXL_RETURN_IF_ERROR(ParseSwitch(env, "HIXL_SHM_THP", &c.shm_thp));
  if (auto l = env("HIXL_LOG_LEVEL")) {
    if (*l != "error" && *l != "warn" && *l != "info" && *l != "debug" && *l != "trace") {
      return Err(Errc::kBootstrap, "HIXL_LOG_LEVEL='{}' is not one of error, warn, info, debug", *l);
    }
    c.log_level = *l;
  }
  return c;
}

}  // namespace hixl::bootstrap

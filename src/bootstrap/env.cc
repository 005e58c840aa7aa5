#include "bootstrap/env.h"

#include "bootstrap/pmix.h"

#include <cstdlib>

#include "base/switch.h"

namespace hixl::bootstrap {

GetEnv ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

namespace {

Result<int64_t> ParseInt(std::string_view name, const std::string& text, int64_t lo, int64_t hi,
                         Errc code = Errc::kBootstrap) {
  return ParseInteger(name, text, lo, hi, code);
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

Status ParseSharedOption(std::string_view option, std::string_view shown, const std::string& text, SharedOptions* out) {
  if (option == "timeout_ms") {
    HIXL_ASSIGN_OR_RETURN(out->timeout_ms, ParseInt(shown, text, 1, int64_t{1} << 40, Errc::kInvalidArg));
  } else if (option == "notify_queue_depth") {
    HIXL_ASSIGN_OR_RETURN(out->notify_queue_depth, ParseInt(shown, text, 1, 1 << 24, Errc::kInvalidArg));
  } else if (option == "transport") {
    out->transport = text == "auto" ? std::string() : text;
  } else if (option == "net_dev") {
    out->net_dev = text;
  } else {
    return Err(Errc::kInternal, "'{}' is not a shared option", option);
  }
  return Status::Ok();
}

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

  if (auto f = env("HIXL_STORE_FD"); f && c.rank == 0 && c.world_size > 1) {
    HIXL_ASSIGN_OR_RETURN(int64_t fd, ParseInt("HIXL_STORE_FD", *f, 0, 1 << 20));
    c.store_fd = static_cast<int>(fd);
  }

  for (const SharedSwitch& sw : kSharedSwitches) {
    if (auto v = env(sw.variable)) {
      Status s = ParseSharedOption(sw.option, sw.variable, *v, &c);
      if (!s.ok()) return Status(Errc::kBootstrap, s.message());
    }
  }
  Result<auth::MaybeSecret> secret = auth::SecretFromEnv(env);
  if (!secret.ok()) return Status(Errc::kBootstrap, secret.status().message());
  c.secret = *secret;
  if (auto l = env("HIXL_LOG_LEVEL")) {
    if (*l != "error" && *l != "warn" && *l != "info" && *l != "debug" && *l != "trace") {
      return Err(Errc::kBootstrap, "HIXL_LOG_LEVEL='{}' is not one of error, warn, info, debug", *l);
    }
    c.log_level = *l;
  }
  if (auto v = env("HIXL_BARRIER_SPIN_US")) {
    HIXL_ASSIGN_OR_RETURN(c.barrier_spin_us, ParseInt("HIXL_BARRIER_SPIN_US", *v, 0, 1'000'000));
  }
  return c;
}

}  // namespace hixl::bootstrap

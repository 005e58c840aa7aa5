// The world as the environment describes it: torchrun's variables first,
// then Open MPI's, PMI's and Slurm's; nothing at all means a world of one.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/status.h"

namespace hixl::bootstrap {

enum class TransportChoice { kAuto, kShm, kUcx };

struct Config {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  bool master_addr_set = false;  // MASTER_ADDR was given
  uint16_t master_port = 0;
  // No MASTER_PORT, but the launcher is a PMIx server (mpirun, oshrun,
  // srun --mpi=pmix): rank 0 publishes the store's address through PMIx.
  bool pmix_rendezvous = false;
  int64_t timeout_ms = 60000;  // HIXL_TIMEOUT_MS
  TransportChoice transport = TransportChoice::kAuto;
  std::string net_dev;   // HIXL_NET_DEV
  bool shm_cma = true;   // HIXL_SHM_CMA
  bool shm_thp = true;   // HIXL_SHM_THP: huge-page advice for large registered regions
  std::string log_level = "warn";
  int64_t notify_queue_depth = 1024;  // HIXL_NOTIFY_QUEUE_DEPTH
  std::string rank_source = "none";  // which variables gave the rank, for messages
};

// Reads variables through `getenv` (injectable for tests).
using GetEnv = std::function<std::optional<std::string>(const std::string&)>;
GetEnv ProcessEnv();

// Parses the configuration; every malformed or missing value is a
// kBootstrap error naming the variable and what was wrong.
Result<Config> ParseConfig(const GetEnv& env);

}  // namespace hixl::bootstrap

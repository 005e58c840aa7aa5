// The world as the environment describes it: torchrun's variables first,
// then Open MPI's, PMI's and Slurm's; nothing at all means a world of one.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "base/auth.h"
#include "base/status.h"

namespace hixl::bootstrap {

// The switches that every front door takes, with one meaning everywhere:
// the world reads them from HIXL_* variables, the engine from its options
// (which default to the same variables).  See kSharedSwitches.  The
// transports' own switches are theirs to parse (transport::Switch): a front
// door only passes on what it was given for them (transport_settings).
struct SharedOptions {
  int64_t timeout_ms = 60000;  // HIXL_TIMEOUT_MS
  // HIXL_TRANSPORT: the one transport to use, by name ("" = auto, all of
  // them); the transports check the name.
  std::string transport;
  std::string net_dev;                // HIXL_NET_DEV, for the rendezvous's address (the ucx transport reads it too)
  int64_t notify_queue_depth = 1024;  // HIXL_NOTIFY_QUEUE_DEPTH
  // Values given for transports' switches, by option name, as written (the
  // engine's options; the world leaves the transports to their variables).
  std::map<std::string, std::string> transport_settings;
  // The job secret: HIXL_SECRET or HIXL_SECRET_FILE (the engine's option
  // "secret" first); none means connections are not authenticated.
  auth::MaybeSecret secret;
};

// Each shared switch: its name as an engine option, and its variable.
struct SharedSwitch {
  const char* option;
  const char* variable;
};
inline constexpr SharedSwitch kSharedSwitches[] = {
    {"timeout_ms", "HIXL_TIMEOUT_MS"},
    {"transport", "HIXL_TRANSPORT"},
    {"notify_queue_depth", "HIXL_NOTIFY_QUEUE_DEPTH"},
    {"net_dev", "HIXL_NET_DEV"},
};

// Parses `text` as the value of the shared switch `option` (a name of
// kSharedSwitches) into *out.  An empty transport or "auto" means all
// (out->transport empty); another name is kept as written.  On a
// malformed value returns kInvalidArg with a message naming `shown` (the
// variable or option as the user wrote it); *out is then unchanged.
Status ParseSharedOption(std::string_view option, std::string_view shown, const std::string& text, SharedOptions* out);

struct Config : SharedOptions {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  bool master_addr_set = false;  // MASTER_ADDR was given
  uint16_t master_port = 0;
  // No MASTER_PORT, but the launcher is a PMIx server (mpirun, oshrun,
  // srun --mpi=pmix): rank 0 publishes the store's address through PMIx.
  bool pmix_rendezvous = false;
  // HIXL_STORE_FD (rank 0, set by hixlrun): a socket the launcher bound and
  // listens on at MASTER_ADDR:MASTER_PORT, inherited; rank 0 serves the
  // store on it, so no other process can take the port between the
  // launcher's choice and rank 0's start.  -1: rank 0 binds itself.
  int store_fd = -1;
  std::string log_level = "warn";
  // HIXL_BARRIER_SPIN_US: the most a barrier's wait spins before it sleeps
  // (world/barrier.h); 0 sleeps at once.
  int64_t barrier_spin_us = 1000;
  std::string rank_source = "none";  // which variables gave the rank, for messages
};

// Reads variables through `getenv` (injectable for tests).
using GetEnv = std::function<std::optional<std::string>(const std::string&)>;
GetEnv ProcessEnv();

// Parses the configuration; every malformed or missing value is a
// kBootstrap error naming the variable and what was wrong.
Result<Config> ParseConfig(const GetEnv& env);

}  // namespace hixl::bootstrap

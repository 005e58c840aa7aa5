// Rendezvous through PMIx: a process started by `mpirun` (Open MPI), `oshrun`,
// `srun --mpi=pmix` or any other PMIx server learns where rank 0's store
// listens from the launcher itself, so MASTER_ADDR/MASTER_PORT need not be
// set.  Rank 0 publishes "host:port" under a job-wide key, every rank joins a
// PMIx fence that collects it, and the others read it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "bootstrap/env.h"

namespace hixl::bootstrap {

// Whether this build of hixl speaks PMIx.
bool PmixBuiltIn();

// Whether the process runs under a PMIx server (the launcher set
// PMIX_NAMESPACE and PMIX_RANK).  Sends nothing.
bool UnderPmix(const GetEnv& env);

struct StoreAddress {
  std::string host;
  uint16_t port = 0;
};

// Collective over every process of the PMIx job.  Rank 0 calls
// host_store(bind_host) to start its store (bind_host: "127.0.0.1" when
// every rank of the job runs on this node, else this node's address on
// HIXL_NET_DEV's interface or its first non-loopback IPv4 address, unless
// the caller already knows one), then publishes the address; every rank
// returns it.  `rank` and `world_size` must agree with PMIx's view; a
// mismatch, a failed PMIx call or a fence that does not complete within
// timeout_ms is a kBootstrap (kTimeout) error saying which.
using HostStore = std::function<Result<StoreAddress>(const std::string& bind_host)>;
Result<StoreAddress> PmixRendezvous(int rank, int world_size, const std::string& bind_host_hint,
                                    const std::string& net_dev, int64_t timeout_ms, const HostStore& host_store);

}  // namespace hixl::bootstrap

// The shm transport's switches: their engine options and HIXL_* variables,
// parsed here and nowhere else.
#pragma once

#include <vector>

#include "base/copy_pool.h"
#include "base/status.h"
#include "transport/transport.h"

namespace hixl::transport::shm {

struct ShmOptions {
  bool cma = true;  // shm_cma / HIXL_SHM_CMA: copy with process_vm_* (off: the relay)
  bool thp = true;  // shm_thp / HIXL_SHM_THP: advise huge pages for large registered regions
  // shm_promote / HIXL_SHM_PROMOTE: registered private anonymous memory made
  // shared memory that peers map (promotion.h); off: cross-memory attach,
  // for this process's memory and for peers' promoted memory alike.
  bool promote = true;
  bool procfd = true;  // shm_procfd / HIXL_SHM_PROCFD: heap segments opened through /proc (off: asked for)
  // copy_threads / HIXL_COPY_THREADS (auto: copy::AutoThreads of the cores
  // and the host's ranks), copy_split_min / HIXL_COPY_SPLIT_MIN (testing):
  // how mapped copies and cross-memory attach are split (base/copy_pool.h).
  copy::Plan copy;
};

// shm_cma/HIXL_SHM_CMA, shm_thp/HIXL_SHM_THP, shm_promote/HIXL_SHM_PROMOTE, copy_threads/HIXL_COPY_THREADS
// and copy_split_min/HIXL_COPY_SPLIT_MIN.
std::vector<Switch> Switches();

// The shm switches from options.settings, else the environment.  A
// malformed value is kInvalidArg naming the option or variable as written.
Result<ShmOptions> ParseOptions(const Options& options);

}  // namespace hixl::transport::shm

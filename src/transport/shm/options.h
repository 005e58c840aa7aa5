// The shm transport's switches: their engine options and HIXL_* variables,
// parsed here and nowhere else.
#pragma once

#include <vector>

#include "base/status.h"
#include "transport/transport.h"

namespace hixl::transport::shm {

struct ShmOptions {
  bool cma = true;  // shm_cma / HIXL_SHM_CMA: copy with process_vm_* (off: the relay)
  bool thp = true;  // shm_thp / HIXL_SHM_THP: advise huge pages for large registered regions
};

// shm_cma/HIXL_SHM_CMA and shm_thp/HIXL_SHM_THP.
std::vector<Switch> Switches();

// The shm switches from options.settings, else the environment.  A
// malformed value is kInvalidArg naming the option or variable as written.
Result<ShmOptions> ParseOptions(const Options& options);

}  // namespace hixl::transport::shm

// The ucx transport's switches: their engine options and HIXL_* variables,
// parsed here and nowhere else.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "transport/transport.h"

namespace hixl::transport::ucx {

struct UcxOptions {
  std::string net_dev;  // net_dev / HIXL_NET_DEV: UCX's NET_DEVICES ("" = UCX's choice)
  // ucx_spin_us / HIXL_UCX_SPIN_US: how long the progress thread keeps
  // polling after it served a peer's request before it sleeps (Worker::Run).
  int64_t spin_us = 50;
};

// net_dev/HIXL_NET_DEV, ucx_spin_us/HIXL_UCX_SPIN_US.
std::vector<Switch> Switches();

// The ucx switches from options.settings, else the environment.
Result<UcxOptions> ParseOptions(const Options& options);

}  // namespace hixl::transport::ucx

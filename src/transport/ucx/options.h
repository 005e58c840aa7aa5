// The ucx transport's switches: their engine options and HIXL_* variables,
// parsed here and nowhere else.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "transport/transport.h"

namespace hixl::transport::ucx {

struct UcxOptions {
  std::string net_dev;  // net_dev / HIXL_NET_DEV: UCX's NET_DEVICES ("" = UCX's choice)
};

// net_dev/HIXL_NET_DEV.
std::vector<Switch> Switches();

// The ucx switches from options.settings, else the environment.
Result<UcxOptions> ParseOptions(const Options& options);

}  // namespace hixl::transport::ucx

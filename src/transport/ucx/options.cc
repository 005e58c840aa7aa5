#include "transport/ucx/options.h"

namespace hixl::transport::ucx {

namespace {

constexpr Switch kNetDev = {"net_dev", "HIXL_NET_DEV", "the network device(s) UCX uses (its NET_DEVICES)"};

}  // namespace

std::vector<Switch> Switches() { return {kNetDev}; }

Result<UcxOptions> ParseOptions(const Options& options) {
  UcxOptions o;
  if (std::optional<SwitchValue> v = LookUp(options, kNetDev)) o.net_dev = v->text;
  return o;
}

}  // namespace hixl::transport::ucx

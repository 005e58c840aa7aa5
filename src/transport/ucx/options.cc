#include "transport/ucx/options.h"

#include "base/switch.h"

namespace hixl::transport::ucx {

namespace {

constexpr Switch kNetDev = {"net_dev", "HIXL_NET_DEV", "the network device(s) UCX uses (its NET_DEVICES)"};
constexpr Switch kSpinUs = {"ucx_spin_us", "HIXL_UCX_SPIN_US",
                            "microseconds the progress thread keeps polling, yielding the CPU between polls, after "
                            "it served a peer's request (a signal, an atomic) before it sleeps, so that the next "
                            "one costs no wake-up (default 50; 0 to 100000; 0: it sleeps at once)"};

}  // namespace

std::vector<Switch> Switches() { return {kNetDev, kSpinUs}; }

Result<UcxOptions> ParseOptions(const Options& options) {
  UcxOptions o;
  if (std::optional<SwitchValue> v = LookUp(options, kNetDev)) o.net_dev = v->text;
  if (std::optional<SwitchValue> v = LookUp(options, kSpinUs)) {
    HIXL_ASSIGN_OR_RETURN(o.spin_us, ParseInteger(v->shown, v->text, 0, 100'000));
  }
  return o;
}

}  // namespace hixl::transport::ucx

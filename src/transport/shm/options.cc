#include "transport/shm/options.h"

#include "base/switch.h"

namespace hixl::transport::shm {

namespace {

constexpr Switch kCma = {"shm_cma", "HIXL_SHM_CMA",
                         "same-host copies with process_vm_readv/writev (0: through the peer's relay thread)"};
constexpr Switch kThp = {"shm_thp", "HIXL_SHM_THP", "advise transparent huge pages for large registered regions"};

Status ParseOne(const Options& options, const Switch& sw, bool* out) {
  std::optional<SwitchValue> v = LookUp(options, sw);
  if (!v) return Status::Ok();
  HIXL_ASSIGN_OR_RETURN(*out, ParseSwitch(v->shown, v->text));
  return Status::Ok();
}

}  // namespace

std::vector<Switch> Switches() { return {kCma, kThp}; }

Result<ShmOptions> ParseOptions(const Options& options) {
  ShmOptions o;
  HIXL_RETURN_IF_ERROR(ParseOne(options, kCma, &o.cma));
  HIXL_RETURN_IF_ERROR(ParseOne(options, kThp, &o.thp));
  return o;
}

}  // namespace hixl::transport::shm

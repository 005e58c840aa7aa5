#include "transport/shm/options.h"

#include <optional>
#include <string>

#include "base/switch.h"

namespace hixl::transport::shm {

namespace {

constexpr Switch kCma = {"shm_cma", "HIXL_SHM_CMA",
                         "same-host copies with process_vm_readv/writev (0: through the peer's relay thread)"};
constexpr Switch kThp = {"shm_thp", "HIXL_SHM_THP", "advise transparent huge pages for large registered regions"};
constexpr Switch kPromote = {"shm_promote", "HIXL_SHM_PROMOTE",
                             "registered private anonymous memory becomes shared memory that same-host peers map "
                             "(default 1; 0: they reach it by cross-memory attach)"};
constexpr Switch kCopyThreads = {
    "copy_threads", "HIXL_COPY_THREADS",
    "threads that copy one large same-host transfer: auto (the default: the cores "
    "available divided by the ranks on the host, but 2 wherever there are 2 cores, at most 4) or 1 to 64"};
constexpr Switch kCopySplitMin = {"copy_split_min", "HIXL_COPY_SPLIT_MIN",
                                  "testing: bytes from which a same-host transfer is split across the copy "
                                  "threads (default 4 MiB)"};

Status ParseOne(const Options& options, const Switch& sw, bool* out) {
  std::optional<SwitchValue> v = LookUp(options, sw);
  if (!v) return Status::Ok();
  HIXL_ASSIGN_OR_RETURN(*out, ParseSwitch(v->shown, v->text));
  return Status::Ok();
}

}  // namespace

std::vector<Switch> Switches() { return {kCma, kThp, kPromote, kProcFd, kCopyThreads, kCopySplitMin}; }

Result<ShmOptions> ParseOptions(const Options& options) {
  ShmOptions o;
  HIXL_RETURN_IF_ERROR(ParseOne(options, kCma, &o.cma));
  HIXL_RETURN_IF_ERROR(ParseOne(options, kThp, &o.thp));
  HIXL_RETURN_IF_ERROR(ParseOne(options, kPromote, &o.promote));
  HIXL_ASSIGN_OR_RETURN(o.procfd, ProcFdAllowed(options));
  std::optional<SwitchValue> threads = LookUp(options, kCopyThreads);
  const std::string text = threads ? threads->text : "auto";
  const int auto_threads = copy::AutoThreads(copy::AvailableCores(), copy::LocalRanks(copy::ProcessEnvLookUp()));
  HIXL_ASSIGN_OR_RETURN(o.copy.threads,
                        copy::ParseThreads(threads ? threads->shown : kCopyThreads.variable, text, auto_threads));
  if (std::optional<SwitchValue> v = LookUp(options, kCopySplitMin)) {
    HIXL_ASSIGN_OR_RETURN(o.copy.split_min, copy::ParseSplitMin(v->shown, v->text));
  }
  return o;
}

}  // namespace hixl::transport::shm

// The list of transports compiled into the library.  Adding a transport
// means adding it here (CreateTransports, AllSwitches, BuiltInNames) and in
// src/CMakeLists.txt; the core is untouched.
#include "transport/transport.h"

#include <algorithm>
#include <cstdlib>

#include "base/log.h"
#include "base/switch.h"
#include "transport/shm/options.h"
#include "transport/shm/shm_transport.h"
#ifdef HIXL_HAVE_UCX
#include "transport/ucx/options.h"
#include "transport/ucx/ucx_transport.h"
#endif

namespace hixl::transport {

namespace {
thread_local Clock::time_point t_call_deadline = Clock::time_point::max();
}  // namespace

CallDeadline::CallDeadline(Clock::time_point deadline) : previous_(t_call_deadline) {
  t_call_deadline = std::min(deadline, previous_);
}

CallDeadline::~CallDeadline() { t_call_deadline = previous_; }

Clock::time_point WaitDeadline(const Host& host) {
  return std::min(t_call_deadline, Clock::now() + std::chrono::milliseconds(host.timeout_ms()));
}

int64_t WaitMs(const Host& host) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(WaitDeadline(host) - Clock::now()).count();
  return std::max<int64_t>(left, 1);
}

std::optional<SwitchValue> LookUp(const Options& options, const Switch& sw) {
  if (auto it = options.settings.find(sw.option); it != options.settings.end()) {
    return SwitchValue{std::string("option ") + sw.option, it->second};
  }
  if (const char* v = std::getenv(sw.variable)) return SwitchValue{sw.variable, v};
  return std::nullopt;
}

std::vector<std::string> BuiltInNames() {
  std::vector<std::string> out = {"shm"};
#ifdef HIXL_HAVE_UCX
  out.emplace_back("ucx");
#endif
  return out;
}

Status CheckName(std::string_view shown, std::string_view name) {
  const std::vector<std::string> names = BuiltInNames();
  if (name.empty() || name == "auto" || std::find(names.begin(), names.end(), name) != names.end()) {
    return Status::Ok();
  }
  std::string list;
  for (const std::string& n : names) list += n + ", ";
  return Err(Errc::kInvalidArg, "{}='{}': this build of hixl has no {} transport (built in: {}or auto)", shown, name,
             name, list);
}

Result<bool> ProcFdAllowed(const Options& options) {
  std::optional<SwitchValue> v = LookUp(options, kProcFd);
  if (!v) return true;
  return ParseSwitch(v->shown, v->text);
}

std::vector<Switch> AllSwitches() {
  std::vector<Switch> out;
  auto add = [&out](const std::vector<Switch>& more) {
    for (const Switch& sw : more) {
      const bool seen = std::any_of(out.begin(), out.end(),
                                    [&sw](const Switch& o) { return std::string_view(o.option) == sw.option; });
      if (!seen) out.push_back(sw);
    }
  };
  add(shm::Switches());
#ifdef HIXL_HAVE_UCX
  add(ucx::Switches());
#endif
  return out;
}

Result<std::vector<std::unique_ptr<Transport>>> CreateTransports(Host* host, const Options& options) {
  HIXL_RETURN_IF_ERROR(CheckName("transport", options.only));
  // Every built-in transport's switches are checked, used or not, so that a
  // malformed value is refused whichever transports are asked for.
  HIXL_RETURN_IF_ERROR(shm::ParseOptions(options).status());
#ifdef HIXL_HAVE_UCX
  HIXL_RETURN_IF_ERROR(ucx::ParseOptions(options).status());
#endif
  std::vector<std::unique_ptr<Transport>> out;
  auto wanted = [&](std::string_view name) { return options.only.empty() || options.only == name; };
  // Order of preference: the core gives each peer the first transport that
  // can reach it, so same-host peers get shm and the others ucx.
  if (wanted("shm")) {
    HIXL_ASSIGN_OR_RETURN(auto shm, shm::CreateShmTransport(host, options));
    out.push_back(std::move(shm));
  }
#ifdef HIXL_HAVE_UCX
  // A job of one host reaches every peer through shm: UCX, asked for only
  // by "auto", would open TCP listeners on the network interfaces (UCX 1.13
  // cannot use loopback) that nobody of the job needs.
  if (wanted("ucx") && !(options.only.empty() && options.local_only)) {
    auto ucx = ucx::CreateUcxTransport(host, options);
    if (ucx.ok()) {
      out.push_back(std::move(ucx.value()));
    } else if (!options.only.empty()) {
      return Err(Errc::kUnsupported, "the ucx transport could not start here: {}", ucx.status().message());
    } else {
      // A UCX that cannot start (no usable device, a bad HIXL_NET_DEV) leaves
      // same-host work possible; say why, once, and carry on without it.
      HIXL_LOG_ERROR("the ucx transport is unavailable, so peers on other hosts cannot be reached: {}",
                     ucx.status().message());
    }
  }
#endif
  if (out.empty()) return Err(Errc::kUnsupported, "this build of hixl has no {} transport", options.only);
  return out;
}

}  // namespace hixl::transport

// The list of transports compiled into the library.  Adding a transport
// means adding it here and in src/CMakeLists.txt; the core is untouched.
#include "transport/transport.h"

#include "base/log.h"
#include "transport/shm/shm_transport.h"
#ifdef HIXL_HAVE_UCX
#include "transport/ucx/ucx_transport.h"
#endif

namespace hixl::transport {

Result<std::vector<std::unique_ptr<Transport>>> CreateTransports(Host* host, const Options& options) {
  std::vector<std::unique_ptr<Transport>> out;
  auto wanted = [&](std::string_view name) { return options.only.empty() || options.only == name; };
  // Order of preference: the core gives each peer the first transport that
  // can reach it, so same-host peers get shm and the others ucx.
  if (wanted("shm")) {
    HIXL_ASSIGN_OR_RETURN(auto shm, shm::CreateShmTransport(host, options));
    out.push_back(std::move(shm));
  }
#ifdef HIXL_HAVE_UCX
  if (wanted("ucx")) {
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

// The list of transports compiled into the library.  Adding a transport
// means adding it here and in src/CMakeLists.txt; the core is untouched.
#include "transport/transport.h"

#include "transport/shm/shm_transport.h"

namespace hixl::transport {

Result<std::vector<std::unique_ptr<Transport>>> CreateTransports(Host* host, const Options& options) {
  std::vector<std::unique_ptr<Transport>> out;
  HIXL_ASSIGN_OR_RETURN(auto shm, shm::CreateShmTransport(host, options));
  out.push_back(std::move(shm));
  return out;
}

}  // namespace hixl::transport

#include "base/status.h"

#include <string>

namespace hixl {

const char* ErrcName(int code) {
  switch (code) {
    case HIXL_SUCCESS: return "HIXL_SUCCESS";
    case HIXL_ERR_INVALID_ARG: return "HIXL_ERR_INVALID_ARG";
    case HIXL_ERR_NOT_INITIALIZED: return "HIXL_ERR_NOT_INITIALIZED";
    case HIXL_ERR_NOT_REGISTERED: return "HIXL_ERR_NOT_REGISTERED";
    case HIXL_ERR_INVALID_RANK: return "HIXL_ERR_INVALID_RANK";
    case HIXL_ERR_TIMEOUT: return "HIXL_ERR_TIMEOUT";
    case HIXL_ERR_PEER_FAILED: return "HIXL_ERR_PEER_FAILED";
    case HIXL_ERR_NO_MEMORY: return "HIXL_ERR_NO_MEMORY";
    case HIXL_ERR_TRANSPORT: return "HIXL_ERR_TRANSPORT";
    case HIXL_ERR_UNSUPPORTED: return "HIXL_ERR_UNSUPPORTED";
    case HIXL_ERR_ALREADY_INITIALIZED: return "HIXL_ERR_ALREADY_INITIALIZED";
    case HIXL_ERR_BOOTSTRAP: return "HIXL_ERR_BOOTSTRAP";
    case HIXL_ERR_INTERNAL: return "HIXL_ERR_INTERNAL";
    case HIXL_ERR_QUEUE_FULL: return "HIXL_ERR_QUEUE_FULL";
    case HIXL_ERR_NOT_CONNECTED: return "HIXL_ERR_NOT_CONNECTED";
    default: return "HIXL_ERR_UNKNOWN";
  }
}

std::string Status::ToString() const {
  if (ok()) return "HIXL_SUCCESS";
  return std::string(ErrcName(raw_code())) + ": " + message_;
}

namespace {
thread_local std::string t_last_error;
}

void SetLastError(const Status& s) { t_last_error = s.message(); }
const char* LastError() { return t_last_error.c_str(); }

}  // namespace hixl

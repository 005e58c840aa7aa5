// Internal helpers around hixl::Status (defined in the public header).
#pragma once

#include <fmt/format.h>

#include <hixl/hixl.hpp>

namespace hixl {

// Status(code, fmt::format(...)) in one call.
template <typename... Args>
Status Err(Errc code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}

// "HIXL_ERR_TIMEOUT" for a code ("HIXL_ERR_UNKNOWN" for a number that is
// no row of HIXL_ERROR_CODES).
const char* ErrcName(int code);
// "timed out (HIXL_TIMEOUT_MS)": the table's description of a code
// ("unknown error code" for a number that is none).
const char* ErrcDescription(int code);
// True for the numbers that are rows of HIXL_ERROR_CODES.
bool IsKnownErrc(int code);

// The calling thread's last error, as hixl_last_error() reports it.
void SetLastError(const Status& s);
const char* LastError();

#define HIXL_RETURN_IF_ERROR(expr) \
  do {                             \
    ::hixl::Status _st = (expr);   \
    if (!_st.ok()) return _st;     \
  } while (0)

#define HIXL_CONCAT_INNER(a, b) a##b
#define HIXL_CONCAT(a, b) HIXL_CONCAT_INNER(a, b)
#define HIXL_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
#define HIXL_ASSIGN_OR_RETURN(lhs, expr) HIXL_ASSIGN_OR_RETURN_IMPL(HIXL_CONCAT(_res_, __LINE__), lhs, expr)

}  // namespace hixl

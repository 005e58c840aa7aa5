// Names and descriptions of the error codes, all from the one table
// (HIXL_ERROR_CODES, include/hixl/hixl_errors.h), and the checks that the
// literal HIXL_ERR_* of hixl.h are that table.
#include "base/status.h"

#include <string>

namespace hixl {

// hixl.h writes the codes out as literals (for #if); each must be its row.
#define HIXL_CHECK_C_CODE_(c_name, cxx_name, value, desc, engine, py)                   \
  static_assert(c_name == (value), #c_name " in hixl.h differs from HIXL_ERROR_CODES"); \
  static_assert(static_cast<int>(Errc::cxx_name) == (value), "Errc::" #cxx_name " differs from " #c_name);
HIXL_ERROR_CODES(HIXL_CHECK_C_CODE_)
#undef HIXL_CHECK_C_CODE_

namespace {

// The rows are 0, -1, -2, ... without gaps: counting them gives the lowest.
#define HIXL_COUNT_ROW_(...) +1
constexpr int kRows = 0 HIXL_ERROR_CODES(HIXL_COUNT_ROW_);
#undef HIXL_COUNT_ROW_

constexpr bool RowsAreDense() {
  int expect = 0;
#define HIXL_CHECK_DENSE_(c_name, cxx_name, value, desc, engine, py) \
  if ((value) != expect--) return false;
  HIXL_ERROR_CODES(HIXL_CHECK_DENSE_)
#undef HIXL_CHECK_DENSE_
  return true;
}
static_assert(RowsAreDense(), "HIXL_ERROR_CODES must be 0, -1, -2, ... in order, without gaps");

}  // namespace

bool IsKnownErrc(int code) { return code <= 0 && code > -kRows; }

const char* ErrcName(int code) {
  switch (code) {
#define HIXL_NAME_CASE_(c_name, cxx_name, value, desc, engine, py) \
  case value: return #c_name;
    HIXL_ERROR_CODES(HIXL_NAME_CASE_)
#undef HIXL_NAME_CASE_
    default: return "HIXL_ERR_UNKNOWN";
  }
}

const char* ErrcDescription(int code) {
  switch (code) {
#define HIXL_DESC_CASE_(c_name, cxx_name, value, desc, engine, py) \
  case value: return desc;
    HIXL_ERROR_CODES(HIXL_DESC_CASE_)
#undef HIXL_DESC_CASE_
    default: return "unknown error code";
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

// The engine's one mapping from hixl::Errc (what the engine works with
// inside) to the CANN status numbers it returns: the ENGINE_STATUS column
// of HIXL_ERROR_CODES (include/hixl/hixl_errors.h).  Used at the public
// surface only (engine.cc).
#pragma once

#include <hixl/engine.hpp>
#include <hixl/hixl.hpp>

namespace hixl::engine {

constexpr EngineStatus StatusFor(Errc code) {
  switch (code) {
#define HIXL_ENGINE_STATUS_CASE_(c_name, cxx_name, value, desc, engine_status, py) \
  case Errc::cxx_name: return ::hixl::engine_status;
    // One case per row of the table; rows may share a status.
    // NOLINTNEXTLINE(bugprone-branch-clone)
    HIXL_ERROR_CODES(HIXL_ENGINE_STATUS_CASE_)
#undef HIXL_ENGINE_STATUS_CASE_
  }
  return FAILED;  // a number that is no Errc
}

}  // namespace hixl::engine

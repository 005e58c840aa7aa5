// On/off switches as the user writes them (HIXL_* variables, engine
// options): one parser for every layer, so a value means the same
// everywhere.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace hixl {

// 0/false/no/off or 1/true/yes/on (empty: on).  A malformed value is
// kInvalidArg naming `shown` (the variable or option as the user wrote it).
Result<bool> ParseSwitch(std::string_view shown, std::string_view text);

// A decimal integer in [lo, hi]; anything else is `code` naming `shown`.
Result<int64_t> ParseInteger(std::string_view shown, std::string_view text, int64_t lo, int64_t hi,
                             Errc code = Errc::kInvalidArg);

}  // namespace hixl

#include "base/switch.h"

namespace hixl {

Result<bool> ParseSwitch(std::string_view shown, std::string_view text) {
  if (text == "0" || text == "false" || text == "no" || text == "off") return false;
  if (text == "1" || text == "true" || text == "yes" || text == "on" || text.empty()) return true;
  return Err(Errc::kInvalidArg, "{}='{}' must be 0 or 1 (or false/true, no/yes, off/on)", shown, text);
}

}  // namespace hixl

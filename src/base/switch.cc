#include "base/switch.h"

#include <charconv>

namespace hixl {

Result<bool> ParseSwitch(std::string_view shown, std::string_view text) {
  if (text == "0" || text == "false" || text == "no" || text == "off") return false;
  if (text == "1" || text == "true" || text == "yes" || text == "on" || text.empty()) return true;
  return Err(Errc::kInvalidArg, "{}='{}' must be 0 or 1 (or false/true, no/yes, off/on)", shown, text);
}

Result<int64_t> ParseInteger(std::string_view shown, std::string_view text, int64_t lo, int64_t hi, Errc code) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end || text.empty()) return Err(code, "{}='{}' is not an integer", shown, text);
  if (v < lo || v > hi) return Err(code, "{}={} is out of range [{}, {}]", shown, v, lo, hi);
  return v;
}

}  // namespace hixl

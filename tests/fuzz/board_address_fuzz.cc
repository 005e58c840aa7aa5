// core::DecodeBoardAddress on any bytes: an accepted address re-encodes to
// the same bytes and is within the bounds a reader relies on.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/table_board.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto a = hixl::core::DecodeBoardAddress(in);
  if (!a) return 0;
  FUZZ_CHECK(hixl::core::Encode(*a) == in);
  FUZZ_CHECK(a->ids > 0 && a->ids <= hixl::core::kMaxBoardIds);
  FUZZ_CHECK(a->pid > 0 && a->fd >= 0 && a->ino != 0);
  return 0;
}

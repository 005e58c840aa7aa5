// RegionTable::Parse on any bytes.  A table that parses re-serializes to the
// same bytes, and its regions are sorted, non-empty, non-wrapping and apart.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/registry.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto t = hixl::RegionTable::Parse(in);
  if (!t.ok()) return 0;
  FUZZ_CHECK(t->Serialize() == in);
  FUZZ_CHECK(t->regions.size() <= hixl::kMaxTableRegions);
  for (size_t i = 0; i < t->regions.size(); ++i) {
    const auto& r = t->regions[i];
    FUZZ_CHECK(r.len > 0 && r.len - 1 <= UINT64_MAX - r.base);
    FUZZ_CHECK(r.keys.size() <= hixl::kMaxTableKeys);
    if (i > 0) {
      const auto& p = t->regions[i - 1];
      FUZZ_CHECK(p.base < r.base && r.base - p.base >= p.len);
    }
  }
  return 0;
}

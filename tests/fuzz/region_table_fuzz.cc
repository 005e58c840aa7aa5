// RegionTable::Parse on any bytes.  A table that parses re-serializes to the
// same bytes, and its regions are sorted, non-empty, non-wrapping and apart.
// ScanRegionTable (what a first touch reads a board with) agrees with it:
// the same verdict, the same regions and keys visited.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/registry.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto t = hixl::RegionTable::Parse(in);
  struct Count final : hixl::RegionTableVisitor {
    size_t regions = 0, keys = 0;
    void Region(uint64_t, uint64_t, hixl::transport::MemKind) override { ++regions; }
    void Key(std::string_view, std::string_view) override { ++keys; }
  } count;
  auto scanned = hixl::ScanRegionTable(in, count);
  FUZZ_CHECK(scanned.ok() == t.ok());
  if (!t.ok()) return 0;
  FUZZ_CHECK(scanned.value() == t->generation);
  size_t keys = 0;
  for (const auto& r : t->regions) keys += r.keys.size();
  FUZZ_CHECK(count.regions == t->regions.size() && count.keys == keys);
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

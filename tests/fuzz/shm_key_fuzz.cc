// The shm transport's key check (shm::ParseKey) on any bytes: the first 8
// are the region's length, the rest the key blob.  An accepted key holds the
// whole region inside the segment size it names.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "fuzz_check.h"
#include "transport/shm/peer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t len = 0;
  std::memcpy(&len, data, 8);
  const std::string_view blob(reinterpret_cast<const char*>(data + 8), size - 8);
  auto k = hixl::transport::shm::ParseKey(blob, len, 1);
  if (!k.ok()) return 0;
  FUZZ_CHECK(blob.size() == hixl::transport::shm::kKeyBytes);
  FUZZ_CHECK(k->offset <= k->size && len <= k->size - k->offset);
  return 0;
}

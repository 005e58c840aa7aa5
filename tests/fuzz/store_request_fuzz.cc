// The store server's request decoder, on any bytes.  A request that decodes
// re-encodes to the same bytes, and fits its type's frame limit.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "bootstrap/store_protocol.h"
#include "fuzz_check.h"

using namespace hixl::bootstrap::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  Request q;
  if (DecodeRequest(in, &q) != Decoded::kOk) return 0;
  if (std::string(OpName(q.op)) == "UNKNOWN") return 0;
  FUZZ_CHECK(EncodeRequest(q) == in);
  FUZZ_CHECK(size <= MaxRequestFrame(q.op));
  FUZZ_CHECK(q.key.size() <= kMaxKey && q.value.size() <= kMaxValue);
  return 0;
}

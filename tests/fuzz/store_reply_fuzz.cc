// The store client's reply decoders (the reply, then its GET value or ADD
// integer), on any bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "bootstrap/store_protocol.h"
#include "fuzz_check.h"

using namespace hixl::bootstrap::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto reply = DecodeReply(in);
  if (!reply) return 0;
  FUZZ_CHECK(reply->status.message().size() <= kMaxMessage);
  FUZZ_CHECK(reply->fields.size() <= size);
  std::string value;
  if (DecodeValue(reply->fields, &value)) FUZZ_CHECK(EncodeValue(value) == reply->fields);
  int64_t v = 0;
  if (DecodeInt(reply->fields, &v)) FUZZ_CHECK(EncodeInt(v) == reply->fields);
  return 0;
}

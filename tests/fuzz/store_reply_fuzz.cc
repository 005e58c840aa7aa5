// The store client's reply decoders (the reply, then its GET value, ADD
// integer or GATHER values), on any bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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
  // A GATHER of as many values as the fields' first word says (the client
  // asks with its own count; any count exercises the same checks).
  if (reply->fields.size() >= 4) {
    uint32_t n = 0;
    for (int i = 3; i >= 0; --i) n = n << 8 | static_cast<uint8_t>(reply->fields[static_cast<size_t>(i)]);
    std::vector<std::string> values;
    if (DecodeValues(reply->fields, n, &values)) {
      FUZZ_CHECK(values.size() == n);
      std::vector<const std::string*> ptrs;
      for (const std::string& s : values) ptrs.push_back(&s);
      FUZZ_CHECK(EncodeValues(ptrs) == reply->fields);
    }
  }
  return 0;
}

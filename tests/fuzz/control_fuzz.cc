// The control protocol's decoders (invalidation, peer record, named notify,
// hello, hello reply), on any bytes: the first byte picks the decoder.  A
// message that decodes re-encodes to the same bytes and keeps to the limits.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/control_protocol.h"
#include "fuzz_check.h"

using namespace hixl::core;

namespace {

void CheckAddresses(const PublishedAddresses& a) {
  FUZZ_CHECK(a.size() <= kMaxAddresses);
  for (const auto& p : a) FUZZ_CHECK(p.kind.size() <= kMaxNameBytes && p.address.size() <= kMaxAddressBytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 5) {
    case 0:
      if (auto m = DecodeInvalidation(in)) FUZZ_CHECK(Encode(*m) == in);
      break;
    case 1:
      if (auto m = DecodePeerRecord(in)) {
        FUZZ_CHECK(Encode(*m) == in);
        FUZZ_CHECK(m->host.size() <= kMaxNameBytes);
        CheckAddresses(m->addresses);
      }
      break;
    case 2:
      if (auto m = DecodeNamedNotify(in)) {
        FUZZ_CHECK(Encode(*m) == in);
        FUZZ_CHECK(m->name.size() + m->msg.size() <= kMaxNamedNotifyBytes);
      }
      break;
    case 3:
      if (auto m = DecodeHello(in)) {
        FUZZ_CHECK(Encode(*m) == in);
        FUZZ_CHECK(m->name.size() <= kMaxNameBytes && m->callback_host.size() <= kMaxNameBytes);
      }
      break;
    default:
      if (auto m = DecodeHelloReply(in)) {
        FUZZ_CHECK(Encode(*m) == in);
        CheckAddresses(m->addresses);
      }
      break;
  }
  return 0;
}

// The shm socket's decision on one request (shm::DecideRequest) on any
// bytes: the first byte says whether a descriptor came with it, the rest is
// the request.  Only a 24-byte request is acted on; only a relay channel of
// exactly RelayChannelBytes() that came with its descriptor keeps that
// descriptor (the one way to a mapping); a segment is asked for by its
// exact id; a refusal always answers HIXL_ERR_INVALID_ARG, and no reply
// carries back what the request said but its type.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "base/status.h"
#include "fuzz_check.h"
#include "transport/shm/relay.h"
#include "transport/shm/shm_request.h"

namespace shm = hixl::transport::shm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool fd_came = (data[0] & 1) != 0;
  const std::string_view frame(reinterpret_cast<const char*>(data + 1), size - 1);
  const shm::RequestDecision d = shm::DecideRequest(frame, fd_came);

  FUZZ_CHECK(d.reply.a == 0 && d.reply.b == 0);
  FUZZ_CHECK(d.why.empty() || d.action == shm::RequestDecision::kRefuse);
  if (frame.size() != sizeof(shm::Msg)) {
    FUZZ_CHECK(d.action == shm::RequestDecision::kRefuse);
    FUZZ_CHECK(d.reply.status == HIXL_ERR_INVALID_ARG && d.reply.type == 0);
    return 0;
  }
  shm::Msg m;
  std::memcpy(&m, frame.data(), sizeof(m));
  FUZZ_CHECK(d.reply.type == m.type);
  switch (d.action) {
    case shm::RequestDecision::kRefuse:
      FUZZ_CHECK(d.reply.status == HIXL_ERR_INVALID_ARG);
      FUZZ_CHECK(!(m.type == shm::kGetSegment && m.a <= UINT32_MAX));
      FUZZ_CHECK(!(m.type == shm::kOpenRelay && fd_came && m.a == shm::RelayChannelBytes()));
      FUZZ_CHECK(d.why.empty() || (m.type == shm::kOpenRelay && fd_came));
      break;
    case shm::RequestDecision::kGetSegment:
      FUZZ_CHECK(m.type == shm::kGetSegment && m.a <= UINT32_MAX && d.segment == m.a);
      FUZZ_CHECK(d.reply.status == 0);
      break;
    case shm::RequestDecision::kOpenRelay:
      FUZZ_CHECK(m.type == shm::kOpenRelay && fd_came && m.a == shm::RelayChannelBytes());
      FUZZ_CHECK(d.reply.status == 0);
      break;
    default: FUZZ_CHECK(false);
  }
  return 0;
}

#include "transport/shm/shm_request.h"

#include <cstring>

#include "base/status.h"
#include "transport/shm/relay.h"

namespace hixl::transport::shm {

RequestDecision DecideRequest(std::string_view frame, bool fd_came) {
  RequestDecision d;
  d.reply.status = HIXL_ERR_INVALID_ARG;
  if (frame.size() != sizeof(Msg)) return d;
  Msg m;
  std::memcpy(&m, frame.data(), sizeof(m));
  d.reply.type = m.type;
  if (m.type == kGetSegment) {
    if (m.a > UINT32_MAX) return d;  // no such id
    d.action = RequestDecision::kGetSegment;
    d.segment = static_cast<uint32_t>(m.a);
    d.reply.status = 0;
  } else if (m.type == kOpenRelay && fd_came) {
    if (m.a != RelayChannelBytes()) {
      d.why = "the size of the channel is not that of a relay channel";
      return d;
    }
    d.action = RequestDecision::kOpenRelay;
    d.reply.status = 0;
  }
  return d;
}

}  // namespace hixl::transport::shm

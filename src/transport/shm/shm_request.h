// What the shm socket (shm_server.h) does with one request from a peer:
// decided from its 24 bytes and whether a descriptor came with it alone,
// before anything is looked up, mapped or queued.  The bytes are
// untrusted (any process of the user, or any holder of the secret, may
// send them); tests/fuzz/shm_request_fuzz.cc feeds it arbitrary ones.
#pragma once

#include <cstdint>
#include <string_view>

#include "transport/shm/fd_channel.h"

namespace hixl::transport::shm {

struct RequestDecision {
  enum Action : uint8_t {
    kRefuse,      // reply as is; the connection stays unidentified
    kGetSegment,  // look up `segment`; reply with its memfd and size, or kInvalidArg
    kOpenRelay,   // hand the descriptor (a channel of RelayChannelBytes()) to the relay thread
  };
  Action action = kRefuse;
  uint32_t segment = 0;  // kGetSegment: the id asked for
  Msg reply;             // type: the request's; kRefuse: status is HIXL_ERR_INVALID_ARG
  // Why a request that looked like a relay channel was refused (for the
  // log); empty otherwise.  Other refusals (unknown types, segment ids past
  // 32 bits) are answered without a word, as a stranger's garbage is.
  std::string_view why;
};

// Decides on one request (`frame`: what the peer sent, exactly sizeof(Msg)
// bytes or it is refused; `fd_came`: whether a descriptor came with it).
// Only kOpenRelay keeps the descriptor; for every other action the caller
// closes it (off the loop thread: a stranger's file may block).
RequestDecision DecideRequest(std::string_view frame, bool fd_came);

}  // namespace hixl::transport::shm

// The request connection between the shm transports of two processes on one
// host: a Unix stream socket in the abstract namespace (nothing to clean up
// in the file system) carrying fixed-size messages and, with SCM_RIGHTS,
// file descriptors: heap segments, relay channels, doorbells.
//
// An origin connects to a target's socket on first need and sends
// requests; the target's progress thread answers each with one reply.
#pragma once

#include <cstdint>
#include <string>

#include "base/socket.h"
#include "base/status.h"

namespace hixl::transport::shm {

enum MsgType : uint32_t {
  kGetSegment = 1,  // a: the segment id.  Reply: the segment's memfd; a: its size
  kOpenRelay = 2,   // passes the channel's memfd; a: its size.  Reply: the target's doorbell
};

struct Msg {
  uint32_t type = 0;
  int32_t status = 0;  // in a reply: 0, or a HIXL_ERR_* code
  uint64_t a = 0;
  uint64_t b = 0;
};

// Sends m and, when fd_to_pass >= 0, that fd with it (the receiver gets its
// own copy).
Status SendMsg(int sock, const Msg& m, int fd_to_pass, net::Deadline deadline);
// Receives one message and the fd passed with it, if any, into *fd (when
// fd is null a passed fd is closed).
Status RecvMsg(int sock, Msg* m, net::Fd* fd, net::Deadline deadline);

// A socket listening at the abstract name.
Result<net::Fd> ListenAt(const std::string& name);
// A socket connected to the one listening at the abstract name.
Result<net::Fd> ConnectTo(const std::string& name);

}  // namespace hixl::transport::shm

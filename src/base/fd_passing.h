// Passing file descriptors over a Unix stream socket (SCM_RIGHTS), without
// blocking: the frame server's part of it (base/frame_server.h).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <vector>

#include "base/socket.h"

namespace hixl::net {

// recv(MSG_DONTWAIT) that also takes up to max_fds descriptors passed with
// the bytes (close-on-exec, owned by *fds from here on).  *truncated: more
// were passed than fit (the kernel closed the rest).  The kernel ends a
// read with the message that carried descriptors, so they belong to the
// last byte read.
ssize_t RecvWithFds(int sock, char* buf, size_t size, size_t max_fds, std::vector<Fd>* fds, bool* truncated);

// send(MSG_DONTWAIT | MSG_NOSIGNAL) of size bytes with a copy of fd going
// with the first of them (fd < 0: the bytes alone).
ssize_t SendWithFd(int sock, const char* data, size_t size, int fd);

}  // namespace hixl::net

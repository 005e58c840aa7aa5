#include "base/fd_passing.h"

#include <sys/socket.h>

#include <cstring>

namespace hixl::net {

ssize_t RecvWithFds(int sock, char* buf, size_t size, size_t max_fds, std::vector<Fd>* fds, bool* truncated) {
  iovec iov{buf, size};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  std::vector<char> ctrl(CMSG_SPACE(max_fds * sizeof(int)));
  h.msg_control = ctrl.data();
  h.msg_controllen = ctrl.size();
  const ssize_t k = ::recvmsg(sock, &h, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (k < 0) return k;
  for (cmsghdr* m = CMSG_FIRSTHDR(&h); m; m = CMSG_NXTHDR(&h, m)) {
    if (m->cmsg_level != SOL_SOCKET || m->cmsg_type != SCM_RIGHTS) continue;
    const size_t n = (m->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(m) + i * sizeof(int), sizeof(int));
      fds->emplace_back(fd);
    }
  }
  *truncated = (h.msg_flags & MSG_CTRUNC) != 0;
  return k;
}

ssize_t SendWithFd(int sock, const char* data, size_t size, int fd) {
  iovec iov{const_cast<char*>(data), size};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  if (fd < 0) return ::sendmsg(sock, &h, MSG_NOSIGNAL | MSG_DONTWAIT);
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))] = {};
  h.msg_control = ctrl;
  h.msg_controllen = sizeof(ctrl);
  cmsghdr* m = CMSG_FIRSTHDR(&h);
  m->cmsg_level = SOL_SOCKET;
  m->cmsg_type = SCM_RIGHTS;
  m->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(m), &fd, sizeof(int));
  return ::sendmsg(sock, &h, MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace hixl::net

#include "transport/shm/fd_channel.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "base/fd_passing.h"

namespace hixl::transport::shm {

using net::Deadline;
using net::Fd;

Status SendMsg(int sock, const Msg& m, int fd_to_pass, Deadline deadline) {
  while (true) {
    const ssize_t n = net::SendWithFd(sock, reinterpret_cast<const char*>(&m), sizeof(m), fd_to_pass);
    if (n == static_cast<ssize_t>(sizeof(m))) return Status::Ok();
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{sock, POLLOUT, 0};
      if (::poll(&p, 1, net::MsLeft(deadline)) == 0) return Err(Errc::kTimeout, "shm socket send timed out");
      continue;
    }
    return Err(Errc::kPeerFailed, "shm socket send failed: {}", n < 0 ? std::strerror(errno) : "short write");
  }
}

Status RecvMsg(int sock, Msg* m, Fd* fd, Deadline deadline) {
  std::vector<Fd> fds;  // any beyond the first are closed here
  while (true) {
    bool truncated = false;
    const ssize_t n = net::RecvWithFds(sock, reinterpret_cast<char*>(m), sizeof(*m), 1, &fds, &truncated);
    if (n == 0) return Err(Errc::kPeerFailed, "shm socket closed by peer");
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{sock, POLLIN, 0};
      if (::poll(&p, 1, net::MsLeft(deadline)) == 0) return Err(Errc::kTimeout, "shm socket receive timed out");
      continue;
    }
    if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) {
      // It died (or closed) with our request unread.
      return Err(Errc::kPeerFailed, "shm socket receive failed: {}", std::strerror(errno));
    }
    if (n != static_cast<ssize_t>(sizeof(*m))) {
      return Err(Errc::kTransport, "shm socket receive failed: {}", n < 0 ? std::strerror(errno) : "short read");
    }
    break;
  }
  if (fd && !fds.empty()) *fd = std::move(fds.front());
  return Status::Ok();
}

namespace {

sockaddr_un AbstractAddress(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  a.sun_path[0] = '\0';
  std::memcpy(a.sun_path + 1, name.data(), std::min(name.size(), sizeof(a.sun_path) - 2));
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

}  // namespace

Result<Fd> ListenAt(const std::string& name) {
  Fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return Err(Errc::kTransport, "socket() failed: {}", std::strerror(errno));
  socklen_t len = 0;
  sockaddr_un a = AbstractAddress(name, &len);
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(s.get(), 128) != 0) {
    return Err(Errc::kTransport, "cannot listen on a Unix socket: {}", std::strerror(errno));
  }
  return s;
}

Result<Fd> ConnectTo(const std::string& name) {
  Fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  socklen_t len = 0;
  sockaddr_un a = AbstractAddress(name, &len);
  if (!s.valid() || ::connect(s.get(), reinterpret_cast<sockaddr*>(&a), len) != 0) {
    return Err(Errc::kPeerFailed, "{}", std::strerror(errno));
  }
  return s;
}

}  // namespace hixl::transport::shm

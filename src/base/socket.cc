#include "base/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace hixl::net {

int MsLeft(Deadline d) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

void Fd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

Status SysErr(Errc code, const char* what, const std::string& where) {
  return Err(code, "{} {} failed: {}", what, where, std::strerror(errno));
}

// Resolves host:port into a list of addresses (IPv4 and IPv6).
Result<addrinfo*> Resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  const char* node = (host.empty() || host == "0.0.0.0") && passive ? nullptr : host.c_str();
  int rc = ::getaddrinfo(node, service.c_str(), &hints, &res);
  if (rc != 0) {
    return Err(Errc::kBootstrap, "cannot resolve '{}:{}': {}", host, port, gai_strerror(rc));
  }
  return res;
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

bool IsLoopback(const std::string& host) {
  if (host.empty() || host == "0.0.0.0" || host == "::") return false;
  auto res = Resolve(host, 0, false);
  if (!res.ok()) return false;
  bool any = false, all = true;
  for (addrinfo* ai = res.value(); ai; ai = ai->ai_next) {
    any = true;
    if (ai->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(ai->ai_addr);
      all = all && (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (ai->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(ai->ai_addr);
      all = all && IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    } else {
      all = false;
    }
  }
  ::freeaddrinfo(res.value());
  return any && all;
}

Result<Fd> Listen(const std::string& host, uint16_t port, int backlog) {
  HIXL_ASSIGN_OR_RETURN(addrinfo * res, Resolve(host, port, true));
  Status last = Err(Errc::kBootstrap, "no address to listen on for '{}:{}'", host, port);
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last = SysErr(Errc::kBootstrap, "socket()", host);
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last = SysErr(Errc::kBootstrap, "bind()", fmt::format("{}:{}", host, port));
      continue;
    }
    if (::listen(fd.get(), backlog) != 0) {
      last = SysErr(Errc::kBootstrap, "listen()", fmt::format("{}:{}", host, port));
      continue;
    }
    ::freeaddrinfo(res);
    return fd;
  }
  ::freeaddrinfo(res);
  return last;
}

Result<uint16_t> LocalPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return SysErr(Errc::kBootstrap, "getsockname()", "");
  }
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

Result<Fd> Connect(const std::string& host, uint16_t port, Deadline deadline, bool retry_refused) {
  auto backoff = std::chrono::milliseconds(1);
  while (true) {
    HIXL_ASSIGN_OR_RETURN(addrinfo * res, Resolve(host, port, false));
    std::string last = "no address";
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
      if (!fd.valid()) {
        last = std::strerror(errno);
        continue;
      }
      int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd.get(), POLLOUT, 0};
        rc = ::poll(&p, 1, MsLeft(deadline));
        if (rc == 1) {
          int err = 0;
          socklen_t len = sizeof(err);
          ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          errno = err;
          rc = err == 0 ? 0 : -1;
        } else {
          errno = rc == 0 ? ETIMEDOUT : errno;
          rc = -1;
        }
      }
      if (rc == 0) {
        ::freeaddrinfo(res);
        int flags = ::fcntl(fd.get(), F_GETFL);
        ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
        SetNoDelay(fd.get());
        return fd;
      }
      const int err = errno;
      last = std::strerror(err);
      if (!retry_refused && err == ECONNREFUSED) {
        ::freeaddrinfo(res);
        return Err(Errc::kPeerFailed, "cannot connect to {}:{}: {} (it listened there before: gone)", host, port, last);
      }
    }
    ::freeaddrinfo(res);
    if (Clock::now() >= deadline) {
      return Err(Errc::kTimeout, "cannot connect to {}:{} before the timeout: {}", host, port, last);
    }
    // Nothing listens yet (the peer is starting): retry with a growing pause.
    std::this_thread::sleep_for(
        std::min<std::chrono::milliseconds>(backoff, std::chrono::milliseconds(std::max(1, MsLeft(deadline)))));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
}

Status SendAll(int fd, const void* buf, size_t n, Deadline deadline) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pfd{fd, POLLOUT, 0};
      int rc = ::poll(&pfd, 1, MsLeft(deadline));
      if (rc == 0) return Err(Errc::kTimeout, "send timed out");
      continue;
    }
    return Err(Errc::kPeerFailed, "send failed: {}", std::strerror(errno));
  }
  return Status::Ok();
}

Status RecvAll(int fd, void* buf, size_t n, Deadline deadline) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0) return Err(Errc::kPeerFailed, "connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd pfd{fd, POLLIN, 0};
      int rc = ::poll(&pfd, 1, MsLeft(deadline));
      if (rc == 0) return Err(Errc::kTimeout, "receive timed out");
      continue;
    }
    return Err(Errc::kPeerFailed, "recv failed: {}", std::strerror(errno));
  }
  return Status::Ok();
}

Status SendFrame(int fd, std::string_view payload, Deadline deadline) {
  if (payload.size() > kMaxFrameBytes) return Err(Errc::kInvalidArg, "frame of {} bytes is too large", payload.size());
  std::string buf(4 + payload.size(), '\0');
  uint32_t n = static_cast<uint32_t>(payload.size());
  std::memcpy(buf.data(), &n, 4);
  std::memcpy(buf.data() + 4, payload.data(), payload.size());
  return SendAll(fd, buf.data(), buf.size(), deadline);
}

Result<std::string> RecvFrame(int fd, Deadline deadline, uint32_t max_bytes) {
  uint32_t n = 0;
  HIXL_RETURN_IF_ERROR(RecvAll(fd, &n, 4, deadline));
  if (!FrameLengthOk(n, max_bytes)) {
    return Err(Errc::kTransport, "received a frame header of {} bytes, more than the {} this message may have", n,
               std::min(max_bytes, kMaxFrameBytes));
  }
  // Grow with what arrives (at most doubling), never with what the header says.
  constexpr size_t kFirstChunk = size_t{64} << 10;
  std::string s;
  while (s.size() < n) {
    const size_t have = s.size();
    const size_t want = std::min<size_t>(n, std::max(kFirstChunk, have * 2));
    s.resize(want);
    HIXL_RETURN_IF_ERROR(RecvAll(fd, s.data() + have, want - have, deadline));
  }
  return s;
}

std::string PeerAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    return fmt::format("{}:{}", buf, ntohs(a->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    return fmt::format("[{}]:{}", buf, ntohs(a->sin6_port));
  }
  return "a local socket";
}

std::string LocalAddressTowards(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) return "127.0.0.1";
  Fd fd(::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  bool ok = fd.valid() && ::connect(fd.get(), res->ai_addr, res->ai_addrlen) == 0;  // a UDP connect sends nothing
  ::freeaddrinfo(res);
  if (!ok) return "127.0.0.1";
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "127.0.0.1";
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof(buf));
  } else {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

}  // namespace hixl::net

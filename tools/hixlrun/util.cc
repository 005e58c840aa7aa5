// hixlrun: small helpers (see util.h).
#include "util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <sodium.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hixlrun {

bool write_all(int fd, const char *data, std::size_t len) {
  while (len > 0) {
    ssize_t w = ::write(fd, data, len);
    if (w > 0) {
      data += w;
      len -= static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, -1) < 0 && errno != EINTR) return false;
      continue;
    }
    return false;
  }
  return true;
}

void message(const std::string &msg) {
  std::string line = "hixlrun: " + msg + "\n";
  (void)write_all(STDERR_FILENO, line.data(), line.size());
}

std::string errno_text(int err) { return std::strerror(err); }

std::string new_secret_hex() {
  if (sodium_init() < 0) {
    message("libsodium failed to initialize; cannot make a job secret");
    std::exit(1);
  }
  unsigned char key[32];
  randombytes_buf(key, sizeof(key));
  char hex[2 * sizeof(key) + 1];
  sodium_bin2hex(hex, sizeof(hex), key, sizeof(key));
  sodium_memzero(key, sizeof(key));
  return hex;
}

std::string signal_name(int sig) {
  const char *abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string format_seconds(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::string signal_text(int sig) {
  const char *abbrev = sigabbrev_np(sig);
  const char *desc = sigdescr_np(sig);
  std::string s = std::to_string(sig);
  if (abbrev != nullptr) s += std::string(" (SIG") + abbrev + (desc != nullptr ? std::string(": ") + desc : "") + ")";
  return s;
}

void close_fd(int &fd) {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
}

void ensure_std_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int n = ::open("/dev/null", O_RDWR);
      if (n >= 0 && n != fd) {
        ::dup2(n, fd);
        ::close(n);
      }
    }
  }
}

}  // namespace hixlrun

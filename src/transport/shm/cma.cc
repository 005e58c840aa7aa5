#include "transport/shm/cma.h"

#include <errno.h>
#include <sys/uio.h>

#include <cstring>

#include "base/log.h"

namespace hixl::transport::shm {

Status CmaV(Peer* p, bool write, const Transport::Piece* pieces, size_t count) {
  constexpr size_t kIov = 64;  // per system call; on the stack (no allocation per put)
  iovec liov[kIov], riov[kIov];
  size_t i = 0, done = 0;  // the next byte to move: piece i, offset done
  while (i < count) {
    size_t m = 0;
    for (size_t j = i; j < count && m < kIov; ++j) {
      const size_t off = j == i ? done : 0;
      if (pieces[j].n == off) continue;
      liov[m] = {static_cast<uint8_t*>(pieces[j].local) + off, pieces[j].n - off};
      riov[m] = {reinterpret_cast<void*>(pieces[j].remote + off), pieces[j].n - off};
      ++m;
    }
    if (m == 0) break;
    ssize_t k =
        write ? ::process_vm_writev(p->pid, liov, m, riov, m, 0) : ::process_vm_readv(p->pid, liov, m, riov, m, 0);
    if (k > 0) {
      auto left = static_cast<size_t>(k);
      while (i < count && left >= pieces[i].n - done) {
        left -= pieces[i].n - done;
        ++i;
        done = 0;
      }
      done += left;
      continue;
    }
    int e = k == 0 ? EFAULT : errno;
    if (e == EINTR) continue;
    if (e == EPERM || e == ENOSYS || e == EACCES) {
      if (p->use_cma.exchange(false)) {
        HIXL_LOG_INFO("cross-memory attach to rank {} refused ({}); using the shared-memory relay", p->rank,
                      std::strerror(e));
      }
      return Status(Errc::kUnsupported, "");
    }
    if (e == ESRCH) return Err(Errc::kPeerFailed, "rank {} (pid {}) has exited", p->rank, p->pid);
    return Err(Errc::kTransport, "cross-memory {} of rank {} at {:#x} failed: {}", write ? "write" : "read", p->rank,
               pieces[i].remote + done, std::strerror(e));
  }
  return Status::Ok();
}

}  // namespace hixl::transport::shm

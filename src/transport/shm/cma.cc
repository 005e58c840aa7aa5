#include "transport/shm/cma.h"

#include <errno.h>
#include <sys/uio.h>

#include <cstring>

#include "base/log.h"

namespace hixl::transport::shm {

namespace {

// Moves bytes [begin, end) of the pieces laid end to end, with serial
// system calls of up to 64 iovecs each; a partial transfer resumes where it
// stopped.
Status CmaRange(Peer* p, bool write, const Transport::Piece* pieces, size_t count, size_t begin, size_t end) {
  constexpr size_t kIov = 64;  // per system call; on the stack (no allocation per put)
  iovec liov[kIov], riov[kIov];
  size_t i = 0, done = begin;  // the next byte to move: piece i, offset done
  while (i < count && done >= pieces[i].n) done -= pieces[i++].n;
  size_t left = end - begin;  // bytes still to move
  while (left > 0 && i < count) {
    size_t m = 0, asked = 0;
    for (size_t j = i; j < count && m < kIov && asked < left; ++j) {
      const size_t off = j == i ? done : 0;
      const size_t n = std::min(pieces[j].n - off, left - asked);
      if (n == 0) continue;
      liov[m] = {static_cast<uint8_t*>(pieces[j].local) + off, n};
      riov[m] = {reinterpret_cast<void*>(pieces[j].remote + off), n};
      asked += n;
      ++m;
    }
    if (m == 0) break;
    ssize_t k =
        write ? ::process_vm_writev(p->pid, liov, m, riov, m, 0) : ::process_vm_readv(p->pid, liov, m, riov, m, 0);
    if (k > 0) {
      auto moved = static_cast<size_t>(k);
      left -= moved;
      while (i < count && moved >= pieces[i].n - done) {
        moved -= pieces[i].n - done;
        ++i;
        done = 0;
      }
      done += moved;
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

}  // namespace

Status CmaV(Peer* p, bool write, const Transport::Piece* pieces, size_t count, const copy::Plan& plan) {
  size_t total = 0;
  for (size_t i = 0; i < count; ++i) total += pieces[i].n;
  if (total < plan.split_min || plan.threads <= 1 || count == 0) return CmaRange(p, write, pieces, count, 0, total);
  // Parts along the peer's pages for one piece; along the byte stream for many.
  size_t bounds[copy::kMaxThreads + 1];
  const int parts = copy::Split(count == 1 ? pieces[0].remote : 0, total, plan, bounds);
  auto part = [&](size_t b, size_t e) { return CmaRange(p, write, pieces, count, b, e); };
  return copy::RunParts(bounds, parts, part);
}

}  // namespace hixl::transport::shm

// Shared-memory files between processes of one host: mappings, sealing, and
// opening a file another process holds open.
//
// A peer's file is untrusted: it is mapped only when its size is sealed
// against shrinking and holds what is claimed (MapPeerFile), so no access to
// the mapping can raise SIGBUS whatever the peer does later.
//
// OpenPeerFd reaches a peer's memfd without a message: through
// /proc/<pid>/fd/<n>, which the kernel allows only where this process may
// read the peer's state (same user, not made undumpable; the check of
// ptrace_may_access), and which it checks again here against the file's
// inode number and the peer's pidfd (a pid reused by another process is
// refused).  Where it is refused, callers ask the peer over a socket instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "base/socket.h"
#include "base/status.h"

namespace hixl::sharedmem {

// Owns one mmap'ed range; unmaps it when destroyed or reset.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* p, size_t n) : p_(p), n_(n) {}
  Mapping(Mapping&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(o.n_) {}
  Mapping& operator=(Mapping&& o) noexcept {
    if (this != &o) {
      Reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = o.n_;
    }
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { Reset(); }
  void Reset();
  void* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// Maps the first n bytes of fd, shared and writable.
Result<Mapping> MapShared(int fd, size_t n);

// Seals a memfd's size (F_SEAL_SHRINK, F_SEAL_GROW, then F_SEAL_SEAL): what
// hixl passes to a peer can never shrink under the peer's mapping, which
// would raise SIGBUS in the peer.  The memfd must have been made with
// MFD_ALLOW_SEALING.
Status SealSize(int memfd);

// Maps the first n bytes of a memfd that a peer passed: only one whose size
// is sealed against shrinking and holds at least n bytes (fstat).  `what`
// names it in the error ("heap segment 3 of rank 1").
Result<Mapping> MapPeerFile(int fd, size_t n, const std::string& what);

// The inode number of an open file (0 when fstat fails).
uint64_t FileInode(int fd);

// Whether the process a pidfd (pidfd_open) names has exited: its pidfd
// turns readable then.  False for -1 (no pidfd: nothing to ask).
bool Exited(int pidfd);

// This process's host as processes that may share memory compare it: the
// same boot, network namespace and PID namespace (so that a pid names the
// same process on both sides).
std::string HostIdentity();

// Opens descriptor `fd` of process `pid` (read and write) through
// /proc/<pid>/fd/<fd>: only a regular file whose inode number is `ino`, and
// only while `pidfd` (pidfd_open of the peer, made before; -1 when none)
// says the process is alive, so that a reused pid is never trusted.  The
// error names `what` and why (refused, not that file, exited).
Result<net::Fd> OpenPeerFd(int pidfd, int32_t pid, int32_t fd, uint64_t ino, const std::string& what);

}  // namespace hixl::sharedmem

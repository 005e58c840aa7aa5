// Holding other threads' writes to a range while it is copied: promotion
// (promotion.h) copies a range's pages into a memfd and maps the memfd over
// them; a write by another thread to a page already copied would land in the
// private page that the mapping then replaces, and be lost.
//
// WriteGuard write-protects the range with a userfaultfd (UFFDIO_REGISTER_
// MODE_WP, Linux 5.7 and later for anonymous memory): a thread that writes
// it blocks in the page fault -- reads go on -- until the guard is dropped,
// when it retries its write, on whatever the range is mapped to by then.
// Nothing reads the userfaultfd's events: closing it wakes every waiter.
//
// Writes made by the kernel on a thread's behalf (read(2) into the range)
// wait as well where the process may handle kernel faults (CAP_SYS_PTRACE,
// root, or vm.unprivileged_userfaultfd=1); elsewhere the guard handles
// user-mode faults only and such a system call fails with EFAULT during
// the copy instead.  Device (DMA) writes are not seen by page tables and
// are not held.
#pragma once

#include <cstdint>

#include "base/socket.h"
#include "base/status.h"

namespace hixl::transport::shm {

class WriteGuard {
 public:
  // Write-protects [lo, hi) (page-aligned, private anonymous memory).
  // kUnsupported, saying why, where the kernel or the process's privileges
  // do not allow it (no userfaultfd, no write-protect mode, the range
  // already registered with another userfaultfd); the range is then left
  // as it was.
  // `unpopulated` false (for tests): do as on kernels before 6.4, which
  // cannot protect pages never touched: populate them first.
  static Result<WriteGuard> Hold(uint64_t lo, uint64_t hi, bool unpopulated = true);

  WriteGuard(WriteGuard&&) noexcept = default;
  WriteGuard& operator=(WriteGuard&&) noexcept = default;
  // Releases the writers (closes the userfaultfd).
  ~WriteGuard() = default;

 private:
  explicit WriteGuard(net::Fd fd) : fd_(std::move(fd)) {}
  net::Fd fd_;
};

}  // namespace hixl::transport::shm

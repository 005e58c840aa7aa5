#include "transport/shm/write_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "base/log.h"

namespace hixl::transport::shm {

namespace {

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif

// A userfaultfd with write-protect faults: one that handles kernel-mode
// faults too where the process may, else user-mode faults only.
Result<net::Fd> OpenUffd(uint64_t features) {
  int fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd < 0 && errno == EPERM) {
    fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
    if (fd >= 0) {
      HIXL_LOG_DEBUG(
          "shm: userfaultfd for user-mode faults only: a system call that writes into memory being "
          "registered fails with EFAULT during the copy");
    }
  }
  if (fd < 0)
    return Err(Errc::kUnsupported, "no userfaultfd to hold other threads' writes during the copy: {}",
               std::strerror(errno));
  net::Fd f(fd);
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = features;
  if (::ioctl(fd, UFFDIO_API, &api) != 0) {
    return Err(Errc::kUnsupported, "the kernel's userfaultfd has no write-protect mode: {}", std::strerror(errno));
  }
  return f;
}

}  // namespace

Result<WriteGuard> WriteGuard::Hold(uint64_t lo, uint64_t hi, bool unpopulated) {
  if (lo >= hi) return Err(Errc::kInvalidArg, "an empty range [{:#x}, {:#x})", lo, hi);
  const uint64_t n = hi - lo;
  // Pages never touched have no page table entry to protect: Linux 6.4 and
  // later protect them too (WP_UNPOPULATED); before, they are populated
  // first (reads map the zero page, which the protection then covers).
  Result<net::Fd> fd =
      OpenUffd(UFFD_FEATURE_PAGEFAULT_FLAG_WP | (unpopulated ? UFFD_FEATURE_WP_UNPOPULATED : uint64_t{0}));
  if (!fd.ok() && unpopulated) {
    unpopulated = false;
    fd = OpenUffd(UFFD_FEATURE_PAGEFAULT_FLAG_WP);
  }
  if (!fd.ok()) return fd.status();
  const int raw = fd.value().get();
  if (!unpopulated && ::madvise(reinterpret_cast<void*>(lo), n, MADV_POPULATE_READ) != 0) {
    return Err(Errc::kUnsupported, "cannot populate the range's page tables before protecting it: {}",
               std::strerror(errno));
  }
  uffdio_register reg{};
  reg.range.start = lo;
  reg.range.len = n;
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  if (::ioctl(raw, UFFDIO_REGISTER, &reg) != 0) {
    return Err(Errc::kUnsupported, "cannot write-protect the range with a userfaultfd{}: {}",
               errno == EBUSY ? " (another userfaultfd holds it)" : "", std::strerror(errno));
  }
  uffdio_writeprotect wp{};
  wp.range.start = lo;
  wp.range.len = n;
  wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
  if (::ioctl(raw, UFFDIO_WRITEPROTECT, &wp) != 0) {
    // Closing the userfaultfd (fd's destructor) unregisters the range.
    return Err(Errc::kUnsupported, "cannot write-protect the range with a userfaultfd: {}", std::strerror(errno));
  }
  return WriteGuard(std::move(fd.value()));
}

}  // namespace hixl::transport::shm

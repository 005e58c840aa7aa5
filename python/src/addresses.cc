// Local int addresses (see addresses.h).
#include "addresses.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "state.h"

namespace hixl_py {

void KnownRanges::Add(uintptr_t begin, size_t n) {
  if (n == 0 || begin + n < begin) return;
  ++ranges_[{begin, begin + n}];
  Rebuild();
}

void KnownRanges::Remove(uintptr_t begin, size_t n) {
  auto it = ranges_.find({begin, begin + n});
  if (it == ranges_.end()) return;
  if (--it->second == 0) ranges_.erase(it);
  Rebuild();
}

bool KnownRanges::Covers(uintptr_t begin, size_t n) const {
  auto it = merged_.upper_bound(begin);  // the first interval starting after begin
  if (it == merged_.begin()) return false;
  --it;  // the last interval starting at or before begin
  return begin + n > begin && begin + n <= it->second;
}

void KnownRanges::Rebuild() {
  merged_.clear();
  // ranges_ is sorted by begin: extend the last interval while they overlap or touch.
  for (const auto& [range, count] : ranges_) {
    if (!merged_.empty() && range.first <= std::prev(merged_.end())->second) {
      auto& end = std::prev(merged_.end())->second;
      if (range.second > end) end = range.second;
    } else {
      merged_.emplace(range.first, range.second);
    }
  }
}

namespace {

uintptr_t PageSize() {
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

// The whole of /proc/self/maps ("" if it cannot be read).
std::string ReadMaps() {
  std::string text;
  int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char chunk[16384];
  for (;;) {
    ssize_t r = ::read(fd, chunk, sizeof chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    text.append(chunk, static_cast<size_t>(r));
  }
  ::close(fd);
  return text;
}

// Walks /proc/self/maps: every byte of [addr, addr + n) is in a mapping
// whose permissions include 'r' (and 'w' with `write`).  Sets *bad to the
// first byte that is not.
bool MapsAllow(uintptr_t addr, size_t n, bool write, uintptr_t* bad) {
  const std::string maps = ReadMaps();
  uintptr_t cur = addr;
  const uintptr_t end = addr + n;
  const char* p = maps.c_str();
  while (*p && cur < end) {
    char* q;
    const uintptr_t lo = std::strtoull(p, &q, 16);
    if (*q != '-') break;
    const uintptr_t hi = std::strtoull(q + 1, &q, 16);
    while (*q == ' ') ++q;
    const bool r = q[0] == 'r', w = q[0] && q[1] == 'w';
    if (hi > cur) {
      if (lo > cur || !r || (write && !w)) break;  // a hole, or not allowed from cur on
      cur = hi;
    }
    const char* nl = std::strchr(q, '\n');
    if (!nl) break;
    p = nl + 1;
  }
  if (cur >= end) return true;
  *bad = cur;
  return false;
}

// Probes one byte of every page of [addr, addr + n) with process_vm_readv
// on this process: the kernel reads them as a debugger would, so nothing
// faults here.  Returns 1 (all readable), 0 (*bad is the first byte that is
// not) or -1 (the system call is unavailable).
int ProbeReadable(uintptr_t addr, size_t n, uintptr_t* bad) {
  constexpr size_t kBatch = 1024;  // IOV_MAX
  const uintptr_t page = PageSize();
  const uintptr_t last = addr + n - 1;
  const pid_t self = ::getpid();
  char scratch[kBatch];
  iovec remote[kBatch];
  uintptr_t next = addr;  // the next byte to probe: addr, then the start of every later page
  bool more = true;
  while (more) {
    size_t count = 0;
    while (more && count < kBatch) {
      remote[count++] = {reinterpret_cast<void*>(next), 1};
      const uintptr_t following = (next & ~(page - 1)) + page;
      if (following == 0 || following > last) {
        more = false;
      } else {
        next = following;
      }
    }
    iovec local = {scratch, count};
    ssize_t r = ::process_vm_readv(self, &local, 1, remote, count, 0);
    if (r < 0) {
      if (errno == EFAULT) {
        *bad = reinterpret_cast<uintptr_t>(remote[0].iov_base);
        return 0;
      }
      return -1;  // ENOSYS, EPERM (seccomp, a container): unavailable
    }
    if (static_cast<size_t>(r) < count) {
      *bad = reinterpret_cast<uintptr_t>(remote[r].iov_base);
      return 0;
    }
  }
  return 1;
}

// Whether [addr, addr + n) can be written, without writing it:
// madvise(MADV_POPULATE_WRITE) faults its pages in writable, as a write
// would (the call is about to write them anyway), and fails where a write
// would fault.  Returns 1 (writable), 0 (*bad is the first byte that is not)
// or -1 (cannot tell: an old kernel, a device mapping; ask /proc/self/maps).
int ProbeWritable(uintptr_t addr, size_t n, uintptr_t* bad) {
  const uintptr_t page = PageSize();
  const uintptr_t begin = addr & ~(page - 1);
  const uintptr_t end = (addr + n + page - 1) & ~(page - 1);
  if (end <= begin) return -1;  // the last page of the address space
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0) return 1;
  if (errno != EFAULT && errno != ENOMEM) return -1;  // EINVAL: unknown advice, or not a plain mapping
  // Not mapped (ENOMEM) or a write would fault (EFAULT): /proc/self/maps
  // says where, unless the pages are mapped writable and only writing to
  // them fails (a file mapping beyond the end of its file).
  if (MapsAllow(addr, n, /*write=*/true, bad)) *bad = addr;
  return 0;
}

}  // namespace

bool MappedWritable(uintptr_t addr, size_t n) {
  uintptr_t bad = 0;
  return n > 0 && addr + n > addr && MapsAllow(addr, n, /*write=*/true, &bad);
}

std::string LocalAddressProblem(uint64_t addr, size_t n, bool writable) {
  if (n == 0) return {};
  if (addr + n < addr) {
    return fmt::format("local address {:#x} ({} bytes) runs past the end of the address space", addr, n);
  }
  if (S().known.Covers(addr, n)) return {};  // the fast path: memory registered or allocated here
  ++S().address_slow_checks;
  uintptr_t bad = 0;
  if (writable) {  // a destination: only written
    int w = ProbeWritable(addr, n, &bad);
    if (w < 0) w = MapsAllow(addr, n, /*write=*/true, &bad) ? 1 : 0;
    if (w == 0) {
      return fmt::format(
          "local address {:#x} ({} bytes) is not memory this process can write: {:#x} is not writable (nor is the "
          "range memory registered or allocated through hixl)",
          addr, n, bad);
    }
    return {};
  }
  int r = ProbeReadable(addr, n, &bad);
  if (r < 0) r = MapsAllow(addr, n, /*write=*/false, &bad) ? 1 : 0;
  if (r == 0) {
    return fmt::format(
        "local address {:#x} ({} bytes) is not memory this process can read: {:#x} is not readable (nor is the range "
        "memory registered or allocated through hixl)",
        addr, n, bad);
  }
  return {};
}

}  // namespace hixl_py

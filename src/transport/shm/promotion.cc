#include "transport/shm/promotion.h"

#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "base/socket.h"
#include "transport/shm/mapping.h"
#include "transport/shm/proc_maps.h"
#include "transport/shm/write_guard.h"

namespace hixl::transport::shm {

namespace {

struct Record {
  uint64_t lo = 0, hi = 0;
  uint32_t id = 0;
  net::Fd fd;
  int refs = 0;
};

// The process's promoted ranges, by lo.  Never destroyed (a handler may
// run at exit or in a forked child).
struct State {
  std::mutex mu;
  std::map<uint64_t, Record> records;  // guarded by mu
  uint32_t next_id = 1;                // guarded by mu
};

State& S() {
  static State* s = new State;  // NOLINT(cppcoreguidelines-owning-memory): never freed, see above
  return *s;
}

// The memfd's name, and how /proc/self/maps shows a mapping of it.
std::string Name(uint32_t id) { return fmt::format("hixl-reg-{}", id & ~kPromotedSegmentBit); }
std::string PathPrefix(uint32_t id) { return "/memfd:" + Name(id) + " "; }

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

// The copies go through system calls, not memcpy: the covering pages hold
// bytes outside the registered range (a malloc header, a sanitizer's
// redzone) that an instrumented memcpy would report.
bool WriteAll(int fd, const void* src, uint64_t n) {
  uint64_t done = 0;
  while (done < n) {
    const long k =
        ::syscall(SYS_pwrite64, fd, static_cast<const uint8_t*>(src) + done, n - done, static_cast<off_t>(done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += static_cast<uint64_t>(k);
  }
  return true;
}

bool ReadAll(int fd, void* dst, uint64_t n) {
  uint64_t done = 0;
  while (done < n) {
    const long k = ::syscall(SYS_pread64, fd, static_cast<uint8_t*>(dst) + done, n - done, static_cast<off_t>(done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += static_cast<uint64_t>(k);
  }
  return true;
}

// Puts private anonymous memory holding the memfd's bytes over [lo, hi),
// in one step: the copy is filled elsewhere and moved over the range by the
// mremap system call, so a thread that reads the range meanwhile sees its
// bytes, never zeros (a program's own globals may be promoted, and the
// sanitizers' runtimes read theirs from any thread).  The raw system call,
// as UCX's mremap hook drops mremap's fifth argument; then a mremap of the
// range onto itself through the C library, which the kernel does not act
// on but memory hooks such as UCX's see as the range unmapped and mapped
// again (so that no cache of theirs keeps the shared pages).  A write by
// another thread while the copy is made is still lost: the contract that no
// other thread writes the range during deregistration stands.
bool Privatise(uint64_t lo, uint64_t hi, int fd) {
  const uint64_t n = hi - lo;
  void* fresh = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fresh == MAP_FAILED) return false;
  if (!ReadAll(fd, fresh, n)) {
    ::munmap(fresh, n);
    return false;
  }
  const long moved = ::syscall(SYS_mremap, fresh, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, lo);
  if (moved != static_cast<long>(lo)) {
    ::munmap(fresh, n);
    return false;
  }
  (void)::mremap(reinterpret_cast<void*>(lo), n, n, 0);
  return true;
}

// fork: the child makes every promoted range private again and forgets the
// records (its copies are not registered).  The lock is held across the
// fork, so the records are consistent in the child.
void AtForkPrepare() { S().mu.lock(); }
void AtForkParent() { S().mu.unlock(); }
void AtForkChild() {
  State& s = S();
  for (auto& [lo, r] : s.records) {
    if (AllMappedFrom(ReadSelfMaps(r.lo, r.hi), r.lo, r.hi, PathPrefix(r.id))) (void)Privatise(r.lo, r.hi, r.fd.get());
  }
  s.records.clear();
  s.mu.unlock();
}

}  // namespace

Result<PromotedRange> Promote(uint64_t base, uint64_t len) {
  static std::once_flag atfork;
  std::call_once(atfork, [] { ::pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild); });
  const uint64_t page = PageSize();
  if (len == 0 || base + len < base || base + len > UINT64_MAX - page) {
    return Err(Errc::kUnsupported, "an empty or wrapping range");
  }
  const uint64_t lo = base & ~(page - 1);
  const uint64_t hi = (base + len + page - 1) & ~(page - 1);
  State& s = S();
  std::lock_guard lock(s.mu);
  // A promoted range that holds these pages already (two regions in the
  // same pages): one more reference.  One that overlaps them in part: no.
  auto it = s.records.upper_bound(lo);
  if (it != s.records.begin()) --it;
  for (; it != s.records.end() && it->first < hi; ++it) {
    Record& r = it->second;
    if (r.hi <= lo) continue;
    if (r.lo <= lo && hi <= r.hi && AllMappedFrom(ReadSelfMaps(r.lo, r.hi), r.lo, r.hi, PathPrefix(r.id))) {
      ++r.refs;
      return PromotedRange{r.id, r.fd.get(), r.lo, r.hi};
    }
    return Err(Errc::kUnsupported, "its pages overlap a promoted range [{:#x}, {:#x}) in part", r.lo, r.hi);
  }
  const Promotable p = CheckPromotable(ReadSelfMaps(lo, hi), lo, hi);
  if (p != Promotable::kYes) return Err(Errc::kUnsupported, "{}", Describe(p));
  const uint32_t id = kPromotedSegmentBit | s.next_id;
  if (++s.next_id == kPromotedSegmentBit) s.next_id = 1;
  const std::string name = Name(id);
  net::Fd fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return Err(Errc::kNoMemory, "memfd_create failed: {}", std::strerror(errno));
  const uint64_t n = hi - lo;
  if (::ftruncate(fd.get(), static_cast<off_t>(n)) != 0) {
    return Err(Errc::kNoMemory, "cannot size a memfd to {} bytes: {}", n, std::strerror(errno));
  }
  HIXL_RETURN_IF_ERROR(SealSize(fd.get()));
  // Other threads' writes wait from here until the memfd is mapped (the
  // guard's end of scope): none lands in a page already copied.
  HIXL_ASSIGN_OR_RETURN(WriteGuard guard, WriteGuard::Hold(lo, hi));
  if (!WriteAll(fd.get(), reinterpret_cast<const void*>(lo), n)) {
    return Err(Errc::kNoMemory, "cannot fill a memfd of {} bytes: {}", n, std::strerror(errno));
  }
  void* at = ::mmap(reinterpret_cast<void*>(lo), n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd.get(), 0);
  if (at == MAP_FAILED) return Err(Errc::kNoMemory, "cannot map a memfd over the range: {}", std::strerror(errno));
  Record r;
  r.lo = lo;
  r.hi = hi;
  r.id = id;
  r.fd = std::move(fd);
  r.refs = 1;
  const int raw = r.fd.get();
  s.records.emplace(lo, std::move(r));
  return PromotedRange{id, raw, lo, hi};
}

void Unpromote(uint64_t base, uint64_t len) {
  const uint64_t page = PageSize();
  if (len == 0 || base + len < base || base + len > UINT64_MAX - page) return;
  const uint64_t lo = base & ~(page - 1);
  const uint64_t hi = (base + len + page - 1) & ~(page - 1);
  State& s = S();
  std::lock_guard lock(s.mu);
  auto it = s.records.upper_bound(lo);
  if (it == s.records.begin()) return;
  --it;
  Record& r = it->second;
  if (!(r.lo <= lo && hi <= r.hi) || --r.refs > 0) return;
  // Pages the owner unmapped or replaced meanwhile are left alone.
  if (AllMappedFrom(ReadSelfMaps(r.lo, r.hi), r.lo, r.hi, PathPrefix(r.id))) (void)Privatise(r.lo, r.hi, r.fd.get());
  s.records.erase(it);
}

bool IsPromoted(uint64_t addr) {
  State& s = S();
  std::lock_guard lock(s.mu);
  auto it = s.records.upper_bound(addr);
  if (it == s.records.begin()) return false;
  --it;
  return addr < it->second.hi;
}

}  // namespace hixl::transport::shm

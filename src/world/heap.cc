#include "world/heap.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace hixl {

namespace {
constexpr uint64_t kAlign = 64;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kMinSegment = uint64_t{64} << 20;   // 64 MiB
constexpr uint64_t kSegmentAlign = uint64_t{2} << 20;  // 2 MiB

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

std::vector<uint64_t> SymmetricHeap::CandidateBases() {
#if HIXL_UNDER_TSAN
  // Inside ThreadSanitizer's low application range, above where a non-PIE
  // program and brk live.
  return {0x001000000000ull, 0x003000000000ull, 0x005000000000ull};
#else
  // Above AddressSanitizer's shadow memory and below the usual mmap area.
  return {0x200000000000ull, 0x280000000000ull, 0x300000000000ull, 0x380000000000ull};
#endif
}

Result<std::unique_ptr<SymmetricHeap>> SymmetricHeap::Reserve(uint64_t base, uint64_t bytes) {
  void* want = reinterpret_cast<void*>(base);
  void* p = ::mmap(want, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) {
    return Err(Errc::kNoMemory, "cannot reserve {} bytes of addresses at {:#x} for the symmetric heap: {}", bytes, base,
               std::strerror(errno));
  }
  if (p != want) {  // kernels before 4.17 ignore MAP_FIXED_NOREPLACE
    ::munmap(p, bytes);
    return Err(Errc::kNoMemory, "addresses at {:#x} for the symmetric heap are taken", base);
  }
  return std::unique_ptr<SymmetricHeap>(new SymmetricHeap(base, bytes));
}

SymmetricHeap::~SymmetricHeap() {
  ::munmap(reinterpret_cast<void*>(base_), bytes_);
  for (Segment& s : segments_) ::close(s.fd);
}

bool SymmetricHeap::Contains(const void* p) const {
  auto a = reinterpret_cast<uint64_t>(p);
  return a >= base_ && a - base_ < bytes_;
}

Result<uint32_t> SymmetricHeap::AddSegment(uint64_t min_size) {
  // Segments grow with the heap so that a big heap has few of them.
  uint64_t size = std::max({kMinSegment, RoundUp(min_size, kSegmentAlign), RoundUp(used_ / 2, kSegmentAlign)});
  if (used_ + size > bytes_) {
    return Err(Errc::kNoMemory, "symmetric heap exhausted: {} bytes in use, {} more requested", used_, size);
  }
  int fd = ::memfd_create("hixl-heap", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Err(Errc::kNoMemory, "memfd_create failed: {}", std::strerror(errno));
  // Sized once and sealed: peers map only a segment that cannot shrink
  // under them (shm::MapPeerFile).
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    ::close(fd);
    return Err(Errc::kNoMemory, "cannot size and seal a {}-byte heap segment: {}", size, std::strerror(e));
  }
  void* at = reinterpret_cast<void*>(base_ + used_);
  void* p = ::mmap(at, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    ::close(fd);
    return Err(Errc::kNoMemory, "cannot map a {}-byte heap segment: {}", size, std::strerror(e));
  }
  Segment s;
  s.fd = fd;
  s.offset = used_;
  s.size = size;
  s.free.emplace(0, size);
  segments_.push_back(std::move(s));
  used_ += size;
  return static_cast<uint32_t>(segments_.size() - 1);
}

Result<SymmetricHeap::Block> SymmetricHeap::Alloc(size_t size) {
  if (size == 0) return Err(Errc::kInvalidArg, "hixl_alloc of 0 bytes");
  if (size > bytes_) return Err(Errc::kNoMemory, "hixl_alloc of {} bytes exceeds the heap's address range", size);
  const uint64_t need = RoundUp(size, size >= 65536 ? kPage : kAlign);
  std::lock_guard lock(mu_);
  // First fit over segments in order, then over free blocks by offset: the
  // same calls give the same answer in every rank.
  for (uint32_t id = 0;; ++id) {
    if (id == segments_.size()) {
      HIXL_ASSIGN_OR_RETURN(uint32_t added, AddSegment(need));
      (void)added;
    }
    Segment& s = segments_[id];
    for (auto it = s.free.begin(); it != s.free.end(); ++it) {
      if (it->second < need) continue;
      const uint64_t off = it->first;
      const uint64_t rest = it->second - need;
      s.free.erase(it);
      if (rest > 0) s.free.emplace(off + need, rest);
      Block b;
      b.ptr = reinterpret_cast<void*>(base_ + s.offset + off);
      b.size = need;
      b.fd = s.fd;
      b.segment_id = id;
      b.segment_offset = off;
      b.segment_size = s.size;
      live_.emplace(reinterpret_cast<uint64_t>(b.ptr), std::make_pair(id, need));
      return b;
    }
  }
}

Result<size_t> SymmetricHeap::Free(void* ptr) {
  std::lock_guard lock(mu_);
  auto it = live_.find(reinterpret_cast<uint64_t>(ptr));
  if (it == live_.end()) return Err(Errc::kInvalidArg, "{} was not returned by hixl_alloc (or was freed)", ptr);
  auto [id, size] = it->second;
  live_.erase(it);
  Segment& s = segments_[id];
  uint64_t off = reinterpret_cast<uint64_t>(ptr) - base_ - s.offset;
  // Give large blocks' pages back to the system; the range stays mapped.
  if (size >= (uint64_t{1} << 21)) ::madvise(ptr, size, MADV_REMOVE);
  // Insert and merge with neighbours.
  auto [pos, ok] = s.free.emplace(off, size);
  (void)ok;
  auto next = std::next(pos);
  if (next != s.free.end() && pos->first + pos->second == next->first) {
    pos->second += next->second;
    s.free.erase(next);
  }
  if (pos != s.free.begin()) {
    auto prev = std::prev(pos);
    if (prev->first + prev->second == pos->first) {
      prev->second += pos->second;
      s.free.erase(pos);
    }
  }
  return static_cast<size_t>(size);
}

}  // namespace hixl

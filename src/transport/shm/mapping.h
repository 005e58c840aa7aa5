// Mappings of shared memory (heap segments, relay channels) and the huge
// page advice for registered memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "base/status.h"

namespace hixl::transport::shm {

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
// hixl passes to a peer (a heap segment, a relay channel) can never shrink
// under the peer's mapping, which would raise SIGBUS in the peer.  The memfd
// must have been made with MFD_ALLOW_SEALING.
Status SealSize(int memfd);

// Maps the first n bytes of a memfd that a peer passed: only one whose size
// is sealed against shrinking and holds at least n bytes (fstat), so that no
// access to the mapping can raise SIGBUS whatever the peer does later.
// `what` names it in the error ("heap segment 3 of rank 1").
Result<Mapping> MapPeerFile(int fd, size_t n, const std::string& what);

// Asks for transparent huge pages (MADV_HUGEPAGE) on the 2 MiB-aligned
// interior of a registered region of at least 4 MiB, where it lies in
// private anonymous memory (malloc, mmap(MAP_ANONYMOUS|MAP_PRIVATE), the
// brk heap); file-backed and shared mappings are left as they are.  Pages
// faulted from now on are then huge, so cross-memory attach pins and walks
// 2 MiB pages instead of 4 KiB ones.  Contents do not change; pages that
// already exist stay small (khugepaged may collapse them later).  A hint:
// every failure (THP off, memory the kernel refuses) is ignored.
void AdviseHugePages(uint64_t base, uint64_t len);

}  // namespace hixl::transport::shm

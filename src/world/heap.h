// The symmetric heap.  A large range of virtual addresses is reserved at the
// same address in every rank (nothing is committed); memory is backed on
// demand by shared-memory segments (memfds) mapped into that range.  The
// allocator is deterministic: the same sequence of Alloc/Free calls yields
// the same addresses in every rank, which is what makes the memory
// symmetric.  Peers on the same host map the same segments, so a put into
// the heap is a plain memcpy.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "base/user_memory.h"  // HIXL_UNDER_TSAN

namespace hixl {

class SymmetricHeap {
 public:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;  // as rounded by the allocator
    int fd = -1;      // the segment's memfd (owned by the heap)
    uint32_t segment_id = 0;
    uint64_t segment_offset = 0;
    uint64_t segment_size = 0;
  };

  // Candidate base addresses, tried in order; every rank tries the same list,
  // and the world checks that all ranks got the same one.
  static std::vector<uint64_t> CandidateBases();
#if HIXL_UNDER_TSAN
  // ThreadSanitizer keeps the middle of the address space for its shadow;
  // its low application range (below 512 GiB) holds a smaller heap.
  static constexpr uint64_t kReserveBytes = uint64_t{1} << 37;  // 128 GiB of addresses
#else
  static constexpr uint64_t kReserveBytes = uint64_t{1} << 40;  // 1 TiB of addresses
#endif

  // Reserves the address range at `base`.  kNoMemory if the range is taken.
  static Result<std::unique_ptr<SymmetricHeap>> Reserve(uint64_t base, uint64_t bytes = kReserveBytes);
  ~SymmetricHeap();  // unmaps everything, closes the segments

  uint64_t base() const { return base_; }
  bool Contains(const void* p) const;
  Result<Block> Alloc(size_t size);
  // Returns the block's size.  kInvalidArg for a pointer the heap did not give.
  Result<size_t> Free(void* ptr);

 private:
  struct Segment {
    int fd = -1;
    uint64_t offset = 0;  // from base_
    uint64_t size = 0;
    std::map<uint64_t, uint64_t> free;  // offset in segment -> length
  };
  SymmetricHeap(uint64_t base, uint64_t bytes) : base_(base), bytes_(bytes) {}
  Result<uint32_t> AddSegment(uint64_t min_size);

  const uint64_t base_;
  const uint64_t bytes_;
  std::mutex mu_;
  std::vector<Segment> segments_;
  uint64_t used_ = 0;                                       // bytes of addresses used by segments
  std::map<uint64_t, std::pair<uint32_t, uint64_t>> live_;  // address -> (segment, size)
};

}  // namespace hixl

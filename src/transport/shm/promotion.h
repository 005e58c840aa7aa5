// Promotion of registered memory to shared memory, so that peers on this
// host map it and a put or get into it is one memcpy, as for the symmetric
// heap, instead of cross-memory attach.
//
// Promote(base, len) takes the pages that cover [base, base+len), when they
// lie wholly in private anonymous read-write memory (proc_maps.h: malloc'd
// blocks outside the brk heap, numpy arrays, tensors, anonymous mmaps),
// copies their contents into a new memfd sealed against shrinking and
// growing, and maps the memfd over them with MAP_FIXED|MAP_SHARED: the
// owner's pointers stay valid and see the same bytes, neighbours of the
// range in the same pages included.  The memfd is then served to peers as
// heap segments are (shm_server.h), under an id with kPromotedSegmentBit.
//
// The contract for the owner:
// * Other threads may go on using the pages while the range is being
//   registered: their writes wait (a userfaultfd write-protect,
//   write_guard.h) from the copy until the memfd is mapped, then land in
//   it.  Where the kernel allows no such guard the range is not promoted
//   (kUnsupported, saying why).  Device (DMA) writes are not held.  The
//   owner's use of the memory before and after is unchanged.
// * No other thread may use those pages while they are deregistered:
//   Unpromote puts private anonymous memory back over them (mmap MAP_FIXED)
//   and then copies their contents in, unless the owner has meanwhile
//   unmapped or replaced them (freed the memory before deregistering it):
//   then it leaves the address space alone.
// * fork: a child gets private copies of every promoted range as they are
//   at the fork (a pthread_atfork child handler), so parent and child never
//   share pages, as with private memory; the child's copies are not
//   registered.
// * madvise(MADV_DONTNEED) on promoted pages keeps their contents instead of
//   zeroing them (shared memory); mprotect and munmap behave as before.
// Thread-safe.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace hixl::transport::shm {

// Set in the segment id of every promoted range (heap segments lack it).
constexpr uint32_t kPromotedSegmentBit = 0x80000000u;

struct PromotedRange {
  uint32_t segment_id = 0;  // unique in the process, with kPromotedSegmentBit
  int fd = -1;              // the memfd, owned by the promotion: valid until the matching Unpromote
  uint64_t lo = 0;          // the covering pages [lo, hi)
  uint64_t hi = 0;
};

// Promotes the pages covering [base, base+len), or takes one more reference
// on a promoted range that already holds them.  kUnsupported, saying why,
// where the memory is not eligible (or overlaps a promoted range only in
// part); any error leaves the memory as it was.
Result<PromotedRange> Promote(uint64_t base, uint64_t len);

// Drops the reference a successful Promote(base, len) took; the last one
// restores private memory (see above) and closes the memfd.
void Unpromote(uint64_t base, uint64_t len);

// Whether `addr` lies in a promoted range (for tests and logs).
bool IsPromoted(uint64_t addr);

}  // namespace hixl::transport::shm

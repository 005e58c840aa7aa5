// Mappings of shared memory (heap segments, relay channels) and the huge
// page advice for registered memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "base/shared_file.h"
#include "base/status.h"

namespace hixl::transport::shm {

// The generic pieces live in base/shared_file.h.
using sharedmem::MapPeerFile;
using sharedmem::Mapping;
using sharedmem::MapShared;
using sharedmem::SealSize;

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

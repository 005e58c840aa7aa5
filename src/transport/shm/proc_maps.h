// Reading /proc/self/maps to decide whether registered memory may be
// promoted to shared memory (promotion.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hixl::transport::shm {

// One line of /proc/<pid>/maps: "start-end perms offset dev inode [path]".
struct MapsEntry {
  uint64_t start = 0;
  uint64_t end = 0;  // exclusive
  bool read = false;
  bool write = false;
  bool exec = false;
  bool shared = false;  // 's' (else 'p': private)
  uint64_t offset = 0;
  uint64_t inode = 0;
  std::string path;  // empty for anonymous memory; "[heap]", "[stack]", a file, "/memfd:... (deleted)"
};

// Parses one line; false for anything malformed (missing fields, a bad hex
// number, a number past 64 bits, start >= end, a permission string not of
// the form [r-][w-][x-][ps]).  Never reads past the line.
bool ParseMapsLine(std::string_view line, MapsEntry* out);

// The entries of /proc/self/maps that overlap [lo, hi), in address order;
// malformed lines are skipped.
std::vector<MapsEntry> ReadSelfMaps(uint64_t lo, uint64_t hi);

// Why the pages [lo, hi) (page-aligned) may or may not be promoted.
enum class Promotable {
  kYes,          // wholly inside private, anonymous, read-write mappings
  kNotMapped,    // a hole in the range
  kStack,        // the main thread's stack ([stack]): it grows down; never
  kHeap,         // the brk heap ([heap]): brk may shrink it under the mapping
  kFileBacked,   // a file, hugetlbfs, or a shared memory file (already shared)
  kSpecial,      // [vdso], [vvar], [vsyscall] and other named kernel mappings
  kShared,       // MAP_SHARED anonymous memory (already shared)
  kNotWritable,  // not read+write (or executable)
};

// Decides from the maps entries (those of ReadSelfMaps(lo, hi)).
Promotable CheckPromotable(const std::vector<MapsEntry>& entries, uint64_t lo, uint64_t hi);

// In words, for the debug log: "private anonymous memory", "the brk heap", ...
const char* Describe(Promotable p);

// True when the pages [lo, hi) are all mapped shared from a file whose maps
// path starts with `path_prefix` (a promoted range's memfd, "/memfd:NAME "),
// its first byte at lo.
bool AllMappedFrom(const std::vector<MapsEntry>& entries, uint64_t lo, uint64_t hi, std::string_view path_prefix);

}  // namespace hixl::transport::shm

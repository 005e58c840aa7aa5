#include "transport/shm/mapping.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace hixl::transport::shm {

namespace {

constexpr uint64_t kHugePage = uint64_t{2} << 20;
constexpr uint64_t kHugeAdviceMin = uint64_t{4} << 20;  // smaller regions are left alone

}  // namespace

void AdviseHugePages(uint64_t base, uint64_t len) {
  if (len < kHugeAdviceMin) return;
  const uint64_t lo = (base + kHugePage - 1) & ~(kHugePage - 1);
  const uint64_t hi = (base + len) & ~(kHugePage - 1);
  if (hi <= lo) return;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    // "start-end perms offset dev inode [path]"
    unsigned long long start = 0, end = 0, offset = 0, inode = 0;
    char perms[8] = {}, dev[32] = {};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %31s %llu %n", &start, &end, perms, &offset, dev, &inode,
                    &path_at) < 6) {
      continue;
    }
    if (end <= lo) continue;
    if (start >= hi) break;  // the file is sorted by address
    const std::string path = path_at > 0 ? line.substr(static_cast<size_t>(path_at)) : std::string();
    const bool anonymous_private = inode == 0 && perms[3] == 'p' && (path.empty() || path == "[heap]");
    if (!anonymous_private) continue;
    const uint64_t a = std::max<uint64_t>(lo, start), b = std::min<uint64_t>(hi, end);
    if (b > a) (void)::madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE);
  }
}

}  // namespace hixl::transport::shm

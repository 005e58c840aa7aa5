#include "transport/shm/proc_maps.h"

#include <fstream>

namespace hixl::transport::shm {

namespace {

// Reads a hex number of 1 to 16 digits at s[*i], moving *i past it.
bool Hex(std::string_view s, size_t* i, uint64_t* out) {
  uint64_t v = 0;
  size_t digits = 0;
  while (*i < s.size()) {
    const char c = s[*i];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0) break;
    if (++digits > 16) return false;
    v = (v << 4) | static_cast<uint64_t>(d);
    ++*i;
  }
  *out = v;
  return digits > 0;
}

bool Dec(std::string_view s, size_t* i, uint64_t* out) {
  uint64_t v = 0;
  size_t digits = 0;
  while (*i < s.size() && s[*i] >= '0' && s[*i] <= '9') {
    const auto d = static_cast<uint64_t>(s[*i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
    ++digits;
    ++*i;
  }
  *out = v;
  return digits > 0;
}

bool Expect(std::string_view s, size_t* i, char c) {
  if (*i >= s.size() || s[*i] != c) return false;
  ++*i;
  return true;
}

void SkipSpaces(std::string_view s, size_t* i) {
  while (*i < s.size() && s[*i] == ' ') ++*i;
}

}  // namespace

bool ParseMapsLine(std::string_view line, MapsEntry* out) {
  MapsEntry e;
  size_t i = 0;
  if (!Hex(line, &i, &e.start) || !Expect(line, &i, '-') || !Hex(line, &i, &e.end) || !Expect(line, &i, ' ')) {
    return false;
  }
  if (e.start >= e.end) return false;
  if (line.size() - i < 5) return false;
  const std::string_view perms = line.substr(i, 4);
  if ((perms[0] != 'r' && perms[0] != '-') || (perms[1] != 'w' && perms[1] != '-') ||
      (perms[2] != 'x' && perms[2] != '-') || (perms[3] != 'p' && perms[3] != 's')) {
    return false;
  }
  e.read = perms[0] == 'r';
  e.write = perms[1] == 'w';
  e.exec = perms[2] == 'x';
  e.shared = perms[3] == 's';
  i += 4;
  if (!Expect(line, &i, ' ') || !Hex(line, &i, &e.offset) || !Expect(line, &i, ' ')) return false;
  // dev: "major:minor" in hex
  uint64_t major = 0, minor = 0;
  if (!Hex(line, &i, &major) || !Expect(line, &i, ':') || !Hex(line, &i, &minor) || !Expect(line, &i, ' ')) {
    return false;
  }
  if (!Dec(line, &i, &e.inode)) return false;
  if (i < line.size() && line[i] != ' ') return false;
  SkipSpaces(line, &i);
  e.path = std::string(line.substr(i));
  *out = std::move(e);
  return true;
}

std::vector<MapsEntry> ReadSelfMaps(uint64_t lo, uint64_t hi) {
  std::vector<MapsEntry> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    MapsEntry e;
    if (!ParseMapsLine(line, &e)) continue;
    if (e.end <= lo) continue;
    if (e.start >= hi) break;  // the file is sorted by address
    out.push_back(std::move(e));
  }
  return out;
}

Promotable CheckPromotable(const std::vector<MapsEntry>& entries, uint64_t lo, uint64_t hi) {
  uint64_t at = lo;  // the first byte not yet seen covered
  for (const MapsEntry& e : entries) {
    if (e.end <= at) continue;
    if (e.start > at) return Promotable::kNotMapped;
    if (e.path == "[stack]" || e.path.rfind("[stack:", 0) == 0) return Promotable::kStack;
    if (e.path == "[heap]") return Promotable::kHeap;
    if (!e.path.empty() && e.path[0] == '[') return Promotable::kSpecial;
    if (e.inode != 0 || !e.path.empty()) return Promotable::kFileBacked;
    if (e.shared) return Promotable::kShared;
    if (!e.read || !e.write || e.exec) return Promotable::kNotWritable;
    at = e.end;
    if (at >= hi) return Promotable::kYes;
  }
  return Promotable::kNotMapped;
}

const char* Describe(Promotable p) {
  switch (p) {
    case Promotable::kYes: return "private anonymous memory";
    case Promotable::kNotMapped: return "pages not all mapped";
    case Promotable::kStack: return "the main thread's stack";
    case Promotable::kHeap: return "the brk heap ([heap])";
    case Promotable::kFileBacked: return "file-backed, hugetlbfs or shared-file memory";
    case Promotable::kSpecial: return "a special kernel mapping";
    case Promotable::kShared: return "shared anonymous memory";
    case Promotable::kNotWritable: return "memory not mapped read-write";
  }
  return "?";
}

bool AllMappedFrom(const std::vector<MapsEntry>& entries, uint64_t lo, uint64_t hi, std::string_view path_prefix) {
  uint64_t at = lo;
  for (const MapsEntry& e : entries) {
    if (e.end <= at) continue;
    if (e.start > at || !e.shared || e.path.compare(0, path_prefix.size(), path_prefix) != 0) return false;
    if (e.offset != e.start - lo) return false;  // mapped at its own offset, from the file's start at lo
    at = e.end;
    if (at >= hi) return true;
  }
  return false;
}

}  // namespace hixl::transport::shm

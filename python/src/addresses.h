// Local int addresses: is [addr, addr + n) memory this process may read (or
// write)?  A Python int taken as a local address is checked before any byte
// of it is touched, so a bad int raises instead of crashing the interpreter.
//
// Fast path: the ranges the binding itself knows are valid, readable and
// writable (blocks from hixl.alloc, memory registered with the world or an
// engine), a sorted table with an O(log n) lookup and no system call.
// Slow path, for anything else: process_vm_readv on this process probes one
// byte of every page (never touching the memory itself), and a range that
// will be written must instead pass madvise(MADV_POPULATE_WRITE), which faults
// its pages in writable without writing them (/proc/self/maps where the
// kernel cannot tell).
// Objects that expose memory (numpy, torch, buffer protocol, hixl.Buffer)
// are trusted as they are and never come here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace hixl_py {

// A multiset of address ranges and the union of them, for the lookup.
// Adding or removing rebuilds the union (registration is rare); Covers is a
// map lookup.  Only memory that is readable and writable goes in.
class KnownRanges {
 public:
  void Add(uintptr_t begin, size_t n);
  // Drops one Add(begin, n); nothing if there is none.
  void Remove(uintptr_t begin, size_t n);
  // [begin, begin + n) lies inside the union (n > 0, no wrap-around).
  bool Covers(uintptr_t begin, size_t n) const;
  size_t size() const { return ranges_.size(); }

 private:
  void Rebuild();
  std::map<std::pair<uintptr_t, uintptr_t>, int> ranges_;  // [begin, end) -> how many Adds
  std::map<uintptr_t, uintptr_t> merged_;                  // begin -> end: disjoint, not touching
};

// Why [addr, addr + n) cannot be a local buffer of a call that reads it (or,
// with `writable`, writes it), in words naming the address and the size; ""
// when it can.  n == 0 is always fine (no byte is touched).
std::string LocalAddressProblem(uint64_t addr, size_t n, bool writable);

// /proc/self/maps shows every page of [addr, addr + n) mapped writable (n > 0).
bool MappedWritable(uintptr_t addr, size_t n);

}  // namespace hixl_py

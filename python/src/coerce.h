// Turning Python arguments into what the C++ API takes: addresses (ints,
// torch tensors, numpy arrays, buffer-protocol objects, hixl.Buffer),
// sizes, 64-bit words and timeouts.  A local object's memory comes with a
// Keep that holds the object (and its export) while a call uses it.  Bad
// arguments raise hixl.InvalidArgumentError (or UnsupportedError for
// device tensors) naming the call and the argument.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "state.h"

namespace hixl_py {

namespace py = pybind11;

struct Mem {
  uint64_t addr = 0;
  size_t nbytes = 0;
  bool sized = false;  // nbytes is known (an object, not an int)
  Keep keep;
};

// A Python int (not a bool) or a numpy integer scalar.
bool IsInt(py::handle h);
// An int in [0, 2**64).
uint64_t ToAddress(py::handle h, const std::string& what);
// A non-negative int that fits size_t.
size_t ToSize(py::handle h, const std::string& what);

// The memory of a local object.  `writable`: it will be written (get's
// destination, registered memory).
Mem ResolveLocal(py::handle h, const std::string& what, bool writable);

// An address on a peer.  Objects are accepted only where their local address
// is valid on the peer too: symmetric memory (a hixl.Buffer or a view of one).
Mem ResolveRemote(py::handle h, const std::string& what);

// The size of a transfer: `size`, or by default the local object's (else
// the remote object's) size; never more than either object holds.
size_t SizeFor(const char* api, const Mem& local, const char* local_name, const Mem& remote, const char* remote_name,
               py::handle size);

// A 64-bit word's value: an int in [-2**63, 2**64); negative values wrap
// around (two's complement), so atomic_add(rank, addr, -1) subtracts one.
uint64_t ToWord(py::handle h, const char* api, const char* name);

// Beyond 2**40 ms (35 years) is forever enough, and keeps deadlines from
// overflowing; negative means HIXL_TIMEOUT_MS.
int64_t ClampTimeout(int64_t ms);

// Raises hixl.InvalidArgumentError, naming `what`, the address and n,
// unless m (an int address) is followed by n bytes this process may read
// (write, with `writable`): memory registered or allocated through hixl (a
// table lookup), else memory the kernel says is readable (writable).
// Objects (m.sized) are trusted as they are.
void CheckLocal(const Mem& m, size_t n, const std::string& what, bool writable);

// A local 64-bit word: an int address (checked: 8 readable bytes), or an
// object exposing memory (its first 8 bytes).  The object is held (m.keep) while the call uses it.
Mem ResolveLocalWord(py::handle h, const std::string& what);

// A word on a peer: an int address, or symmetric memory (its first 8 bytes).
uint64_t ResolveRemoteWord(py::handle h, const std::string& what);

}  // namespace hixl_py

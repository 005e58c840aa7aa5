// The module's global state: the World, the hixl.Buffer blocks still
// allocated, and the Python objects that transfers in flight and
// registrations keep alive (with their buffer-protocol exports) until the
// fence, barrier or deregistration that releases them.  Used with the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <hixl/hixl.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "addresses.h"

namespace hixl_py {

namespace py = pybind11;

// Memory a transfer or a registration keeps alive: an object reference and,
// for buffer-protocol objects, the export itself.  Destroyed with the GIL.
struct ViewRelease {
  void operator()(Py_buffer* v) const {
    PyBuffer_Release(v);
    delete v;
  }
};
struct Keep {
  py::object obj;
  std::unique_ptr<Py_buffer, ViewRelease> view;  // released first (declared last)
  bool empty() const { return !view && !obj; }
};

struct BufferObject;

// Address ranges that used to be symmetric memory and now hold private
// copies for views that outlived finalize().  Unmapped when their last
// Buffer goes.
struct Rescued {
  uintptr_t begin = 0, end = 0;  // page-aligned
  int users = 0;
};

struct State {
  hixl::World* world = nullptr;  // never deleted: a World is only a token
  bool finalized = false;
  bool exiting = false;
  std::set<BufferObject*> buffers;  // blocks from alloc() that are still allocated
  struct Pending {
    uint64_t seq;
    Keep keep;
  };
  std::deque<Pending> pending;  // memory of transfers not yet fenced, by seq
  uint64_t next_seq = 1;
  std::map<uint64_t, std::vector<Keep>> registered;  // address -> one Keep per registration
  std::vector<Rescued> rescued;
  // Memory known to be valid local memory (addresses.h): the blocks in
  // `buffers`, world registrations (world_known: address -> the sizes
  // added), and every engine's registrations.
  KnownRanges known;
  std::map<uint64_t, std::vector<size_t>> world_known;
  uint64_t address_slow_checks = 0;  // checks the known ranges did not answer
};

// The one State.  Deliberately leaked: nothing here may be destroyed after
// the interpreter.
State& S();

// The World, or hixl.NotInitializedError naming `api`.
hixl::World& WorldOrRaise(const char* api);

// Keeps `keep` until the transfer it belongs to is complete; returns its
// sequence number (0 for nothing kept).
uint64_t Track(Keep keep);
// Drops what Track kept for a transfer that did not start.
void Untrack(uint64_t seq);
// Every transfer started before `mark` (a past S().next_seq) is complete.
void Completed(uint64_t mark);

}  // namespace hixl_py

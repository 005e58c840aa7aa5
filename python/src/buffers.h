// hixl.Buffer: a block of symmetric memory from hixl.alloc, as a raw CPython
// type that exports the block, zero-copy, through the buffer protocol.
// Every export and every transfer or registration in flight holds a small
// guard object (hixl._BufferView), so the block knows how many views still
// use it: Buffer.free() refuses while any does, and finalize() gives the
// views that survive it a private copy of their contents (Rescue) instead of
// leaving them pointing at unmapped memory.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <string>
#include <vector>

namespace hixl_py {

namespace py = pybind11;

enum BlockState : int { kLive = 0, kFreed = 1, kReleased = 2 };

struct BufferObject {
  PyObject_HEAD void* ptr;
  size_t nbytes;
  Py_ssize_t views;  // live guards: exports, and transfers or registrations in flight
  int state;
  int rescued;  // index into State::rescued, or -1
};

// Creates the Buffer and guard types and adds them to m (Buffer, _BufferView).
void AddBufferTypes(py::module_& m);

bool IsBuffer(py::handle h);
BufferObject* AsBuffer(py::handle h);

// A new Buffer owning the live block [ptr, ptr + nbytes) (added to
// S().buffers), or NULL with a Python error set.
BufferObject* NewBuffer(void* ptr, size_t nbytes);

// A new reference to a guard holding a view of b, or NULL with an error set.
PyObject* NewGuard(BufferObject* b);

// Raises unless b is live (freed: InvalidArgumentError; released by
// finalize: NotInitializedError), naming `api`.
void CheckLive(const BufferObject* b, const char* api);

// Frees b's block now (refused while views of it exist).
void FreeBuffer(BufferObject* b, const char* api);

// finalize(): every block is released.  The contents of a block that views
// still use, taken before the heap goes, so Rescue can put them back.
struct Snapshot {
  BufferObject* b;
  py::object ref;  // keeps b alive
  std::string bytes;
};

// Marks every block released (S().buffers is emptied) and returns snapshots
// of those that views still use.  Before World::Finalize.
std::vector<Snapshot> ReleaseBlocks();

// Gives every block that still has views after finalize a private copy of
// its last contents at the same address, so that the views stay valid.
// Returns how many blocks it could not save.  After World::Finalize.
int Rescue(std::vector<Snapshot>& saved);

}  // namespace hixl_py
